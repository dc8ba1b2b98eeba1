package zombie_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// t0 is the fake clock's origin in the unit tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// unitTiming: 1 s interval, 3 s lease, 2 s grace, 5 s start timeout.
var unitTiming = api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 2000, StartTimeoutMs: 5000}

// build makes a task at now and drives it with the pure machine through
// kinds (Enqueued, Started, Cancel), all at now.
func build(t *testing.T, i int, now time.Time, maxAttempts int, kinds ...task.EventKind) task.Task {
	t.Helper()
	tk, _, _ := task.NewTask(task.Task{
		ID: task.NewTaskID(now), RunID: "run_u", TenantID: "acme", WorkspaceID: "ws", TaskKey: fmt.Sprint("k", i), Worker: "w",
		Timing: unitTiming, Retry: api.RetryPolicy{MaxAttempts: maxAttempts, InitialBackoffMs: 1000, MaxBackoffMs: 1000},
	}, now)
	var cur *task.Attempt
	for _, k := range kinds {
		r := task.Apply(tk, cur, task.Event{Kind: k, Attempt: tk.Attempt, Now: now, WorkerID: "w1"})
		if !r.Write || r.Rejection != nil {
			t.Fatalf("build: %s refused: %+v", k, r.Rejection)
		}
		tk, cur = r.Task, r.Attempt
	}
	return tk
}

