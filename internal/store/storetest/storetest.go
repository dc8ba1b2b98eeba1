// Package storetest is a conformance suite for implementations of Servo's
// store: the contract (Store) that the services — the dispatcher, the
// callbacks, the sweeper (zombie), the pull pool, the jobs endpoint and the
// events publisher — rely on, and the battery of subtests (Run) that checks
// an implementation keeps it, against a real database.
//
// A store's test calls Run with an Opener:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Opener{
//			New:  func(t *testing.T, cfg storetest.Config) storetest.Store { ... a store on a database of its own ... },
//			Same: func(t *testing.T, s storetest.Store) storetest.Store { ... a second client on s's database ... },
//		})
//	}
//
// The subtests are:
//
//   - Transitions: a task's life through Apply (create, enqueue, start,
//     heartbeat, complete), the attempt guard (a stale attempt, a wrong
//     worker), a terminal task refusing further events, and idempotent
//     creation.
//   - Races: two clients on one database applying conflicting events to
//     one task at once: exactly one wins, and the outbox holds the winner's
//     transitions, each once.
//   - Outbox: a task's transitions in seq order, each once (OutboxEntries,
//     TaskEvents); Undelivered, MarkFailed and DeleteDelivered.
//   - Due: the sweeper's lease query over every group of due shards, paged
//     with DueCursor, returns each due task once and nothing not due.
//   - Schema: a fresh database records store.SchemaVersion (CheckSchema),
//     and Migrate on it is a no-op.
//   - Quotas: a tenant limited to MaxRunning run slots holds the next task
//     QUEUED until a slot frees, and an admit event hands it the slot.
//
// Nothing timed is asserted below a second: events carry their own Now,
// leases last minutes, and "past" means an hour ago.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Store is the store contract the suite exercises: the methods of
// *store.Store that Servo's services use for tasks, transitions, the
// outbox, the sweeper's due queries, quotas and the schema (see
// zombie.Store, events.Outbox and jobs.Store, which are subsets of it, and
// the calls of dispatcher/, callbacks/ and internal/pull on their
// *store.Store). Listings, runs, counts, sweep records and outage pulses
// are not part of it.
type Store interface {
	// Tasks.

	// Create stores a submitted task PENDING, or returns the task its
	// idempotency key already names with existed.
	Create(ctx context.Context, t task.Task, now time.Time) (created task.Task, existed bool, err error)
	// CreateMany stores tasks (QUEUED with queued), one result each, in
	// input order; with quotas, a task of a limited scope is admitted.
	CreateMany(ctx context.Context, ts []task.Task, now time.Time, queued bool) []store.CreateResult
	// GetTask reads a task without its attempts (store.ErrNotFound).
	GetTask(ctx context.Context, id string) (task.Task, error)
	// Get reads a task with its attempts, oldest first.
	Get(ctx context.Context, id string) (task.Task, error)
	// AttemptsOf reads the attempts of a task already read.
	AttemptsOf(ctx context.Context, t *task.Task) ([]task.Attempt, error)
	// Attempts reads a task's attempts by id.
	Attempts(ctx context.Context, id string) ([]task.Attempt, error)
	// Apply runs an event against a task: the machine's result, committed
	// with its transitions' outbox entries, or refused (Result.Rejection).
	Apply(ctx context.Context, id string, ev task.Event) (task.Result, error)

	// Outbox.

	// OutboxGroups splits the due shards into the groups Undelivered takes.
	OutboxGroups() [][]int
	// Undelivered returns undelivered entries of a group of shards due by
	// dueBy, earliest first.
	Undelivered(ctx context.Context, shards []int, dueBy time.Time, limit int) ([]store.OutboxEntry, error)
	// DeleteDelivered deletes outbox documents (OutboxEntry.Doc) whose
	// events were delivered.
	DeleteDelivered(ctx context.Context, eventIDs []string) error
	// MarkFailed records failed deliveries and their next try.
	MarkFailed(ctx context.Context, failures []store.OutboxFailure) error
	// OutboxEntries returns every transition of a task in seq order, with
	// its delivery state.
	OutboxEntries(ctx context.Context, taskID string) ([]store.OutboxEntry, error)
	// TaskEvents returns a task's transition events in seq order.
	TaskEvents(ctx context.Context, t task.Task) ([]task.Transition, error)

	// The sweeper's due queries.

	// DueGroups splits the due shards into the groups DueTasks takes.
	DueGroups(d store.Due) [][]int
	// DueTasks returns up to limit tasks of a group whose duty d is due
	// at now, in due order, after the cursor.
	DueTasks(ctx context.Context, d store.Due, shards []int, now time.Time, limit int, after *store.DueCursor) ([]task.Task, error)

	// Quotas.

	// QuotasEnabled reports whether any scope is limited.
	QuotasEnabled() bool
	// QuotaUsage sums a scope's counters.
	QuotaUsage(ctx context.Context, kind quota.Kind, name string) (quota.Usage, error)
	// RepairQuotaCounters recounts the counters and rewrites drifted ones.
	RepairQuotaCounters(ctx context.Context) ([]quota.Repair, error)
	// WaitingForSlot returns the tasks waiting for a run slot, the lowest
	// ranked limit of every group of due shards (with oldest, the longest
	// waiting too), and how many groups failed.
	WaitingForSlot(ctx context.Context, now time.Time, limit int, oldest bool) ([]task.Task, int, error)

	// Schema.

	// CheckSchema refuses a database this build cannot read, and records
	// store.SchemaVersion in a fresh one.
	CheckSchema(ctx context.Context) (store.Schema, error)
	// ReadSchema reads the recorded schema (version 0 when none).
	ReadSchema(ctx context.Context) (store.Schema, error)
	// Migrate brings the database to store.SchemaVersion.
	Migrate(ctx context.Context, o store.MigrateOptions) (store.MigrateReport, error)
}

