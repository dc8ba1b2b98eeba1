package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// waitTimeout bounds every wait for messages.
const waitTimeout = 30 * time.Second

type env struct {
	project string
	st      *store.Store
	ps      *pubsub.Client
	clock   *clock
}

// clock is real time plus an offset that tests move forward to make
// outbox entries older than the grace period.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	st, err := store.New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ps, err := pubsub.NewClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	return &env{project: project, st: st, ps: ps, clock: &clock{}}
}

func (e *env) publisher(t *testing.T, cfg events.Config) *events.Publisher {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = e.st
	}
	if cfg.Client == nil {
		cfg.Client = e.ps
	}
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = logs.New(testWriter{t}, nil)
	}
	p, err := events.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// received is one message a subscription got.
type received struct {
	data        []byte
	attrs       map[string]string
	orderingKey string
}

// collector receives a subscription's messages in delivery order.
type collector struct {
	mu   sync.Mutex
	msgs []received
}

// subscribe creates topic (if missing) and an ordered subscription on it,
// and collects its messages until the test ends.
func (e *env) subscribe(t *testing.T, topic string) *collector {
	t.Helper()
	ctx := context.Background()
	if err := events.EnsureTopics(ctx, e.ps, topic); err != nil {
		t.Fatal(err)
	}
	sub := "sub-" + strings.TrimPrefix(topic, "projects/"+e.project+"/topics/")
	if err := events.EnsureSubscriptions(ctx, e.ps, events.Subscription{Name: sub, Topic: topic, Ordered: true}); err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- e.ps.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			c.mu.Lock()
			c.msgs = append(c.msgs, received{data: m.Data, attrs: m.Attributes, orderingKey: m.OrderingKey})
			c.mu.Unlock()
			m.Ack()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("receive on %s: %v", sub, err)
		}
	})
	return c
}

func (c *collector) snapshot() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// countByID counts the messages of each event id.
func countByID(msgs []received) map[string]int {
	n := map[string]int{}
	for _, m := range msgs {
		n[m.attrs[events.AttrEventID]]++
	}
	return n
}