func newUnitSweeper(t *testing.T, st zombie.Store, enq *recorder, now func() time.Time, mod func(*zombie.Config)) *zombie.Sweeper {
	t.Helper()
	cfg := zombie.Config{Store: st, Enqueuer: enq, Now: now, Jitter: func() float64 { return 0.5 }, Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
	sw, err := zombie.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func TestNewRequiresStoreAndEnqueuer(t *testing.T) {
	for _, cfg := range []zombie.Config{{}, {Store: newMemStore()}, {Enqueuer: &recorder{}}} {
		if _, err := zombie.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	sw, err := zombie.New(zombie.Config{Store: newMemStore(), Enqueuer: &recorder{}})
	if err != nil {
		t.Fatal(err)
	}
	got := sw.Config()
	if got.PageSize != zombie.DefaultPageSize || got.Concurrency != zombie.DefaultConcurrency || got.MaxRedrives != zombie.DefaultMaxRedrives ||
		got.Every != zombie.DefaultEvery || got.Window != 0 || got.Now == nil || got.Jitter == nil || got.Logger == nil {
		t.Fatalf("defaults not applied: %+v", got)
	}
}

// TestDutiesApplyTheirEvents checks, per duty, the event the sweeper sends
// (kind, the attempt as read, the clock, jitter, MaxRedrives) and the
// machine's decision it reports.
func TestDutiesApplyTheirEvents(t *testing.T) {
	later := t0.Add(time.Hour)
	deadline := t0.Add(time.Minute)
	tests := []struct {
		name     string
		task     func(t *testing.T) task.Task
		kind     task.EventKind
		due      store.Due
		want     api.State
		reason   string
		followUp bool
	}{
		{"lease retry", func(t *testing.T) task.Task { return build(t, 0, t0, 3, task.EventEnqueued, task.EventStarted) },
			task.EventLeaseExpired, store.DueLease, api.Queued, "", true},
		{"lease no retry", func(t *testing.T) task.Task { return build(t, 0, t0, 1, task.EventEnqueued, task.EventStarted) },
			task.EventLeaseExpired, store.DueLease, api.Failed, api.ReasonHeartbeatTimeout, false},
		{"cancel timeout", func(t *testing.T) task.Task {
			tk := build(t, 0, t0, 3, task.EventEnqueued, task.EventStarted, task.EventCancel)
			far := later.Add(time.Hour) // lease still valid: only the grace period ran out
			tk.LeaseExpiresAt = &far
			return tk
		}, task.EventCancelTimeout, store.DueCancel, api.Failed, api.ReasonCancelTimeout, false},
		{"stuck pending re-driven", func(t *testing.T) task.Task { return build(t, 0, t0, 3) },
			task.EventRedrive, store.DueDispatch, api.Pending, "", true},
		{"deadline", func(t *testing.T) task.Task {
			tk := build(t, 0, t0, 3, task.EventEnqueued, task.EventStarted)
			far := later.Add(time.Hour)
			tk.LeaseExpiresAt, tk.Deadline = &far, &deadline
			return tk
		}, task.EventDeadlineExceeded, store.DueDeadline, api.Failed, api.ReasonDeadlineExceeded, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, enq := newMemStore(), &recorder{}
			tk := tc.task(t)
			ms.put(tk)
			sw := newUnitSweeper(t, ms, enq, func() time.Time { return later }, func(c *zombie.Config) { c.MaxRedrives = 4 })
			st, err := sw.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			evs := ms.eventsOf(tc.kind)
			if len(evs) != 1 {
				t.Fatalf("%s events: %+v (all: %+v)", tc.kind, evs, ms.events)
			}
			ev := evs[0]
			if ev.Attempt != tk.Attempt || !ev.Now.Equal(later) || ev.Jitter != 0.5 || ev.MaxRedrives != 4 {
				t.Fatalf("event %+v", ev)
			}
			got := ms.get(tk.ID)
			if got.State != tc.want || got.Reason != tc.reason {
				t.Fatalf("state %s reason %q, want %s %q", got.State, got.Reason, tc.want, tc.reason)
			}
			if ds := st.Duty(tc.due); ds.Due != 1 || ds.Applied != 1 || ds.NoOp != 0 || ds.Errors != 0 {
				t.Fatalf("stats of %s: %+v", tc.due, *ds)
			}
			if tot := st.Total(); tot.Applied != 1 {
				t.Fatalf("total %+v: another duty applied something too", tot)
			}
			if n := enq.count(); (n == 1) != tc.followUp {
				t.Fatalf("follow-ups: %d, want one: %v", n, tc.followUp)
			}
		})
	}
}

// TestSweepPaginatesWithBoundedConcurrency: 25 due tasks, pages of 10,
// at most 3 transactions at once; every task is applied exactly once and
// each page continues after the last task of the previous one.
func TestSweepPaginatesWithBoundedConcurrency(t *testing.T) {
	ms, enq := newMemStore(), &recorder{}
	ms.applyDelay = 2 * time.Millisecond
	ids := map[string]bool{}
	for i := range 25 {
		tk := build(t, i, t0.Add(time.Duration(i%7)*time.Millisecond), 1, task.EventEnqueued, task.EventStarted)
		ms.put(tk)
		ids[tk.ID] = true
	}
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return t0.Add(time.Hour) }, func(c *zombie.Config) { c.PageSize, c.Concurrency = 10, 3 })
	st, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Lease.Due != 25 || st.Lease.Applied != 25 {
		t.Fatalf("lease stats %+v", st.Lease)
	}
	qs := ms.queriesOf(store.DueLease)
	if len(qs) != 3 || qs[0].Cursor != nil || qs[1].Cursor == nil || qs[2].Cursor == nil || qs[2].Got != 5 {
		t.Fatalf("lease queries %+v", qs)
	}
	if max := ms.maxInFlight.Load(); max > 3 || max < 1 {
		t.Fatalf("max transactions in flight %d, want 1..3", max)
	}
	if len(ms.eventsOf(task.EventLeaseExpired)) != 25 {
		t.Fatalf("lease events %d", len(ms.eventsOf(task.EventLeaseExpired)))
	}
	for id := range ids {
		if got := ms.get(id); got.State != api.Failed || got.Reason != api.ReasonHeartbeatTimeout {
			t.Fatalf("task %s: %s %s", id, got.State, got.Reason)
		}
	}
	// A full page always asks for the next one; an exact multiple ends on
	// an empty page.
	ms2 := newMemStore()
	for i := range 20 {
		ms2.put(build(t, i, t0, 1, task.EventEnqueued, task.EventStarted))
	}
	sw2 := newUnitSweeper(t, ms2, enq, func() time.Time { return t0.Add(time.Hour) }, func(c *zombie.Config) { c.PageSize = 10 })
	if st, err := sw2.Sweep(context.Background()); err != nil || st.Lease.Applied != 20 || len(ms2.queriesOf(store.DueLease)) != 3 {
		t.Fatalf("exact multiple: %+v %v queries %+v", st.Lease, err, ms2.queriesOf(store.DueLease))
	}
}

