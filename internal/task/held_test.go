package task

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// A dispatch Cloud Tasks still holds is never re-driven nor failed
// DISPATCH_TIMEOUT, even past MaxRedrives: its start timeout is stretched.
func TestHeldDispatchStretches(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	check := t0.Add(-time.Second)
	tk := Task{ID: "t1", State: api.Queued, Attempt: 1, Redrives: 5, DispatchCheckAt: &check,
		Timing: api.Timing{StartTimeoutMs: 60_000}}
	for _, tt := range []struct {
		name     string
		held     bool
		state    api.State
		enqueue  bool
		redrives int
	}{
		{"held", true, api.Queued, false, 5},
		{"not held, re-drives exhausted", false, api.Failed, false, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := Apply(tk, &Attempt{Attempt: 1}, Event{Kind: EventRedrive, Attempt: 1, Now: t0, MaxRedrives: 5, Held: tt.held})
			if r.Task.State != tt.state || r.Enqueue != tt.enqueue || r.Task.Redrives != tt.redrives || !r.Write {
				t.Fatalf("state %s enqueue %v redrives %d write %v", r.Task.State, r.Enqueue, r.Task.Redrives, r.Write)
			}
			if tt.held && !r.Task.DispatchCheckAt.Equal(t0.Add(time.Minute)) {
				t.Fatalf("dispatch check %v, want a start timeout from now", r.Task.DispatchCheckAt)
			}
		})
	}
}