// Config is how the suite wants a store configured.
type Config struct {
	// Quotas, when set, is the per-tenant and per-worker policy the store
	// enforces (store.WithQuotas); nil: no quota.
	Quotas *quota.Policy
}

// Opener opens the stores the suite runs against. Both fields are
// required; each store is closed by its opener when t ends (t.Cleanup).
type Opener struct {
	// New returns a store on a fresh database of its own (empty, no schema
	// recorded, isolated from every other call's), configured with cfg.
	New func(t *testing.T, cfg Config) Store
	// Same returns a second, independent client on s's database,
	// configured as s is: another instance of the service, which shares
	// nothing with s but the database.
	Same func(t *testing.T, s Store) Store
}

// Run runs the conformance suite: one subtest per concern, each on fresh
// stores from o.
func Run(t *testing.T, o Opener) {
	t.Helper()
	if o.New == nil || o.Same == nil {
		t.Fatal("storetest: Opener.New and Opener.Same are required")
	}
	t.Run("Transitions", func(t *testing.T) { testTransitions(t, o) })
	t.Run("Races", func(t *testing.T) { testRaces(t, o) })
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, o) })
	t.Run("Due", func(t *testing.T) { testDue(t, o) })
	t.Run("Schema", func(t *testing.T) { testSchema(t, o) })
	t.Run("Quotas", func(t *testing.T) { testQuotas(t, o) })
}

// Lease and timing of the suite's tasks: long enough that no event of a
// loaded machine finds a lease over unless the test means it to.
const (
	heartbeatInterval = 10 * time.Second
	heartbeatTimeout  = 5 * time.Minute
)

// submitted is a validated submit of tenant, as the dispatcher hands it to
// the store: a fresh id, a run, a payload, 3 attempts.
func submitted(now time.Time, tenant, key string) task.Task {
	return task.Task{
		ID: task.NewTaskID(now), RunID: "run_conformance", TenantID: tenant, WorkspaceID: "ws", TaskKey: "k", Worker: "w",
		Payload: json.RawMessage(`{"rows":10}`), IdempotencyKey: key,
		Timing: api.Timing{HeartbeatIntervalMs: heartbeatInterval.Milliseconds(), HeartbeatTimeoutMs: heartbeatTimeout.Milliseconds()},
		Retry:  api.RetryPolicy{MaxAttempts: 3},
	}
}

func mustCreate(t *testing.T, s Store, tk task.Task, now time.Time) task.Task {
	t.Helper()
	created, existed, err := s.Create(t.Context(), tk, now)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if existed {
		t.Fatalf("create %s: existed, want a new task", tk.ID)
	}
	return created
}

func mustApply(t *testing.T, s Store, id string, ev task.Event) task.Result {
	t.Helper()
	r, err := s.Apply(t.Context(), id, ev)
	if err != nil {
		t.Fatalf("apply %s to %s: %v", ev.Kind, id, err)
	}
	return r
}

// mustAccept applies ev and fails unless it was accepted.
func mustAccept(t *testing.T, s Store, id string, ev task.Event) task.Result {
	t.Helper()
	r := mustApply(t, s, id, ev)
	if r.Rejection != nil {
		t.Fatalf("apply %s to %s: refused %v", ev.Kind, id, r.Rejection)
	}
	return r
}

func mustGetTask(t *testing.T, s Store, id string) task.Task {
	t.Helper()
	tk, err := s.GetTask(t.Context(), id)
	if err != nil {
		t.Fatalf("get task %s: %v", id, err)
	}
	return tk
}

// Events, as the services build them.

func enqueued(attempt int, now time.Time) task.Event {
	return task.Event{Kind: task.EventEnqueued, Attempt: attempt, Now: now}
}