// TestSweepQueriesEveryShard: tasks spread over 6 due shards are all
// found; each duty queries every shard, paging each on its own, with the
// transactions of all shards bounded by Concurrency together.
func TestSweepQueriesEveryShard(t *testing.T) {
	ms, enq := newMemStore(), &recorder{}
	ms.shards, ms.applyDelay = 6, 2*time.Millisecond
	for i := range 30 {
		tk := build(t, i, t0, 1, task.EventEnqueued, task.EventStarted)
		tk.DueShard = store.DueShardOf(tk.ID, ms.shards)
		ms.put(tk)
	}
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return t0.Add(time.Hour) }, func(c *zombie.Config) {
		c.PageSize, c.Concurrency, c.ShardConcurrency = 4, 3, 2
	})
	st, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Lease.Due != 30 || st.Lease.Applied != 30 {
		t.Fatalf("lease stats %+v", st.Lease)
	}
	perShard := map[int]int{}
	for _, q := range ms.queriesOf(store.DueLease) {
		perShard[q.Shard] += q.Got
	}
	if len(perShard) != 6 {
		t.Fatalf("lease queries reached shards %v, want all 6", perShard)
	}
	total := 0
	for _, n := range perShard {
		total += n
	}
	if total != 30 {
		t.Fatalf("lease queries returned %d tasks, want 30: %v", total, perShard)
	}
	if max := ms.maxInFlight.Load(); max > 3 {
		t.Fatalf("max transactions in flight %d, want ≤ 3", max)
	}
}

// TestOnePassAtATime: a Sweep asked for while the same Sweeper's pass is
// still running is skipped (counted) without a query; another Sweeper is
// not held back.
func TestOnePassAtATime(t *testing.T) {
	ms, enq := newMemStore(), &recorder{}
	inPass, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	ms.onQuery = func(store.Due) {
		if first.CompareAndSwap(false, true) { // only the first query waits
			close(inPass)
			<-release
		}
	}
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return t0 }, nil)
	done := make(chan zombie.Stats)
	go func() {
		st, _ := sw.Sweep(context.Background())
		done <- st
	}()
	<-inPass
	st, err := sw.Sweep(context.Background())
	if err != nil || st.Skipped != 1 || st.Passes != 0 || st.Total().Due != 0 {
		t.Fatalf("second pass: %+v %v", st, err)
	}
	other := newUnitSweeper(t, ms, enq, func() time.Time { return t0 }, nil)
	if st, err := other.Sweep(context.Background()); err != nil || st.Passes != 1 || st.Skipped != 0 {
		t.Fatalf("another sweeper: %+v %v", st, err)
	}
	close(release)
	if st := <-done; st.Passes != 1 || st.Skipped != 0 {
		t.Fatalf("first pass: %+v", st)
	}
}

// TestNoOpsErrorsAndFollowUps: a task that is no longer due (the machine
// re-checks), a task that vanished, a failing transaction and a failing
// follow-up are each counted; the failure does not stop the others.
func TestNoOpsErrorsAndFollowUps(t *testing.T) {
	ms := newMemStore()
	enq := &recorder{fail: errBoom}
	now := t0.Add(time.Hour)
	ok1 := build(t, 1, t0, 3, task.EventEnqueued, task.EventStarted)
	ok2 := build(t, 2, t0, 3, task.EventEnqueued, task.EventStarted)
	broken := build(t, 3, t0, 3, task.EventEnqueued, task.EventStarted)
	stale := build(t, 4, t0, 3, task.EventEnqueued, task.EventStarted)
	for _, tk := range []task.Task{ok1, ok2, broken, stale} {
		ms.put(tk)
	}
	ms.fail[broken.ID] = errBoom
	// stale: after the query, before its transaction, a heartbeat extends
	// the lease; the machine's re-check inside the transaction sees it.
	ms.beforeApply = func(id string) {
		if id != stale.ID {
			return
		}
		ms.mu.Lock()
		defer ms.mu.Unlock()
		fresh := ms.tasks[id]
		ext := now.Add(time.Minute)
		fresh.LeaseExpiresAt = &ext
		ms.tasks[id] = fresh
	}
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return now }, nil)
	st, err := sw.Sweep(context.Background())
	if err == nil || !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Sweep error %v, want the failed transaction", err)
	}
	if st.Lease.Due != 4 || st.Lease.Applied != 2 || st.Lease.NoOp != 1 || st.Lease.Errors != 1 || st.Lease.FollowUpErrors != 2 {
		t.Fatalf("lease stats %+v", st.Lease)
	}
	if got := ms.get(stale.ID); got.State != api.Running || got.Attempt != 1 {
		t.Fatalf("stale task changed: %s attempt %d", got.State, got.Attempt)
	}
	calls := enq.calls()
	if len(calls[ok1.ID]) != 1 || len(calls[ok2.ID]) != 1 || len(calls) != 2 {
		t.Fatalf("follow-ups %v", calls)
	}
	if r := calls[ok1.ID][0]; !r.Enqueue || r.Task.Attempt != 2 || r.Task.State != api.Queued {
		t.Fatalf("follow-up result %+v", r)
	}
	// A vanished task is a no-op, not an error.
	ms3 := newMemStore()
	gone := build(t, 5, t0, 3, task.EventEnqueued, task.EventStarted)
	ms3.put(gone)
	ms3.fail[gone.ID] = fmt.Errorf("apply: %w", store.ErrNotFound)
	if st, err := newUnitSweeper(t, ms3, &recorder{}, func() time.Time { return now }, nil).Sweep(context.Background()); err != nil || st.Lease.NoOp != 1 {
		t.Fatalf("vanished task: %+v %v", st.Lease, err)
	}
}

