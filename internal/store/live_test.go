package store

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// TestMirrored: the attempt record is left unwritten only when its stored
// form overlaid with the task's new live state reads back as the attempt
// the machine produced.
func TestMirrored(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	p := 30
	stored := task.Attempt{Attempt: 1, CreatedAt: t0}
	started := stored
	started.WorkerID, started.StartedAt = "w1", &t1
	withMessage := started
	withMessage.Message = "old"
	cases := []struct {
		name string
		rec  *task.Attempt
		a    func(task.Attempt) task.Attempt // from the overlaid record
		want bool
	}{
		{"started", &stored, func(a task.Attempt) task.Attempt { a.WorkerID, a.StartedAt = "w1", &t1; return a }, true},
		{"progress and message", &started, func(a task.Attempt) task.Attempt { a.ProgressPct, a.Message = &p, "m"; return a }, true},
		{"nothing changed", &started, func(a task.Attempt) task.Attempt { return a }, true},
		{"execution", &started, func(a task.Attempt) task.Attempt { a.Execution = "projects/p/executions/e"; return a }, true},
		{"execution before started", &stored, func(a task.Attempt) task.Attempt { a.Execution = "projects/p/executions/e"; return a }, true},
		{"ended", &started, func(a task.Attempt) task.Attempt { a.Outcome, a.CompletedAt = api.OutcomeSucceeded, &t1; return a }, false},
		{"expiry", &started, func(a task.Attempt) task.Attempt { a.ExpireAt = &t1; return a }, false},
		{"message cleared (Live cannot say empty)", &withMessage, func(a task.Attempt) task.Attempt { a.Message = ""; return a }, false},
		{"nothing changed, no live state", &stored, func(a task.Attempt) task.Attempt { return a }, true},
		{"no record", nil, func(a task.Attempt) task.Attempt { a.WorkerID, a.StartedAt = "w1", &t1; return a }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var base task.Attempt
			if c.rec != nil {
				base = *c.rec
			}
			a := c.a(base)
			r := task.Result{Task: task.Task{Attempt: 1, State: api.Running}, Attempt: &a}
			setLive(&r)
			if got := mirrored(c.rec, r.Task.Live, &a); got != c.want {
				t.Fatalf("mirrored = %v, want %v (live %+v)", got, c.want, r.Task.Live)
			}
		})
	}
}