// waitIDs waits until every id in ids was received at least min times.
func (c *collector) waitIDs(t *testing.T, ids []string, min int) []received {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		msgs := c.snapshot()
		n := countByID(msgs)
		missing := 0
		for _, id := range ids {
			if n[id] < min {
				missing++
			}
		}
		if missing == 0 {
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %d events not received %d times (got %d messages)", waitTimeout, missing, len(ids), min, len(msgs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstByTask decodes the events of msgs, first delivery of each event id
// only, grouped by task in delivery order.
func firstByTask(t *testing.T, msgs []received) map[string][]api.Event {
	t.Helper()
	seen := map[string]bool{}
	out := map[string][]api.Event{}
	for _, m := range msgs {
		ev, err := events.DecodeEvent(m.data)
		if err != nil {
			t.Fatalf("message %s: %v", m.data, err)
		}
		if seen[ev.EventID] {
			continue
		}
		seen[ev.EventID] = true
		out[ev.TaskID] = append(out[ev.TaskID], ev)
	}
	return out
}

func submitted(now time.Time, run string, retry api.RetryPolicy) task.Task {
	return task.Task{
		ID: task.NewTaskID(now), RunID: run, TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "etl",
		Payload: json.RawMessage(`{"rows":10}`), Retry: retry,
		Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000},
	}
}

// step is one store operation on a task.
type step func(t *testing.T, st *store.Store, tk task.Task)

func create(t *testing.T, st *store.Store, tk task.Task) {
	t.Helper()
	if _, _, err := st.Create(context.Background(), tk, time.Now()); err != nil {
		t.Fatalf("create: %v", err)
	}
}

func apply(ev task.Event) step {
	return func(t *testing.T, st *store.Store, tk task.Task) {
		t.Helper()
		ev.Now = time.Now()
		r, err := st.Apply(context.Background(), tk.ID, ev)
		if err != nil {
			t.Fatalf("apply %s: %v", ev.Kind, err)
		}
		if r.Rejection != nil {
			t.Fatalf("apply %s: rejected: %v", ev.Kind, r.Rejection)
		}
	}
}

func enqueued(n int) step { return apply(task.Event{Kind: task.EventEnqueued, Attempt: n}) }
func started(n int) step {
	return apply(task.Event{Kind: task.EventStarted, Attempt: n, WorkerID: "w-1"})
}
func heartbeat(n int) step {
	pct := 50
	return apply(task.Event{Kind: task.EventHeartbeat, Attempt: n, WorkerID: "w-1",
		Heartbeat: &api.HeartbeatRequest{Attempt: n, WorkerID: "w-1", ProgressPct: &pct}})
}
func completed(n int, o api.Outcome, e *api.ErrorInfo) step {
	return apply(task.Event{Kind: task.EventCompleted, Attempt: n, WorkerID: "w-1",
		Completed: &api.CompletedRequest{Attempt: n, WorkerID: "w-1", Outcome: o, Error: e}})
}

// succeed is a full successful lifecycle.
var succeed = []step{create, enqueued(1), started(1), heartbeat(1), completed(1, api.OutcomeSucceeded, nil)}

var dataErr = &api.ErrorInfo{Category: api.CategoryDataQuality, Message: "row 7: bad date"}

// failHard ends FAILED at once: a non-retryable error.
var failHard = []step{create, enqueued(1), started(1), completed(1, api.OutcomeFailed, dataErr)}

// run drives each task through its steps, interleaving the tasks.
func run(t *testing.T, st *store.Store, tasks []task.Task, steps [][]step) {
	t.Helper()
	for i := 0; ; i++ {
		progressed := false
		for j, tk := range tasks {
			if i < len(steps[j]) {
				steps[j][i](t, st, tk)
				progressed = true
			}
		}
		if !progressed {
			return
		}
	}
}

// outboxIDs returns the event ids of the tasks' outbox entries, checking
// their delivered flag.
func outboxIDs(t *testing.T, st *store.Store, delivered bool, tasks ...task.Task) []string {
	t.Helper()
	// The hook's sender delivers after the commit: wait for "delivered"
	// (never for "undelivered", which must hold at once).
	deadline := time.Now().Add(waitTimeout)
	for {
		var ids []string
		var wrong []string
		for _, tk := range tasks {
			entries, err := st.OutboxEntries(context.Background(), tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Delivered != delivered {
					wrong = append(wrong, fmt.Sprintf("task %s event %d (%s → %s): delivered = %v, want %v", tk.ID, e.Seq, e.From, e.To, e.Delivered, delivered))
				}
				ids = append(ids, e.EventID)
			}
		}
		if len(wrong) == 0 {
			return ids
		}
		if !delivered || time.Now().After(deadline) {
			for _, w := range wrong {
				t.Error(w)
			}
			return ids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type transitionWant struct {
	from, to api.State
	reason   string
	attempt  int
	outcome  api.Outcome
}

func checkEvents(t *testing.T, tk task.Task, got []api.Event, want []transitionWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("task %s: %d events, want %d: %+v", tk.ID, len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Seq != int64(i+1) || e.From != w.from || e.To != w.to || e.Reason != w.reason || e.Attempt != w.attempt || e.Outcome != w.outcome {
			t.Errorf("task %s event %d = seq %d %s→%s %s attempt %d outcome %q; want seq %d %s→%s %s attempt %d outcome %q",
				tk.ID, i, e.Seq, e.From, e.To, e.Reason, e.Attempt, e.Outcome, i+1, w.from, w.to, w.reason, w.attempt, w.outcome)
		}
		if e.TaskID != tk.ID || e.RunID != tk.RunID || e.TenantID != tk.TenantID || e.WorkspaceID != tk.WorkspaceID ||
			e.EventID != task.EventID(tk.ID, int64(i+1)) || e.OccurredAt.IsZero() {
			t.Errorf("task %s event %d: identity fields %+v", tk.ID, i, e)
		}
	}
}

var successWant = []transitionWant{
	{"", api.Pending, api.ReasonSubmitted, 1, ""},
	{api.Pending, api.Queued, api.ReasonEnqueued, 1, ""},
	{api.Queued, api.Running, api.ReasonStarted, 1, ""},
	{api.Running, api.Succeeded, api.ReasonSucceeded, 1, api.OutcomeSucceeded},
}

var failHardWant = []transitionWant{
	{"", api.Pending, api.ReasonSubmitted, 1, ""},
	{api.Pending, api.Queued, api.ReasonEnqueued, 1, ""},
	{api.Queued, api.Running, api.ReasonStarted, 1, ""},
	{api.Running, api.Failed, api.ReasonNonRetryable, 1, api.OutcomeFailed},
}

// TestLifecycleEventsInOrder: tasks driven through a full lifecycle
// (create → enqueued → started → heartbeat → completed) publish one event
// per transition, right after each commit, and an ordered subscription
// gets each task's events in seq order, with the attributes; the outbox
// entries end delivered.
func TestLifecycleEventsInOrder(t *testing.T) {
	e := newEnv(t)
	sub := e.subscribe(t, events.DefaultEventsTopic)
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())

	now := time.Now()
	tasks := []task.Task{submitted(now, "run_1", api.RetryPolicy{}), submitted(now, "run_1", api.RetryPolicy{}), submitted(now, "run_2", api.RetryPolicy{})}
	run(t, e.st, tasks, [][]step{succeed, succeed, succeed})

	ids := outboxIDs(t, e.st, true, tasks...)
	if len(ids) != 12 {
		t.Fatalf("%d outbox entries, want 4 per task (a heartbeat is no transition)", len(ids))
	}
	msgs := sub.waitIDs(t, ids, 1)
	byTask := firstByTask(t, msgs)
	for _, tk := range tasks {
		checkEvents(t, tk, byTask[tk.ID], successWant)
	}
	for _, m := range msgs {
		ev, _ := events.DecodeEvent(m.data)
		want := map[string]string{"type": events.TypeTransition, "eventId": ev.EventID, "tenantId": "acme", "workspaceId": "ws",
			"taskId": ev.TaskID, "runId": ev.RunID, "state": string(ev.To)}
		if m.orderingKey != ev.TaskID || fmt.Sprint(m.attrs) != fmt.Sprint(want) {
			t.Errorf("message %s: ordering key %q, attributes %v; want %q, %v", ev.EventID, m.orderingKey, m.attrs, ev.TaskID, want)
		}
	}
	// Everything was delivered by the hook: nothing is left to re-drive.
	for _, shard := range e.st.OutboxGroups() {
		if und, err := e.st.Undelivered(context.Background(), shard, e.clock.Now().Add(time.Hour), 100); err != nil || len(und) != 0 {
			t.Errorf("undelivered after publish (shard %d): %d entries, %v", shard, len(und), err)
		}
	}
}

// flakyOutbox is the real store whose DeleteDelivered fails while fails > 0:
// a crash (or Firestore failure) after Pub/Sub acked but before the outbox
// recorded it.
type flakyOutbox struct {
	*store.Store
	fails atomic.Int64
}

func (f *flakyOutbox) DeleteDelivered(ctx context.Context, ids []string) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("injected: commit failed")
	}
	return f.Store.DeleteDelivered(ctx, ids)
}

// TestOutageThenRedrive: while publishing fails, transitions still commit
// and their outbox entries stay undelivered; after recovery Redrive
// delivers every event (events and dead letters), in order per task, none
// lost, and duplicates carry the same eventId and body.
func TestOutageThenRedrive(t *testing.T) {
	tests := []struct {
		name string
		// outage returns the publisher hooked during the outage and a
		// recover function returning the publisher that re-drives.
		outage func(t *testing.T, e *env) (hooked *events.Publisher, recover func() *events.Publisher)
		// redrives is how many Redrive calls it takes; the earlier ones
		// fail with ErrUndelivered.
		redrives int
		// dups says every event is received at least this many times.
		dups int
	}{
		{
			name: "topics missing",
			outage: func(t *testing.T, e *env) (*events.Publisher, func() *events.Publisher) {
				p := e.publisher(t, events.Config{EventsTopic: "ev-late", DeadLetterTopic: "dl-late"})
				return p, func() *events.Publisher { return p }
			},
			redrives: 1, dups: 1,
		},
		{
			name: "pubsub unreachable",
			outage: func(t *testing.T, e *env) (*events.Publisher, func() *events.Publisher) {
				bad, err := pubsub.NewClient(context.Background(), e.project, option.WithEndpoint(servotest.DeadAddr(t)),
					option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { bad.Close() })
				p := e.publisher(t, events.Config{Client: bad, EventsTopic: "ev-late", DeadLetterTopic: "dl-late", PublishTimeout: 300 * time.Millisecond})
				// Another instance (the sweeper) re-drives.
				return p, func() *events.Publisher {
					return e.publisher(t, events.Config{EventsTopic: "ev-late", DeadLetterTopic: "dl-late"})
				}
			},
			redrives: 1, dups: 1,
		},
		{
			name: "published but not marked delivered",
			outage: func(t *testing.T, e *env) (*events.Publisher, func() *events.Publisher) {
				fl := &flakyOutbox{Store: e.st}
				fl.fails.Store(1 << 30)
				p := e.publisher(t, events.Config{Store: fl, EventsTopic: "ev-late", DeadLetterTopic: "dl-late"})
				return p, func() *events.Publisher {
					fl.fails.Store(1) // the first re-drive publishes again and fails to mark
					return p
				}
			},
			// The hook and the first re-drive publish every event; the second
			// re-drive publishes again only the entries of the first shard
			// whose mark failed: at least two copies of every event.
			redrives: 2, dups: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			var evSub, dlSub *collector
			if tt.name != "topics missing" {
				evSub, dlSub = e.subscribe(t, "ev-late"), e.subscribe(t, "dl-late")
			}
			hooked, recoverFn := tt.outage(t, e)
			e.st.OnCommit(hooked.Hook())

			now := time.Now()
			ok, failed := submitted(now, "run_1", api.RetryPolicy{}), submitted(now, "run_1", api.RetryPolicy{})
			tasks := []task.Task{ok, failed}
			run(t, e.st, tasks, [][]step{succeed, failHard})

			// Committed regardless of Pub/Sub.
			for tk, want := range map[string]api.State{ok.ID: api.Succeeded, failed.ID: api.Failed} {
				got, err := e.st.GetTask(ctx, tk)
				if err != nil || got.State != want {
					t.Fatalf("task %s: state %s, %v; want %s", tk, got.State, err, want)
				}
			}
			ids := outboxIDs(t, e.st, false, tasks...)
			if len(ids) != 8 {
				t.Fatalf("%d outbox entries, want 8", len(ids))
			}
			entries, _ := e.st.OutboxEntries(ctx, ok.ID)
			if err := hooked.Publish(ctx, []task.Transition{entries[0].Transition}); !errors.Is(err, events.ErrUndelivered) {
				t.Fatalf("Publish during the outage = %v, want ErrUndelivered", err)
			}
			// Within the grace period Redrive leaves the entries to the writer.
			if err := hooked.Redrive(ctx); err != nil {
				t.Fatalf("Redrive within the grace period: %v", err)
			}
			outboxIDs(t, e.st, false, tasks...)

			if evSub == nil {
				evSub, dlSub = e.subscribe(t, "ev-late"), e.subscribe(t, "dl-late")
			}
			// The hook's sender is done with the outage's transitions
			// before the outage ends, so that what the re-drives see does
			// not depend on its timing.
			_ = hooked.Flush(ctx)
			e.st.OnCommit(nil)
			redriver := recoverFn()
			e.clock.Advance(time.Minute)
			for i := 1; i <= tt.redrives; i++ {
				err := redriver.Redrive(ctx)
				if i < tt.redrives && !errors.Is(err, events.ErrUndelivered) {
					t.Fatalf("Redrive %d = %v, want ErrUndelivered", i, err)
				}
				if i == tt.redrives && err != nil {
					t.Fatalf("Redrive %d: %v", i, err)
				}
			}
			outboxIDs(t, e.st, true, tasks...)

			msgs := evSub.waitIDs(t, ids, tt.dups)
			// Duplicates are detectable: same eventId, same body.
			bodies := map[string]string{}
			for _, m := range msgs {
				id := m.attrs[events.AttrEventID]
				if b, ok := bodies[id]; ok && b != string(m.data) {
					t.Errorf("event %s delivered with different bodies:\n%s\n%s", id, b, m.data)
				}
				bodies[id] = string(m.data)
			}
			if len(bodies) != len(ids) {
				t.Errorf("%d distinct events received, want exactly the %d of the outbox", len(bodies), len(ids))
			}
			byTask := firstByTask(t, msgs)
			checkEvents(t, ok, byTask[ok.ID], successWant)
			checkEvents(t, failed, byTask[failed.ID], failHardWant)

			dlID := task.EventID(failed.ID, int64(len(failHardWant)))
			dls := dlSub.waitIDs(t, []string{dlID}, tt.dups)
			for _, m := range dls {
				d, err := events.DecodeDeadLetter(m.data)
				if err != nil || d.TaskID != failed.ID || d.Error == nil || *d.Error != *dataErr || len(d.Attempts) != 1 {
					t.Errorf("dead letter = %+v, %v", d, err)
				}
			}
			if n := countByID(dls); len(n) != 1 {
				t.Errorf("dead letters for %d events, want only the failed task's: %v", len(n), n)
			}
		})
	}
}