// TestQueryErrorDoesNotStopOtherDuties: a failed due query is counted and
// reported; the other duties and the outbox re-drive still run.
func TestQueryErrorDoesNotStopOtherDuties(t *testing.T) {
	ms, enq := newMemStore(), &recorder{}
	ms.queryErr[store.DueDeadline] = errBoom
	tk := build(t, 0, t0, 1, task.EventEnqueued, task.EventStarted)
	ms.put(tk)
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return t0.Add(time.Hour) }, func(c *zombie.Config) { c.Redriver = enq })
	st, err := sw.Sweep(context.Background())
	if !errors.Is(err, errBoom) {
		t.Fatalf("error %v", err)
	}
	if st.Deadline.QueryErrors != 1 || st.Lease.Applied != 1 || enq.redrives.Load() != 1 {
		t.Fatalf("stats %+v redrives %d", st, enq.redrives.Load())
	}
}

// TestRunCadenceWindowAndContext: Run sweeps once with no window; within a
// window it never starts more passes than fit (one at 0, then one per
// Every before the end); it stops when ctx ends; the outbox re-drive runs
// once per pass. (KeepWindow: nothing is due, which would end the window
// after its first pass; earlyend_test.go tests that.)
func TestRunCadenceWindowAndContext(t *testing.T) {
	ctx := context.Background()
	t.Run("no window: one pass", func(t *testing.T) {
		enq := &recorder{}
		sw := newUnitSweeper(t, newMemStore(), enq, nil, func(c *zombie.Config) { c.Every, c.Redriver = 10*time.Millisecond, enq })
		st, err := sw.Run(ctx)
		if err != nil || st.Passes != 1 || enq.redrives.Load() != 1 {
			t.Fatalf("passes %d redrives %d err %v", st.Passes, enq.redrives.Load(), err)
		}
	})
	t.Run("window bounds the passes", func(t *testing.T) {
		enq := &recorder{}
		sw := newUnitSweeper(t, newMemStore(), enq, nil, func(c *zombie.Config) {
			c.Every, c.Window, c.Redriver, c.KeepWindow = 40*time.Millisecond, 130*time.Millisecond, enq, true
		})
		st, err := sw.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Passes start at 0, 40, 80, 120 ms at the earliest: at most 4.
		if st.Passes < 1 || st.Passes > 4 || int(enq.redrives.Load()) != st.Passes {
			t.Fatalf("passes %d redrives %d", st.Passes, enq.redrives.Load())
		}
		t.Logf("passes in a 130 ms window every 40 ms: %d", st.Passes)
	})
	t.Run("ctx ends the run", func(t *testing.T) {
		ms, enq := newMemStore(), &recorder{}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var passes atomic.Int32
		ms.onQuery = func(d store.Due) {
			if d == store.DueDeadline && passes.Add(1) == 2 {
				cancel()
			}
		}
		sw := newUnitSweeper(t, ms, enq, nil, func(c *zombie.Config) { c.Every, c.Window, c.KeepWindow = 5*time.Millisecond, time.Hour, true })
		st, err := sw.Run(cctx)
		if !errors.Is(err, context.Canceled) || st.Passes != 2 {
			t.Fatalf("passes %d err %v", st.Passes, err)
		}
	})
}

