package task

import (
	"strings"
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

// Before its start timeout ends, a QUEUED attempt's dispatch check is a
// delivery probe: failing deliveries are recorded and looked at again
// after as long again as the attempt has waited (never past the start
// timeout); a dispatch not tried yet, gone, or a pull worker's is next
// looked at when the start timeout ends. A probe never re-drives, ends
// the attempt or records a transition; the attempt's start clears it.
func TestDeliveryProbe(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	timing := api.Timing{StartTimeoutMs: 600_000, HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 1000}
	if got := DeliveryProbe(timing); got != 30*time.Second {
		t.Fatalf("DeliveryProbe(10 min) = %v, want 30s", got)
	}
	if got := DeliveryProbe(api.Timing{StartTimeoutMs: 8000}); got != 2*time.Second {
		t.Fatalf("DeliveryProbe(8 s) = %v, want 2s", got)
	}
	pending := Task{ID: "t1", State: api.Pending, Attempt: 1, Timing: timing}
	r := Apply(pending, &Attempt{Attempt: 1}, Event{Kind: EventEnqueued, Attempt: 1, Now: t0})
	q := r.Task
	if q.State != api.Queued || !q.StartTimeoutAt.Equal(t0.Add(10*time.Minute)) || !q.DispatchCheckAt.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("enqueued: %s, start timeout %v, first check %v", q.State, q.StartTimeoutAt, q.DispatchCheckAt)
	}
	failing := func(at time.Time) *api.Delivery {
		last := at.Add(-time.Second)
		return &api.Delivery{Attempts: 4, LastStatus: "UNAVAILABLE", LastError: "connection refused", LastAttemptAt: &last, CheckedAt: at}
	}
	for _, tt := range []struct {
		name     string
		at       time.Duration // since the enqueue
		held     bool
		delivery *api.Delivery
		next     time.Duration // the next check, since the enqueue
		recorded bool
	}{
		{"failing at 30 s: again at 1 min", 30 * time.Second, true, failing(t0.Add(30 * time.Second)), time.Minute, true},
		{"failing at 4 min: again at 8 min", 4 * time.Minute, true, failing(t0.Add(4 * time.Minute)), 8 * time.Minute, true},
		{"failing at 8 min: again at the start timeout", 8 * time.Minute, true, failing(t0.Add(8 * time.Minute)), 10 * time.Minute, true},
		{"not tried yet (a backlog)", 30 * time.Second, true, &api.Delivery{CheckedAt: t0.Add(30 * time.Second)}, 10 * time.Minute, false},
		{"no longer held", 30 * time.Second, false, nil, 10 * time.Minute, false},
		{"a pull worker's", 30 * time.Second, false, nil, 10 * time.Minute, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tk := q
			check := t0.Add(tt.at)
			tk.DispatchCheckAt = &check
			r := Apply(tk, &Attempt{Attempt: 1}, Event{Kind: EventRedrive, Attempt: 1, Now: check, MaxRedrives: 5, Held: tt.held, Delivery: tt.delivery})
			if !r.Write || r.Enqueue || r.Task.State != api.Queued || r.Task.Redrives != 0 || len(r.Transitions) != 0 {
				t.Fatalf("write %v enqueue %v state %s redrives %d transitions %d; want a write alone", r.Write, r.Enqueue, r.Task.State, r.Task.Redrives, len(r.Transitions))
			}
			if !r.Task.DispatchCheckAt.Equal(t0.Add(tt.next)) {
				t.Fatalf("next check at +%v, want +%v", r.Task.DispatchCheckAt.Sub(t0), tt.next)
			}
			if (r.Task.Delivery != nil) != tt.recorded {
				t.Fatalf("delivery %+v, recorded want %v", r.Task.Delivery, tt.recorded)
			}
		})
	}
	// Past the start timeout, a dispatch no longer held is re-driven.
	tk := q
	end := *q.StartTimeoutAt
	tk.DispatchCheckAt = &end
	if r := Apply(tk, &Attempt{Attempt: 1}, Event{Kind: EventRedrive, Attempt: 1, Now: end, MaxRedrives: 5}); !r.Enqueue || r.Task.Redrives != 1 {
		t.Fatalf("at the start timeout: enqueue %v redrives %d, want a re-drive", r.Enqueue, r.Task.Redrives)
	}
	// Held past it: the delivery is recorded, the check stretched.
	r = Apply(tk, &Attempt{Attempt: 1}, Event{Kind: EventRedrive, Attempt: 1, Now: end, MaxRedrives: 5, Held: true, Delivery: failing(end)})
	if r.Enqueue || r.Task.Delivery == nil || !r.Task.DispatchCheckAt.Equal(end.Add(10*time.Minute)) {
		t.Fatalf("held at the start timeout: enqueue %v delivery %v next %v", r.Enqueue, r.Task.Delivery, r.Task.DispatchCheckAt)
	}
	// The attempt starts: the delivery and the start timeout are gone.
	r = Apply(r.Task, &Attempt{Attempt: 1}, Event{Kind: EventStarted, Attempt: 1, WorkerID: "w", Now: end.Add(time.Second)})
	if r.Task.State != api.Running || r.Task.Delivery != nil || r.Task.StartTimeoutAt != nil || r.Task.DispatchCheckAt != nil {
		t.Fatalf("started: %s delivery %v start timeout %v check %v", r.Task.State, r.Task.Delivery, r.Task.StartTimeoutAt, r.Task.DispatchCheckAt)
	}
}

