package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// TestHeartbeatHistory: the written heartbeats of an attempt are counted and their
// instants kept on the task while it runs (the cheap heartbeat path) and
// folded into the attempt record at its end, so the dashboard can draw one
// tick per heartbeat.
func TestHeartbeatHistory(t *testing.T) {
	s, _ := newStore(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	tk := mustCreate(t, s, submitted(now, ""), now)
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
	var beats []time.Time
	for i := range 5 {
		at := now.Add(time.Duration(i+1) * 700 * time.Millisecond)
		beats = append(beats, at)
		// A new progress each time: every heartbeat is written (one that
		// changes nothing but a lease with over half left is not recorded;
		// TestHeartbeatWithHalfLeaseLeftWritesNothing).
		p := 10 * i
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Heartbeat: &api.HeartbeatRequest{ProgressPct: &p}, Now: at})
	}
	check := func(when string) {
		t.Helper()
		got, err := s.Get(context.Background(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Attempts) != 1 {
			t.Fatalf("%s: %d attempts", when, len(got.Attempts))
		}
		a := got.Attempts[0]
		ticks := a.HeartbeatTimes()
		if a.Heartbeats != len(beats) || len(ticks) != len(beats) {
			t.Fatalf("%s: %d heartbeats, %d ticks; want %d", when, a.Heartbeats, len(ticks), len(beats))
		}
		for i := range ticks {
			if !ticks[i].Equal(beats[i]) {
				t.Errorf("%s: tick %d at %v, want %v", when, i, ticks[i], beats[i])
			}
		}
	}
	check("running")
	end := now.Add(5 * time.Second)
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: end,
		Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
	check("completed")
}