// TestHandleEventWindowFromTickTime: the window is measured from the
// tick's time, so a late tick sweeps once; a fresh tick keeps sweeping; a
// cancelled invocation reports an error.
func TestHandleEventWindowFromTickTime(t *testing.T) {
	mk := func(at time.Time) cloudevents.Event {
		e := cloudevents.NewEvent()
		e.SetID("1")
		e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
		e.SetSource("//pubsub.googleapis.com/projects/p/topics/servo-sweep")
		if !at.IsZero() {
			e.SetTime(at)
		}
		return e
	}
	var passes atomic.Int32
	ms := newMemStore()
	ms.onQuery = func(d store.Due) {
		if d == store.DueDeadline {
			passes.Add(1)
		}
	}
	sw := newUnitSweeper(t, ms, &recorder{}, nil, func(c *zombie.Config) { c.Every, c.Window = 30*time.Millisecond, 100*time.Millisecond })
	if err := sw.HandleEvent(context.Background(), mk(time.Now().Add(-time.Minute))); err != nil || passes.Load() != 1 {
		t.Fatalf("late tick: passes %d err %v", passes.Load(), err)
	}
	passes.Store(0)
	if err := sw.HandleEvent(context.Background(), mk(time.Now())); err != nil || passes.Load() < 1 || passes.Load() > 4 {
		t.Fatalf("fresh tick: passes %d err %v", passes.Load(), err)
	}
	passes.Store(0)
	if err := sw.HandleEvent(context.Background(), mk(time.Time{})); err != nil || passes.Load() < 1 || passes.Load() > 4 {
		t.Fatalf("tick without time: passes %d err %v", passes.Load(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sw.HandleEvent(ctx, mk(time.Now())); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled invocation: %v", err)
	}
}

// cleaner is a Cleaner that counts its calls and deletes n each time.
type cleaner struct {
	calls, n int
	err      error
	deadline time.Time // of the last call's context
}

func (c *cleaner) DeleteLeftoverStreams(ctx context.Context, _ time.Time) (int, error) {
	c.calls++
	c.deadline, _ = ctx.Deadline()
	return c.n, c.err
}

// The leftover stream subscriptions are deleted on a Sweeper's first pass
// and then at most every CleanEvery; a failure is the pass's error, and
// the duties still run.
func TestCleanerCadence(t *testing.T) {
	c := &cleaner{n: 3}
	sw, err := zombie.New(zombie.Config{Store: newMemStore(), Enqueuer: &recorder{}, Cleaner: c, CleanEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sw.Sweep(t.Context())
	if err != nil || c.calls != 1 || st.StreamsDeleted != 3 {
		t.Fatalf("first pass: %d calls, %+v, %v", c.calls, st, err)
	}
	// Bounded: a Pub/Sub that does not answer cannot hold the pass.
	if c.deadline.IsZero() || time.Until(c.deadline) > 10*time.Second {
		t.Fatalf("the cleaner's context ends at %v", c.deadline)
	}
	if st, err := sw.Sweep(t.Context()); err != nil || c.calls != 1 || st.StreamsDeleted != 0 {
		t.Fatalf("second pass within CleanEvery: %d calls, %+v, %v", c.calls, st, err)
	}
	c2 := &cleaner{err: errors.New("permission denied")}
	sw2, err := zombie.New(zombie.Config{Store: newMemStore(), Enqueuer: &recorder{}, Cleaner: c2})
	if err != nil {
		t.Fatal(err)
	}
	if sw2.Config().CleanEvery != zombie.DefaultCleanEvery {
		t.Fatalf("CleanEvery %v, want the default", sw2.Config().CleanEvery)
	}
	if st, err := sw2.Sweep(t.Context()); err == nil || !strings.Contains(err.Error(), "permission denied") || st.Passes != 1 {
		t.Fatalf("failing cleaner: %+v, %v", st, err)
	}
}
