package zombie_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// TestHeartbeatVersusSweepRace races, for each of many tasks, a heartbeat
// sent just before the lease deadline against a sweep just after it. The
// clocks are fixed (heartbeat at lease−1ms, sweeper at lease+1ms), so the
// only thing that decides is which transaction commits first, and exactly
// one outcome may win: either the heartbeat is accepted and the attempt
// lives on (the sweep's re-check finds the extended lease), or the attempt
// is a ZOMBIE, retried, and the heartbeat is refused. Never both.
func TestHeartbeatVersusSweepRace(t *testing.T) {
	const n = 40
	e := newEnv(t)
	long := api.Timing{HeartbeatIntervalMs: 10_000, HeartbeatTimeoutMs: 60_000, CancelGracePeriodMs: 60_000, StartTimeoutMs: 600_000}
	base := time.Now().UTC().Truncate(time.Millisecond)
	lease := base.Add(long.HeartbeatTimeout())
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tk := e.create(spec{maxAttempts: 3, timing: long})
			e.apply(tk.ID, task.Event{Kind: task.EventEnqueued, Now: base})
			st := e.apply(tk.ID, task.Event{Kind: task.EventStarted, WorkerID: "w1", Now: base}).Task
			if !st.LeaseExpiresAt.Equal(lease) {
				t.Errorf("lease %v, want %v", st.LeaseExpiresAt, lease)
			}
			ids[i] = tk.ID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rec := &recorder{} // follow-ups are not the subject here
	// The heartbeats start the moment the lease query has answered, so
	// they race the sweeper's transactions, not its query.
	start := make(chan struct{})
	gate := &gatedStore{Store: e.st, due: store.DueLease, open: start}
	sw, err := zombie.New(zombie.Config{Store: gate, Enqueuer: rec, Logger: quiet, Concurrency: 16,
		Now: func() time.Time { return lease.Add(time.Millisecond) }, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	hbAt := lease.Add(-time.Millisecond)
	type hbResult struct {
		r   task.Result
		err error
	}
	results := make([]hbResult, n)
	var stats zombie.Stats
	var sweepErr error
	for i, id := range ids {
		wg.Go(func() {
			<-start
			r, err := e.st.Apply(context.Background(), id, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: hbAt,
				Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1"}})
			results[i] = hbResult{r, err}
		})
	}
	wg.Go(func() { stats, sweepErr = sw.Sweep(context.Background()) })
	wg.Wait()
	if sweepErr != nil {
		t.Fatalf("sweep: %v", sweepErr)
	}
	var alive, zombies int
	for i, id := range ids {
		hb := results[i]
		if hb.err != nil {
			t.Fatalf("heartbeat %s: %v", id, hb.err)
		}
		got := e.get(id)
		a1 := got.Attempts[0]
		accepted := hb.r.Rejection == nil && hb.r.Write
		swept := a1.Outcome == api.OutcomeZombie
		zombieEvents := 0
		for _, ob := range e.outbox(id) {
			if ob.Attempt == 1 && ob.Outcome == api.OutcomeZombie {
				zombieEvents++
			}
		}
		switch {
		case accepted && !swept:
			alive++
			if got.State != api.Running || got.Attempt != 1 || zombieEvents != 0 || !got.LeaseExpiresAt.Equal(hbAt.Add(long.HeartbeatTimeout())) {
				t.Fatalf("%s: heartbeat won but task is %s attempt %d, %d zombie events", id, got.State, got.Attempt, zombieEvents)
			}
		case !accepted && swept:
			zombies++
			if hb.r.Rejection == nil || hb.r.Rejection.Code != api.CodeAttemptMismatch {
				t.Fatalf("%s: sweep won but the heartbeat got %+v", id, hb.r.Rejection)
			}
			if got.State != api.Queued || got.Attempt != 2 || zombieEvents != 1 {
				t.Fatalf("%s: sweep won but task is %s attempt %d, %d zombie events", id, got.State, got.Attempt, zombieEvents)
			}
		default:
			t.Fatalf("%s: heartbeat accepted=%v and attempt swept=%v", id, accepted, swept)
		}
	}
	if stats.Lease.Applied != zombies || stats.Lease.Applied+stats.Lease.NoOp != stats.Lease.Due || rec.count() != zombies {
		t.Fatalf("stats %+v, %d zombies, %d follow-ups", stats.Lease, zombies, rec.count())
	}
	t.Logf("of %d races: heartbeat won %d, sweep won %d (sweep saw %d due, %d no longer due inside the transaction)",
		n, alive, zombies, stats.Lease.Due, stats.Lease.NoOp)
}

// gatedStore closes open once the due query has answered.
type gatedStore struct {
	zombie.Store
	due  store.Due
	open chan struct{}
	once sync.Once
}

func (g *gatedStore) DueTasks(ctx context.Context, d store.Due, shard []int, now time.Time, limit int, after *store.DueCursor) ([]task.Task, error) {
	ts, err := g.Store.DueTasks(ctx, d, shard, now, limit, after)
	if d == g.due {
		g.once.Do(func() { close(g.open) })
	}
	return ts, err
}

// TestTwoSweepersAtOnce runs two sweepers, each with its own Firestore
// connection, over the same zombies at the same time: every zombie is
// retried exactly once (one committed transition, one attempt 2, one
// follow-up, one Cloud Task for attempt 2) and its outbox holds no
// duplicate event.
func TestTwoSweepersAtOnce(t *testing.T) {
	const n = 20
	e := newEnv(t)
	ids := make([]string, n)
	var lease time.Time
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			// A long start timeout: the retried attempts must not become
			// due for a re-drive during the test.
			tk := e.running(spec{maxAttempts: 3, timing: api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 300, CancelGracePeriodMs: 300, StartTimeoutMs: 60_000}}, false)
			ids[i] = tk.ID
			mu.Lock()
			if tk.LeaseExpiresAt.After(lease) {
				lease = *tk.LeaseExpiresAt
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The second sweeper's own connection, and a record of every commit
	// each store makes.
	st2, err := store.New(e.ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	committed := map[string][]task.Transition{}
	hook := func(_ context.Context, trs []task.Transition) {
		mu.Lock()
		defer mu.Unlock()
		for _, tr := range trs {
			committed[tr.TaskID] = append(committed[tr.TaskID], tr)
		}
	}
	e.st.OnCommit(hook)
	st2.OnCommit(hook)
	rec := &recorder{next: e.enq}
	mk := func(s zombie.Store) *zombie.Sweeper {
		sw, err := zombie.New(zombie.Config{Store: s, Enqueuer: rec, Logger: quiet, Jitter: func() float64 { return 0 }, PageSize: 7, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}
	sweepers := []*zombie.Sweeper{mk(e.st), mk(st2)}
	waitPast(t, &lease)
	stats := make([]zombie.Stats, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, sw := range sweepers {
		wg.Go(func() {
			<-start
			stats[i], errs[i] = sw.Sweep(e.ctx)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("sweeper %d: %v", i, err)
		}
	}
	if applied := stats[0].Lease.Applied + stats[1].Lease.Applied; applied != n {
		t.Fatalf("applied %d (+%d), want %d in all", stats[0].Lease.Applied, stats[1].Lease.Applied, n)
	}
	calls := rec.calls()
	for _, id := range ids {
		if trs := committed[id]; len(trs) != 1 || trs[0].From != api.Running || trs[0].To != api.Queued || trs[0].NextAttempt != 2 {
			t.Fatalf("%s: committed transitions %+v", id, trs)
		}
		if len(calls[id]) != 1 {
			t.Fatalf("%s: %d follow-ups", id, len(calls[id]))
		}
		got := e.get(id)
		if got.State != api.Queued || got.Attempt != 2 || len(got.Attempts) != 2 || got.Seq != 4 {
			t.Fatalf("%s: %s attempt %d attempts %d seq %d", id, got.State, got.Attempt, len(got.Attempts), got.Seq)
		}
		ob := e.outbox(id)
		seen := map[string]bool{}
		for i, o := range ob {
			if seen[o.EventID] || o.Seq != int64(i+1) {
				t.Fatalf("%s: outbox %+v", id, ob)
			}
			seen[o.EventID] = true
		}
		if len(ob) != 4 || ob[3].To != api.Queued || ob[3].Outcome != api.OutcomeZombie {
			t.Fatalf("%s: outbox has %d entries, last %+v", id, len(ob), ob[len(ob)-1].Transition)
		}
		if e.cloudTask(id, 2) == nil && len(e.worker.of(id)) == 0 {
			t.Fatalf("%s: attempt 2 neither queued nor delivered", id)
		}
	}
	eventually(t, "every attempt 2 delivered", func() bool {
		for _, id := range ids {
			if len(e.worker.of(id)) < 1 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if ds := e.worker.of(id); len(ds) != 1 || ds[0].Attempt != 2 {
			t.Fatalf("%s: deliveries %+v", id, ds)
		}
	}
	t.Logf("sweeper A applied %d (no-op %d), sweeper B applied %d (no-op %d)",
		stats[0].Lease.Applied, stats[0].Lease.NoOp, stats[1].Lease.Applied, stats[1].Lease.NoOp)
}