// TestDeadLetters: a task that ends FAILED with no retry left publishes,
// besides its events, one dead letter with the error and the attempt
// history; tasks that succeed or retry publish none.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t)
	evSub := e.subscribe(t, events.DefaultEventsTopic)
	dlSub := e.subscribe(t, events.DefaultDeadLetterTopic)
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())

	userErr := &api.ErrorInfo{Category: api.CategoryUserCode, Message: "division by zero"}
	now := time.Now()
	tests := []struct {
		name     string
		task     task.Task
		steps    []step
		reason   string
		err      *api.ErrorInfo
		attempts []api.Outcome
	}{
		{
			name: "retries exhausted", task: submitted(now, "run_1", api.RetryPolicy{MaxAttempts: 2}),
			steps:  []step{create, enqueued(1), started(1), completed(1, api.OutcomeFailed, userErr), started(2), heartbeat(2), completed(2, api.OutcomeFailed, userErr)},
			reason: api.ReasonRetriesExhausted, err: userErr, attempts: []api.Outcome{api.OutcomeFailed, api.OutcomeFailed},
		},
		{
			name: "non-retryable", task: submitted(now, "run_1", api.RetryPolicy{MaxAttempts: 3}),
			steps:  failHard,
			reason: api.ReasonNonRetryable, err: dataErr, attempts: []api.Outcome{api.OutcomeFailed},
		},
		{
			name: "deadline exceeded", task: func() task.Task {
				tk := submitted(now, "run_1", api.RetryPolicy{})
				dl := now.Add(-time.Second)
				tk.Deadline = &dl
				return tk
			}(),
			steps:  []step{create, enqueued(1), started(1), apply(task.Event{Kind: task.EventDeadlineExceeded, Attempt: 1})},
			reason: api.ReasonDeadlineExceeded, err: &api.ErrorInfo{Category: api.CategoryTimeout, Message: "the task's deadline passed"},
			attempts: []api.Outcome{api.OutcomeTimedOut},
		},
	}
	var tasks []task.Task
	var steps [][]step
	for _, tt := range tests {
		tasks, steps = append(tasks, tt.task), append(steps, tt.steps)
	}
	okTask := submitted(now, "run_1", api.RetryPolicy{})
	tasks, steps = append(tasks, okTask), append(steps, succeed)
	run(t, e.st, tasks, steps)

	var dlIDs []string
	for _, tt := range tests {
		got, err := e.st.GetTask(context.Background(), tt.task.ID)
		if err != nil || got.State != api.Failed {
			t.Fatalf("%s: task state %s, %v", tt.name, got.State, err)
		}
		dlIDs = append(dlIDs, task.EventID(tt.task.ID, got.Seq))
	}
	evSub.waitIDs(t, outboxIDs(t, e.st, true, tasks...), 1)
	msgs := dlSub.waitIDs(t, dlIDs, 1)
	byID := map[string]api.DeadLetter{}
	for _, m := range msgs {
		d, err := events.DecodeDeadLetter(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if m.attrs["type"] != events.TypeDeadLetter || m.attrs["state"] != "FAILED" || m.attrs["taskId"] != d.TaskID ||
			m.attrs["eventId"] != d.EventID || m.attrs["tenantId"] != "acme" || m.attrs["reason"] != d.Reason {
			t.Errorf("dead letter attributes %v for %+v", m.attrs, d)
		}
		byID[d.EventID] = d
	}
	if len(byID) != len(tests) {
		t.Errorf("dead letters for %d events, want %d (none for the succeeded task)", len(byID), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := byID[dlIDs[i]]
			if !ok {
				t.Fatal("no dead letter")
			}
			if d.TaskID != tt.task.ID || d.RunID != "run_1" || d.State != api.Failed || d.Reason != tt.reason || d.Attempt != len(tt.attempts) {
				t.Errorf("dead letter = %+v", d)
			}
			if d.Error == nil || *d.Error != *tt.err {
				t.Errorf("error = %+v, want %+v", d.Error, tt.err)
			}
			if len(d.Attempts) != len(tt.attempts) {
				t.Fatalf("%d attempts, want %d", len(d.Attempts), len(tt.attempts))
			}
			for j, a := range d.Attempts {
				if a.Attempt != j+1 || a.Outcome != tt.attempts[j] || a.CompletedAt == nil {
					t.Errorf("attempt %d = %+v, want outcome %s", j+1, a, tt.attempts[j])
				}
				if tt.attempts[j] == api.OutcomeFailed && (a.Error == nil || *a.Error != *tt.err || a.WorkerID != "w-1") {
					t.Errorf("attempt %d error %+v worker %q", j+1, a.Error, a.WorkerID)
				}
			}
		})
	}
}