// An attempt that ends DISPATCH_TIMEOUT carries why: the last failing
// delivery Cloud Tasks reported (this pass's, else the one a probe
// recorded), so the dead letter names the unreachable worker; without one,
// that none was recorded.
func TestDispatchTimeoutError(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	check := t0.Add(-time.Second)
	last := t0.Add(-2 * time.Second)
	recorded := &api.Delivery{Attempts: 9, LastStatus: "UNAVAILABLE", LastError: "connection refused", LastAttemptAt: &last, CheckedAt: check}
	for _, tt := range []struct {
		name     string
		onTask   *api.Delivery
		seen     *api.Delivery
		contains []string
	}{
		{"recorded by a probe", recorded, nil, []string{`worker "render" unreachable: UNAVAILABLE: connection refused (9 delivery tries)`, "5 re-drive(s)"}},
		{"seen in this pass", nil, &api.Delivery{Attempts: 3, LastStatus: "INTERNAL", LastError: "HTTP 500", CheckedAt: t0}, []string{`worker "render" unreachable: INTERNAL: HTTP 500 (3 delivery tries)`}},
		{"none", nil, nil, []string{"not started within its start timeout, 5 re-drive(s) included", "no failing delivery was recorded"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tk := Task{ID: "t1", State: api.Queued, Attempt: 1, Redrives: 5, Worker: "render", DispatchCheckAt: &check,
				Delivery: tt.onTask, Timing: api.Timing{StartTimeoutMs: 60_000}}
			r := Apply(tk, &Attempt{Attempt: 1}, Event{Kind: EventRedrive, Attempt: 1, Now: t0, MaxRedrives: 5, Delivery: tt.seen})
			if r.Task.State != api.Failed || r.Task.Reason != api.ReasonDispatchTimeout {
				t.Fatalf("state %s %s, want FAILED DISPATCH_TIMEOUT", r.Task.State, r.Task.Reason)
			}
			e := r.Attempt.Error
			if e == nil || e.Category != api.CategoryTimeout {
				t.Fatalf("attempt error %+v, want a TIMEOUT error", e)
			}
			for _, want := range tt.contains {
				if !strings.Contains(e.Message, want) {
					t.Errorf("message %q lacks %q", e.Message, want)
				}
			}
			if len(r.Transitions) != 1 || r.Transitions[0].Error == nil || r.Transitions[0].Error.Message != e.Message || !r.Transitions[0].DeadLetter {
				t.Fatalf("transition %+v: want the dead letter to carry the error", r.Transitions)
			}
		})
	}
}
