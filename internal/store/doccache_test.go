package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestTaskCache: a store that wrote a task's last version applies the
// next event with one RPC, its commit (doccache.go), and what it commits
// is what a read would have given. When another store wrote the task
// meanwhile, the cached version loses: a transition's or a progress
// heartbeat's commit fails its precondition and is applied again to what
// a read finds; an answer that would commit nothing (a heartbeat with more
// than half its lease left) is never given from the cache.
func TestTaskCache(t *testing.T) {
	ctx := context.Background()
	s, rc := newStore(t, store.WithTaskCache(store.DefaultTaskCacheEntries))
	other := sameProject(t, s)                         // no cache
	now := time.Now().UTC().Truncate(time.Millisecond) // Firestore keeps microseconds
	hb := func(at time.Duration, pct *int) task.Event {
		return task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: now.Add(at),
			Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: pct}}
	}
	rpcs := func(what string, want map[string]int) {
		t.Helper()
		got := rc.Counts()
		if len(got) != len(want) {
			t.Errorf("%s: RPCs %v, want %v", what, got, want)
			return
		}
		for m, n := range want {
			if got[m] != n {
				t.Errorf("%s: RPCs %v, want %v", what, got, want)
				return
			}
		}
	}
	commit := map[string]int{"Commit": 1}

	t.Run("hits", func(t *testing.T) {
		tk := mustCreate(t, s, submitted(now, ""), now) // interval 1 s, timeout 3 s
		p10 := 10
		for _, step := range []struct {
			name string
			ev   task.Event
		}{
			{"enqueued", task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now}},
			{"started", task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now}},
			{"heartbeat with progress", hb(100*time.Millisecond, &p10)},
			{"completed", task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: now.Add(200 * time.Millisecond),
				Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}}},
		} {
			rc.Reset()
			if r := mustApply(t, s, tk.ID, step.ev); r.Rejection != nil {
				t.Fatalf("%s: %+v", step.name, r.Rejection)
			}
			rpcs(step.name, commit)
		}
		got, err := other.Get(ctx, tk.ID) // read by a store that cached nothing
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Attempts[0]; got.State != api.Succeeded || a.ProgressPct == nil || *a.ProgressPct != 10 || a.WorkerID != "w1" {
			t.Fatalf("after the cached steps: %s, attempt %+v", got.State, a)
		}
	})

	t.Run("another writer first", func(t *testing.T) {
		tk := mustCreate(t, s, submitted(now, ""), now)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
		p20, p30 := 20, 30
		mustApply(t, other, tk.ID, hb(200*time.Millisecond, &p20))
		rc.Reset()
		if r := mustApply(t, s, tk.ID, hb(300*time.Millisecond, &p30)); r.Rejection != nil {
			t.Fatalf("heartbeat after another store's: %+v", r.Rejection)
		}
		// The cached version's commit, refused; the read; the commit.
		rpcs("a progress heartbeat on a stale version", map[string]int{"Commit": 2, "BatchGetDocuments": 1})
		got, err := other.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if a := got.Attempts[0]; a.ProgressPct == nil || *a.ProgressPct != 30 || !a.LastHeartbeatAt.Equal(now.Add(300*time.Millisecond)) {
			t.Fatalf("after the retried heartbeat: attempt %+v", a)
		}

		// A task this store started (its cache has the attempt running,
		// with 2.4 s of its 3 s lease left at 600 ms) and the other store
		// ended: an event that would write nothing (a heartbeat within
		// its lease, a repeated started) is answered from a read, and
		// refused.
		for _, ev := range []task.Event{
			hb(600*time.Millisecond, nil),
			{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now.Add(600 * time.Millisecond)},
		} {
			tk = mustCreate(t, s, submitted(now, ""), now)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
			mustApply(t, other, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: now.Add(500 * time.Millisecond),
				Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
			rc.Reset()
			r := mustApply(t, s, tk.ID, ev)
			if r.Rejection == nil || r.Task.State != api.Succeeded {
				t.Fatalf("%s of an attempt another store ended: rejection %+v, state %s; want refused, SUCCEEDED (answered from a stale cache?)", ev.Kind, r.Rejection, r.Task.State)
			}
			rpcs(string(ev.Kind)+" that writes nothing", map[string]int{"BatchGetDocuments": 1})
		}
	})
}
