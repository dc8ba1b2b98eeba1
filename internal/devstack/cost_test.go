package devstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/dispatcher"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// callCounter counts gRPC calls by method (the Cloud Tasks client's).
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *callCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// opCost is what one operation cost, events included (the publisher's
// sender is flushed before it is read; unbatched, so the worst case).
type opCost struct {
	name       string
	usage      store.Usage
	firestore  map[string]int
	cloudTasks map[string]int
	events     int64 // messages published (events and dead letters)
	// logLines and logBytes are the components' JSON log lines at INFO
	// and above.
	logLines, logBytes int64
}

// costEnv measures operations on a whole local stack, one at a time.
type costEnv struct {
	*env
	rpc  *store.RPCCounter
	ct   *callCounter
	logs *lineCounter
}

// idlePassQueries is what an idle sweep pass, wired as production wires
// it, queries over production's 384 due shards: one query per duty and
// group of shards (store.DueGroups: 55 deadline + 13 cancel + 26 lease + 26
// dispatch, at most 30 disjunctions each), 13 for the outbox re-drive
// (store.OutboxGroups) and 13 for the schedule duty's due schedules
// (store.ScheduleGroups), however many schedules there are; one query per
// duty and shard took 80 with 16 shards.
const idlePassQueries = 146

// productionSweeper is the sweeper internal/server wires (server.New) on
// e's stack, its schedule duty included, with cfg's cadence, window and
// re-drives, logging to log; opts change its configuration further.
func productionSweeper(t testing.TB, e *env, cfg config.Config, log *slog.Logger, opts ...func(*zombie.Config)) *zombie.Sweeper {
	t.Helper()
	cadence := cfg.SweepEvery
	if cfg.SweepWindow <= 0 {
		cadence = max(cadence, time.Minute)
	}
	schedules, err := dispatcher.NewScheduler(dispatcher.Config{Store: e.stack.Store, Enqueuer: e.stack.Enqueuer, Logger: log, Project: e.stack.Project,
		MinTimer: task.MinTimerLocal, SweepEvery: cadence}) // the stack's MinTimer
	if err != nil {
		t.Fatal(err)
	}
	zc := zombie.Config{Store: e.stack.Store, Enqueuer: e.stack.Enqueuer, Holder: e.stack.Enqueuer, Redriver: e.stack.Events, Recorder: e.stack.Store,
		Cleaner: e.stack.Events, Schedules: schedules, Logger: log, Every: cfg.SweepEvery, Window: cfg.SweepWindow, KeepWindow: !cfg.SweepEarlyEnd, MaxRedrives: cfg.MaxRedrives}
	for _, o := range opts {
		o(&zc)
	}
	sw, err := zombie.New(zc)
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// createSchedule creates tenant acme's schedule id through the API, firing
// every hour (the finest everyMs at the cost stacks' hourly sweep cadence)
// from the first whole second after from, its task the scripted worker's
// (env.submit's) with extra; it returns the first fire time.
func (e *env) createSchedule(id string, from time.Time, extra map[string]any) time.Time {
	e.T.Helper()
	first := from.UTC().Add(time.Second).Truncate(time.Second)
	tk := map[string]any{
		"taskKey": "k", "worker": "scripted", "payload": map[string]any{"n": 1},
		"heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 1500, "cancelGracePeriodMs": 300,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}
	maps.Copy(tk, extra)
	body := map[string]any{"scheduleId": id, "tenantId": "acme", "workspaceId": "ws", "task": tk,
		"spec": map[string]any{"everyMs": time.Hour.Milliseconds(), "startAt": first.Format(time.RFC3339)}}
	if status, out := e.Do("POST", "/v1/schedules", body); status != http.StatusCreated {
		e.T.Fatalf("create schedule %s: %d %s", id, status, out)
	}
	return first
}

// untilPast sleeps until at has passed.
func untilPast(at time.Time) { time.Sleep(time.Until(at) + 50*time.Millisecond) }

// The rows of the schedule duty's passes, and how many idle schedules the
// second has.
const (
	idleSchedulesPass = "sweep pass, 50 schedules hours from their next fire"
	firePass          = "sweep pass making one schedule fire"
	idleSchedules     = 50
)

func newCostEnv(t *testing.T) *costEnv {
	rc, ct, lc := store.NewRPCCounter(), &callCounter{n: map[string]int{}}, &lineCounter{}
	e := start(t, func(o *devstack.Options) {
		o.Log = lc
		o.SweepEvery = time.Hour             // one tick at start, none while measuring
		o.DueShards = store.DefaultDueShards // production's, not the local default
		// Without servo dev's task cache, as the deployed functions run
		// (store/doc.go, "The task cache").
		o.StoreOptions = []store.Option{store.WithRPCCounter(rc), store.WithTaskCache(0)}
		o.TasksClientOptions = []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(ct.unary))}
	})
	// Wait for the start-up tick's sweep pass: one query per duty and
	// group of shards, and one per group for the outbox.
	servotest.WaitFor(t, "the start-up sweep", rc.Counts, func(n map[string]int) bool { return n["RunQuery"] >= idlePassQueries }, nil)
	return &costEnv{env: e, rpc: rc, ct: ct, logs: lc}
}