func started(attempt int, worker string, now time.Time) task.Event {
	return task.Event{Kind: task.EventStarted, Attempt: attempt, WorkerID: worker, Now: now}
}

func claimed(attempt int, worker string, now time.Time) task.Event {
	return task.Event{Kind: task.EventClaimed, Attempt: attempt, WorkerID: worker, Now: now}
}

func heartbeat(attempt int, worker string, pct int, now time.Time) task.Event {
	return task.Event{Kind: task.EventHeartbeat, Attempt: attempt, WorkerID: worker, Now: now,
		Heartbeat: &api.HeartbeatRequest{ProgressPct: &pct}}
}

// completed reports an outcome; a failure carries an error of category c.
func completed(attempt int, worker string, o api.Outcome, c api.Category, now time.Time) task.Event {
	r := &api.CompletedRequest{Attempt: attempt, WorkerID: worker, Outcome: o}
	switch o {
	case api.OutcomeSucceeded:
		r.Output = json.RawMessage(`{"ok":true}`)
	case api.OutcomeFailed:
		r.Error = &api.ErrorInfo{Category: c, Message: "failed on purpose"}
	}
	return task.Event{Kind: task.EventCompleted, Attempt: attempt, WorkerID: worker, Now: now, Completed: r}
}

func cancel(now time.Time) task.Event {
	return task.Event{Kind: task.EventCancel, Reason: "conformance", Now: now}
}

// queuedTask creates a task and enqueues its first attempt.
func queuedTask(t *testing.T, s Store, now time.Time) task.Task {
	t.Helper()
	tk := mustCreate(t, s, submitted(now, "acme", ""), now)
	return mustAccept(t, s, tk.ID, enqueued(1, now)).Task
}

// runningTask creates a task whose first attempt worker runs, started at
// now.
func runningTask(t *testing.T, s Store, now time.Time, worker string) task.Task {
	t.Helper()
	tk := queuedTask(t, s, now)
	return mustAccept(t, s, tk.ID, started(1, worker, now)).Task
}

// checkOutbox reads a task's outbox entries and checks what every store
// must keep of them: seqs 1 to the task's, each once, in order, under
// distinct event ids, each transition leaving the state the one before
// entered, the last entering the task's state. It returns the entries.
func checkOutbox(t *testing.T, s Store, id string) []store.OutboxEntry {
	t.Helper()
	tk := mustGetTask(t, s, id)
	es, err := s.OutboxEntries(t.Context(), id)
	if err != nil {
		t.Fatalf("outbox entries of %s: %v", id, err)
	}
	if err := chainErr(tk, transitionsOf(es)); err != nil {
		t.Fatalf("outbox entries of %s: %v\n%s", id, err, describe(transitionsOf(es)))
	}
	return es
}

func transitionsOf(es []store.OutboxEntry) []task.Transition {
	out := make([]task.Transition, len(es))
	for i, e := range es {
		out[i] = e.Transition
	}
	return out
}

// chainErr says what is wrong with trs as the complete, ordered
// transitions of tk.
func chainErr(tk task.Task, trs []task.Transition) error {
	if int64(len(trs)) != tk.Seq {
		return fmt.Errorf("%d transitions, want the task's seq %d", len(trs), tk.Seq)
	}
	ids := map[string]bool{}
	for i, tr := range trs {
		switch {
		case tr.Seq != int64(i+1):
			return fmt.Errorf("transition %d has seq %d", i, tr.Seq)
		case tr.TaskID != tk.ID:
			return fmt.Errorf("transition %d is of task %s", i, tr.TaskID)
		case tr.EventID == "" || ids[tr.EventID]:
			return fmt.Errorf("transition %d: event id %q empty or repeated", i, tr.EventID)
		case i == 0 && tr.To != api.Pending:
			return fmt.Errorf("first transition enters %s, want %s", tr.To, api.Pending)
		case i > 0 && tr.From != trs[i-1].To:
			return fmt.Errorf("transition %d leaves %s, the one before entered %s", i, tr.From, trs[i-1].To)
		}
		ids[tr.EventID] = true
	}
	if len(trs) > 0 && trs[len(trs)-1].To != tk.State {
		return fmt.Errorf("last transition enters %s, the task is %s", trs[len(trs)-1].To, tk.State)
	}
	return nil
}

func describe(trs []task.Transition) string {
	s := ""
	for _, tr := range trs {
		s += fmt.Sprintf("  seq %d %s %s→%s (%s)\n", tr.Seq, tr.EventID, tr.From, tr.To, tr.Reason)
	}
	return s
}

func states(trs []task.Transition) []api.State {
	out := make([]api.State, len(trs))
	for i, tr := range trs {
		out[i] = tr.To
	}
	return out
}

// isNotFound reports whether err says the task does not exist.
func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