// TestTail: Tail prints, until its context ends, the events of the
// selected task or run (JSON lines or table rows, in order per task), and
// deletes its temporary subscription on return.
func TestTail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := events.EnsureLocal(ctx, e.ps, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := events.EnsureLocal(ctx, e.ps, "", ""); err != nil {
		t.Fatalf("EnsureLocal is not idempotent: %v", err)
	}
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())
	now := time.Now()
	a, b, other := submitted(now, "run_A", api.RetryPolicy{}), submitted(now, "run_A", api.RetryPolicy{}), submitted(now, "run_B", api.RetryPolicy{})

	tests := []struct {
		name  string
		opts  events.TailOptions
		tasks []task.Task // the tasks whose events are printed
	}{
		{"task as JSON", events.TailOptions{TaskID: a.ID, JSON: true}, []task.Task{a}},
		{"run as table", events.TailOptions{RunID: "run_A"}, []task.Task{a, b}},
	}
	type tail struct {
		out    *servotest.Buffer
		sub    string
		cancel context.CancelFunc
		done   chan error
	}
	tails := make([]*tail, len(tests))
	for i, tt := range tests {
		tl := &tail{out: &servotest.Buffer{}, done: make(chan error, 1)}
		tails[i] = tl
		tctx, cancel := context.WithCancel(ctx)
		tl.cancel = cancel
		ready := make(chan string, 1)
		opts := tt.opts
		opts.Ready = func(sub string) { ready <- sub }
		go func() { tl.done <- events.Tail(tctx, e.ps, e.project, tl.out, opts) }()
		select {
		case tl.sub = <-ready:
		case err := <-tl.done:
			t.Fatalf("%s: Tail returned before it was ready: %v", tt.name, err)
		case <-time.After(waitTimeout):
			t.Fatalf("%s: Tail not ready", tt.name)
		}
	}

	run(t, e.st, []task.Task{a, b, other}, [][]step{succeed, succeed, succeed})

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := tails[i]
			want := 4 * len(tt.tasks)
			if !tt.opts.JSON {
				want++ // the header
			}
			deadline := time.Now().Add(waitTimeout)
			for len(tl.out.Lines()) < want && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			// Events of other tasks would arrive with these; give them a moment.
			time.Sleep(200 * time.Millisecond)
			tl.cancel()
			if err := <-tl.done; err != nil {
				t.Fatalf("Tail: %v", err)
			}
			lines := tl.out.Lines()
			if len(lines) != want {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), want, strings.Join(lines, "\n"))
			}
			if !tt.opts.JSON {
				if lines[0] != strings.TrimSuffix(events.TableHeader(), "\n") {
					t.Errorf("first line %q is not the header", lines[0])
				}
				lines = lines[1:]
			}
			seqs := map[string][]int64{}
			for _, l := range lines {
				var id string
				if tt.opts.JSON {
					ev, err := events.DecodeEvent([]byte(l))
					if err != nil {
						t.Fatalf("line %q: %v", l, err)
					}
					id = ev.TaskID
					seqs[id] = append(seqs[id], ev.Seq)
				} else {
					f := strings.Fields(l)
					if len(f) < 6 {
						t.Fatalf("row %q", l)
					}
					id = f[1]
					var seq int64
					fmt.Sscan(f[3], &seq)
					seqs[id] = append(seqs[id], seq)
				}
				if !slices.ContainsFunc(tt.tasks, func(tk task.Task) bool { return tk.ID == id }) {
					t.Errorf("line for task %s, which the filter excludes: %s", id, l)
				}
			}
			for _, tk := range tt.tasks {
				if fmt.Sprint(seqs[tk.ID]) != "[1 2 3 4]" {
					t.Errorf("task %s: seqs %v, want [1 2 3 4] in order", tk.ID, seqs[tk.ID])
				}
			}
			_, err := e.ps.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: tl.sub})
			if status.Code(err) != codes.NotFound {
				t.Errorf("temporary subscription %s after Tail returned: %v, want NotFound", tl.sub, err)
			}
		})
	}
}