// settle waits until the stack is idle: the start-up sweep done, the
// events sent.
func (c *costEnv) settle() {
	c.T.Helper()
	last := -1
	for range 100 {
		if err := c.stack.Events.Flush(context.Background()); err != nil {
			c.T.Fatal(err)
		}
		if n := c.rpc.Total(); n == last {
			return
		} else {
			last = n
		}
		time.Sleep(300 * time.Millisecond)
	}
	c.T.Fatal("the stack never went idle")
}

// measure runs op alone and returns what it cost, its events included.
func (c *costEnv) measure(name string, op func()) opCost {
	c.T.Helper()
	c.settle()
	c.rpc.Reset()
	c.ct.take()
	c.logs.take()
	ev0, dl0 := c.stack.Events.Published()
	op()
	if err := c.stack.Events.Flush(context.Background()); err != nil {
		c.T.Fatal(err)
	}
	ev1, dl1 := c.stack.Events.Published()
	oc := opCost{name: name, usage: c.rpc.Usage(), firestore: c.rpc.Counts(), cloudTasks: c.ct.take(), events: ev1 - ev0 + dl1 - dl0}
	oc.logLines, oc.logBytes = c.logs.take()
	return oc
}

func (c *costEnv) heartbeat(d delivery, pct int) {
	c.T.Helper()
	st, res := c.callback(d.env, "heartbeat", api.HeartbeatRequest{Attempt: d.env.Attempt, WorkerID: "w", ProgressPct: &pct, Message: "working"})
	expect(c.T, "heartbeat", st, res, 200, "", api.Continue)
}

// attempt plays one attempt: started, beats heartbeats, completed with
// outcome (FAILED is a retryable INFRASTRUCTURE error).
func (c *costEnv) attempt(beats int, outcome api.Outcome) {
	c.T.Helper()
	d := c.worker.next(c.T)
	st, res := c.callback(d.env, "started", api.StartedRequest{Attempt: d.env.Attempt, WorkerID: "w"})
	expect(c.T, "started", st, res, 200, "", api.Continue)
	for i := range beats {
		c.heartbeat(d, (i+1)*100/(beats+1))
	}
	body := api.CompletedRequest{Attempt: d.env.Attempt, WorkerID: "w", Outcome: outcome}
	if outcome == api.OutcomeFailed {
		body.Error = &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "flaky"}
	}
	st, res = c.callback(d.env, "completed", body)
	expect(c.T, "completed", st, res, 200, "", api.Committed)
}

