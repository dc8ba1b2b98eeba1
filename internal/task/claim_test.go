package task

import (
	"testing"
	"time"
)

// A claim starts only an attempt nobody has started: a duplicate transport
// message (the attempt already RUNNING, even for the same worker id), a
// cancelled task and an older attempt are refused and change nothing.
func TestClaim(t *testing.T) {
	cases := []struct {
		name     string
		state    State
		attempt  int
		workerID string
		want     State
		code     string
	}{
		{"pending", Pending, 1, "w2", Running, ""},
		{"queued", Queued, 1, "w2", Running, ""},
		{"running, same worker", Running, 1, "w1", Running, CodeAttemptAlreadyStarted},
		{"running, another worker", Running, 1, "w2", Running, CodeAttemptAlreadyStarted},
		{"cancelling", Cancelling, 1, "w2", Cancelling, CodeAttemptAlreadyStarted},
		{"cancelled", Cancelled, 1, "w2", Cancelled, CodeTaskAlreadyTerminal},
		{"succeeded", Succeeded, 1, "w2", Succeeded, CodeTaskAlreadyTerminal},
		{"older attempt", Queued, 0, "w2", Queued, CodeAttemptMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(c.state)
			// Late enough that a RUNNING task's lease has run out: a claim
			// still does not apply the expiry.
			now := t0.Add(time.Hour)
			r := Apply(tk, a, Event{Kind: EventClaimed, Attempt: c.attempt, WorkerID: c.workerID, Now: now})
			if r.Task.State != c.want {
				t.Fatalf("state %s, want %s", r.Task.State, c.want)
			}
			if c.code == "" {
				if r.Rejection != nil || !r.Write || r.Attempt.WorkerID != c.workerID || r.Task.LeaseExpiresAt == nil || !r.Task.LeaseExpiresAt.After(now) {
					t.Fatalf("claim not applied: %+v", r)
				}
				if len(r.Transitions) != 1 || r.Transitions[0].Reason != ReasonStarted {
					t.Fatalf("transitions %+v", r.Transitions)
				}
				return
			}
			if r.Rejection == nil || r.Rejection.Code != c.code {
				t.Fatalf("rejection %v, want %s", r.Rejection, c.code)
			}
			if r.Write || len(r.Transitions) != 0 {
				t.Fatalf("a refused claim wrote: %+v", r)
			}
		})
	}
}