// TestTailMissingTopic: Tail says the topic is missing instead of waiting.
func TestTailMissingTopic(t *testing.T) {
	e := newEnv(t)
	err := events.Tail(context.Background(), e.ps, e.project, &bytes.Buffer{}, events.TailOptions{Topic: "nope"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Tail on a missing topic = %v", err)
	}
}

// countedStore replaces e.st with a store whose Firestore RPCs are counted.
func (e *env) countedStore(t testing.TB) *store.RPCCounter {
	t.Helper()
	c := store.NewRPCCounter()
	st, err := store.New(context.Background(), e.project, store.WithRPCCounter(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	return c
}

// TestHookOffTheWritersPath: the hook adds no Firestore RPC to the
// writer's transaction (the callback answers once its commit is done);
// the sender, on its own connection here, delivers everything and marks a
// committed batch of transitions delivered in one commit, reading the
// attempt history once for a dead letter.
func TestHookOffTheWritersPath(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	writer := e.countedStore(t)
	sender := store.NewRPCCounter()
	pst, err := store.New(ctx, e.project, store.WithRPCCounter(sender))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pst.Close() })
	e.subscribe(t, events.DefaultEventsTopic)
	e.subscribe(t, events.DefaultDeadLetterTopic)
	p := e.publisher(t, events.Config{Store: pst})
	e.st.OnCommit(p.Hook())
	tk := submitted(time.Now(), "run_1", api.RetryPolicy{})
	tests := []struct {
		name string
		step step
		// want is the writer's RPCs: the store's own, nothing for events.
		want map[string]int
	}{
		// A task of a shared run: its commit, then its run's document,
		// created unless it exists (store.Store.createRun).
		{"create", create, map[string]int{"Commit": 2}},
		{"enqueued", enqueued(1), map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"started", started(1), map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"heartbeat (no transition)", heartbeat(1), map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"failed for good (dead letter)", completed(1, api.OutcomeFailed, dataErr), map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
	}
	for _, tt := range tests {
		writer.Reset()
		tt.step(t, e.st, tk)
		if got := writer.Counts(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: the writer's Firestore RPCs %v, want %v", tt.name, got, tt.want)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	outboxIDs(t, e.st, true, tk)
	if got := sender.Counts(); got["BatchGetDocuments"] != 1 || got["RunQuery"] != 0 || got["Commit"] < 1 || got["Commit"] > 4 {
		t.Errorf("the sender's Firestore RPCs %v, want one read of the task for the dead letter's attempts (its only attempt is on it) and one commit per batch (1 to 4)", got)
	}

	// 150 tasks created in one commit (450 writes): one batch for the
	// sender, one DeleteDelivered commit.
	var many []task.Task
	for range 150 {
		many = append(many, submitted(time.Now(), "run_2", api.RetryPolicy{}))
	}
	sender.Reset()
	for _, r := range e.st.CreateMany(ctx, many, time.Now(), false) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sender.Counts(); fmt.Sprint(got) != fmt.Sprint(map[string]int{"Commit": 1}) {
		t.Errorf("150 transitions of one commit: the sender's Firestore RPCs %v, want one commit", got)
	}
	outboxIDs(t, e.st, true, many...)
}

// stalledOutbox blocks DeleteDelivered until release is closed: a sender
// stuck on a slow or dead dependency.
type stalledOutbox struct {
	*store.Store
	release chan struct{}
	calls   atomic.Int64
}

func (o *stalledOutbox) DeleteDelivered(ctx context.Context, ids []string) error {
	o.calls.Add(1)
	<-o.release
	return o.Store.DeleteDelivered(ctx, ids)
}

// TestHookDoesNotWaitForTheSender: while the sender is stuck (its
// DeleteDelivered blocks), a task still goes through its whole lifecycle:
// no commit waits for event delivery. Once the sender is released every
// event is delivered, in order.
func TestHookDoesNotWaitForTheSender(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	evSub := e.subscribe(t, events.DefaultEventsTopic)
	so := &stalledOutbox{Store: e.st, release: make(chan struct{})}
	p := e.publisher(t, events.Config{Store: so})
	e.st.OnCommit(p.Hook())
	tk := submitted(time.Now(), "run_1", api.RetryPolicy{})
	run(t, e.st, []task.Task{tk}, [][]step{succeed}) // would block here if the hook waited
	for deadline := time.Now().Add(waitTimeout); so.calls.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sender never tried to mark a delivery")
		}
	}
	outboxIDs(t, e.st, false, tk)
	close(so.release)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids := outboxIDs(t, e.st, true, tk)
	msgs := evSub.waitIDs(t, ids, 1)
	for _, evs := range firstByTask(t, msgs) {
		for i, ev := range evs {
			if ev.Seq != int64(i+1) {
				t.Fatalf("events out of order: %+v", evs)
			}
		}
	}
}

// BenchmarkPublish measures the hook's work after a commit: publish one
// transition, wait for the emulator's ack, mark it delivered.
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	project := emulatortest.ProjectID(b)
	rpcs := store.NewRPCCounter()
	st, err := store.New(ctx, project, store.WithRPCCounter(rpcs))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ps, err := pubsub.NewClient(ctx, project)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()
	if err := events.EnsureLocal(ctx, ps, "", ""); err != nil {
		b.Fatal(err)
	}
	p, err := events.New(ctx, events.Config{Store: st, Client: ps})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	trs := make([]task.Transition, b.N)
	for i := range trs {
		tk := submitted(time.Now(), "run_1", api.RetryPolicy{})
		if _, _, err := st.Create(ctx, tk, time.Now()); err != nil {
			b.Fatal(err)
		}
		entries, err := st.OutboxEntries(ctx, tk.ID)
		if err != nil || len(entries) != 1 {
			b.Fatalf("outbox: %v %v", entries, err)
		}
		trs[i] = entries[0].Transition
	}
	rpcs.Reset()
	b.ResetTimer()
	for i := range b.N {
		if err := p.Publish(ctx, trs[i:i+1]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rpcs.Total())/float64(b.N), "firestore-rpcs/op")
}

type brokenWriter struct{}

var errBroken = errors.New("broken pipe")

func (brokenWriter) Write([]byte) (int, error) { return 0, errBroken }

// TestTailStopsOnWriteError: when the output breaks (`servo events tail |
// head`), Tail returns the write error instead of receiving forever.
func TestTailStopsOnWriteError(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := events.EnsureLocal(ctx, e.ps, "", ""); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- events.Tail(ctx, e.ps, e.project, brokenWriter{}, events.TailOptions{Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Tail returned before it was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("Tail not ready")
	}
	create(t, e.st, submitted(time.Now(), "run_1", api.RetryPolicy{}))
	select {
	case err := <-done:
		if !errors.Is(err, errBroken) {
			t.Fatalf("Tail = %v, want the write error", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Tail kept running after its output broke")
	}
}