// costTable runs every operation of docs/cost.md and returns its stack
// and rows.
func costTable(t *testing.T) (*costEnv, []opCost) {
	c := newCostEnv(t)
	var rows []opCost
	retry := map[string]any{"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 100}}

	// One task, step by step.
	rows = append(rows, c.measure("submit", func() { c.submit(retry) }))
	d := c.worker.next(t)
	rows = append(rows, c.measure("started", func() {
		st, res := c.callback(d.env, "started", api.StartedRequest{Attempt: 1, WorkerID: "w"})
		expect(t, "started", st, res, 200, "", api.Continue)
	}))
	rows = append(rows, c.measure("heartbeat", func() { c.heartbeat(d, 10) }))
	// The same report again at once: nothing new, nearly all the lease
	// left, so nothing is written (docs/cost.md, "Heartbeats").
	rows = append(rows, c.measure(skippedHeartbeat, func() { c.heartbeat(d, 10) }))
	rows = append(rows, c.measure("completed FAILED, retry scheduled", func() {
		st, res := c.callback(d.env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w", Outcome: api.OutcomeFailed,
			Error: &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "flaky"}})
		expect(t, "completed", st, res, 200, "", api.Committed)
	}))
	c.attempt(0, api.OutcomeSucceeded) // attempt 2, to end the task
	d3 := func() delivery { c.submit(nil); return c.worker.next(t) }()
	st, res := c.callback(d3.env, "started", api.StartedRequest{Attempt: 1, WorkerID: "w"})
	expect(t, "started", st, res, 200, "", api.Continue)
	rows = append(rows, c.measure("completed SUCCEEDED", func() {
		st, res := c.callback(d3.env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w", Outcome: api.OutcomeSucceeded})
		expect(t, "completed", st, res, 200, "", api.Committed)
	}))
	sw := productionSweeper(t, c.env, config.Default(), logs.New(c.logs, slog.LevelInfo))
	var pass zombie.Stats // the last pass's
	sweep := func(name string) opCost {
		// Its pulse's promise renewed first, as a window that ended early
		// renews it: no pass counts the time since the last as an outage.
		if err := c.stack.Store.PromisePulse(context.Background(), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		return c.measure(name, func() {
			var err error
			if pass, err = sw.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
	rows = append(rows, sweep("sweep pass, nothing due"))
	// Schedules at rest, then one due: created through the API (not
	// measured), and each pass explicit.
	for i := range idleSchedules {
		c.createSchedule(fmt.Sprintf("idle-%d", i), time.Now().Add(3*time.Hour), nil)
	}
	rows = append(rows, sweep(idleSchedulesPass))
	if sch := pass.Schedules; sch.Due != 0 || sch.Upcoming != 0 {
		t.Errorf("%s: %+v, want nothing due or upcoming", idleSchedulesPass, sch)
	}
	untilPast(c.createSchedule("fire", time.Now().Add(time.Second), nil))
	rows = append(rows, sweep(firePass))
	if sch := pass.Schedules; sch.Due != 1 || sch.Started != 1 || sch.Errors != 0 {
		t.Errorf("%s: %+v, want one fire started", firePass, sch)
	}
	c.attempt(0, api.OutcomeSucceeded) // the fire's task, to its end

	// Whole lifecycles.
	rows = append(rows, c.measure("lifecycle: 1 attempt, 10 heartbeats", func() {
		c.submit(nil)
		c.attempt(10, api.OutcomeSucceeded)
	}))
	var r3 string
	rows = append(rows, c.measure("lifecycle: 3 attempts (2 retried failures), 10 heartbeats each", func() {
		r3 = c.submit(retry).TaskID
		c.attempt(10, api.OutcomeFailed)
		c.attempt(10, api.OutcomeFailed)
		c.attempt(10, api.OutcomeSucceeded)
	}))
	if v := c.WaitState(r3, api.Succeeded); len(v.Attempts) != 3 {
		t.Fatalf("%d attempts", len(v.Attempts))
	}
	return c, rows
}

// TestCostModel measures what each operation costs in Firestore, Cloud
// Tasks and Pub/Sub on the real stack, and checks the figures docs/cost.md
// is built on:
//
//	go test -run TestCostModel -v ./internal/devstack/
func TestCostModel(t *testing.T) {
	c0, rows := costTable(t)
	var b strings.Builder
	fmt.Fprintln(&b, "| operation | Firestore RPCs | docs read | docs written | docs deleted | index entries written | bytes sent | bytes received | Cloud Tasks calls | Pub/Sub messages | log lines (bytes) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d (%s) | %d | %d | %d | %d | %d | %d | %s | %d | %d (%d) |\n", r.name, r.usage.RPCs, calls(r.firestore), r.usage.DocsRead, r.usage.DocsWritten,
			r.usage.DocsDeleted, r.usage.IndexEntries, r.usage.BytesSent, r.usage.BytesReceived, calls(r.cloudTasks), r.events, r.logLines, r.logBytes)
	}
	t.Log("\n" + b.String())

	byName := map[string]opCost{}
	for _, r := range rows {
		byName[r.name] = r
	}
	for _, c := range []struct {
		op         string
		firestore  map[string]int
		cloudTasks map[string]int
		events     int64
	}{
		// One commit; deleting the two events' delivered entries is one more.
		{"submit", map[string]int{"Commit": 2}, map[string]int{"CreateTask": 1}, 2},
		{"started", map[string]int{"BatchGetDocuments": 1, "Commit": 2}, map[string]int{}, 1},
		{"heartbeat", map[string]int{"BatchGetDocuments": 1, "Commit": 1}, map[string]int{}, 0},
		{skippedHeartbeat, map[string]int{"BatchGetDocuments": 1}, map[string]int{}, 0},
		{"completed FAILED, retry scheduled", map[string]int{"BatchGetDocuments": 1, "Commit": 2}, map[string]int{"CreateTask": 1}, 1},
		{"completed SUCCEEDED", map[string]int{"BatchGetDocuments": 1, "Commit": 2}, map[string]int{}, 1},
		// One query per duty and group of shards, and one per group for
		// the outbox and for the due schedules; the pass's record
		// (meta/sweeper) is one commit, its pulse (meta/pulse, store.Pulse)
		// one read and one commit.
		{"sweep pass, nothing due", map[string]int{"RunQuery": idlePassQueries, "BatchGetDocuments": 1, "Commit": 2}, map[string]int{}, 0},
	} {
		got := byName[c.op]
		if !maps.Equal(got.firestore, c.firestore) || !maps.Equal(got.cloudTasks, c.cloudTasks) || got.events != c.events {
			t.Errorf("%s: Firestore %v, Cloud Tasks %v, %d messages; want %v, %v, %d", c.op, got.firestore, got.cloudTasks, got.events, c.firestore, c.cloudTasks, c.events)
		}
	}
	// The queries of an idle pass are the store's groups of due shards.
	groups := len(c0.stack.Store.OutboxGroups()) + len(c0.stack.Store.ScheduleGroups())
	for _, d := range zombie.Duties {
		groups += len(c0.stack.Store.DueGroups(d.Due))
	}
	if groups != idlePassQueries {
		t.Errorf("an idle pass queries %d groups of due shards, idlePassQueries says %d", groups, idlePassQueries)
	}
	// The schedule duty's passes, beyond the idle pass. Idle schedules add
	// nothing: the due query reads the schedules due, and none other. A
	// fire (schedules_fire.go) reads the schedule (decide: its due query's
	// row and the schedule itself), writes its decision under the version
	// read (a commit), creates the task (CreateMany: a commit of the task
	// and its outbox entry) and its Cloud Task, and settles the schedule (a
	// commit); the task's two events are sent and their outbox entry
	// deleted (a commit), as a submit's. Its line is the submit's, "task
	// submitted". The pass's outbox re-drive, right after, may read that
	// entry before its delivery deletes it (one read more, not re-driven:
	// it is within its grace).
	idle := byName["sweep pass, nothing due"]
	for _, c := range []struct {
		op                    string
		firestore, cloudTasks map[string]int
		events, logLines      int64
		read, written, delete int
		raced                 int // reads a race may add
	}{
		{idleSchedulesPass, map[string]int{}, map[string]int{}, 0, 0, 0, 0, 0, 0},
		{firePass, map[string]int{"BatchGetDocuments": 1, "Commit": 4}, map[string]int{"CreateTask": 1}, 2, 1, 2, 4, 1, 1},
	} {
		got := byName[c.op]
		more := map[string]int{}
		for m, n := range got.firestore {
			if d := n - idle.firestore[m]; d != 0 {
				more[m] = d
			}
		}
		for m, n := range idle.firestore {
			if _, ok := got.firestore[m]; !ok {
				more[m] = -n
			}
		}
		if !maps.Equal(more, c.firestore) || !maps.Equal(got.cloudTasks, c.cloudTasks) || got.events != c.events || got.logLines != c.logLines {
			t.Errorf("%s, beyond an idle pass: Firestore %v, Cloud Tasks %v, %d messages, %d log lines; want %v, %v, %d, %d",
				c.op, more, got.cloudTasks, got.events, got.logLines, c.firestore, c.cloudTasks, c.events, c.logLines)
		}
		if r, w, d := got.usage.DocsRead-idle.usage.DocsRead, got.usage.DocsWritten-idle.usage.DocsWritten, got.usage.DocsDeleted-idle.usage.DocsDeleted; r < c.read || r > c.read+c.raced || w != c.written || d != c.delete {
			t.Errorf("%s, beyond an idle pass: %d documents read, %d written, %d deleted; want %d (+%d), %d, %d", c.op, r, w, d, c.read, c.raced, c.written, c.delete)
		}
	}
	if got := byName[idleSchedulesPass]; got.usage.IndexEntries != idle.usage.IndexEntries || got.usage.DocsMissing != idle.usage.DocsMissing {
		t.Errorf("%s: %d index entries written, %d lookups missing; an idle pass %d and %d", idleSchedulesPass,
			got.usage.IndexEntries, got.usage.DocsMissing, idle.usage.IndexEntries, idle.usage.DocsMissing)
	}
	// Log lines (INFO and above): a submit writes one, naming its Cloud
	// Task; completed one; an accepted started or heartbeat none; a
	// retry's enqueue its own "attempt enqueued"; an idle pass none.
	for op, want := range map[string]int64{
		"submit": 1, "started": 0, "heartbeat": 0, skippedHeartbeat: 0,
		"completed FAILED, retry scheduled": 2, "completed SUCCEEDED": 1, "sweep pass, nothing due": 0, idleSchedulesPass: 0, firePass: 1,
		"lifecycle: 1 attempt, 10 heartbeats": 2,
		// 1 submit, 3 completed, 2 retries enqueued.
		"lifecycle: 3 attempts (2 retried failures), 10 heartbeats each": 6,
	} {
		if got := byName[op].logLines; got != want {
			t.Errorf("%s: %d log lines, want %d", op, got, want)
		}
	}
	// Each commit's outbox document is deleted once its events are
	// delivered (no dead letter here: every message is an event), and
	// nothing else is: one delete per event, but the two events of a
	// submit's (or a fire's) task share one document.
	for _, r := range rows {
		creates := 0
		if r.name == "submit" || r.name == firePass || strings.HasPrefix(r.name, "lifecycle:") {
			creates = 1
		}
		if want := int(r.events) - creates; r.usage.DocsDeleted != want {
			t.Errorf("%s: %d documents deleted, want %d (one per commit's events delivered)", r.name, r.usage.DocsDeleted, want)
		}
	}
	if hb := byName["heartbeat"]; hb.usage.DocsWritten != 1 || hb.usage.DocsRead != 1 {
		t.Errorf("heartbeat: %d documents read, %d written, want 1 and 1", hb.usage.DocsRead, hb.usage.DocsWritten)
	}
	if hb := byName[skippedHeartbeat]; hb.usage.DocsWritten != 0 || hb.usage.DocsRead != 1 || hb.usage.IndexEntries != 0 {
		t.Errorf("%s: %d documents read, %d written, %d index entries; want 1, 0, 0", skippedHeartbeat, hb.usage.DocsRead, hb.usage.DocsWritten, hb.usage.IndexEntries)
	}
	// A heartbeat moves the task's entry in the lease index and nothing
	// else: its other fields are exempt from single-field indexes.
	if hb := byName["heartbeat"]; hb.usage.IndexEntries != 1 {
		t.Errorf("heartbeat: %d index entries written, want 1 (the lease index)", hb.usage.IndexEntries)
	}
}

// skippedHeartbeat is the row of a heartbeat that is read and not written.
const skippedHeartbeat = "heartbeat, nothing new, over half the lease left"

func calls(m map[string]int) string {
	var parts []string
	for _, k := range []string{"BatchGetDocuments", "Commit", "RunQuery", "Rollback", "CreateTask", "DeleteTask"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}
