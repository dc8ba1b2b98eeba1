package callbacks_test

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/task"
)

// pacedTiming: a 1 s interval, a 4 s lease and an 8 s grace, so that the
// lease bound decides the hint (docs/contract.md §5.7): 4 s - max(1.5 s,
// 1 s) = 2.5 s after a written heartbeat.
var pacedTiming = api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 4000, CancelGracePeriodMs: 8000}

// TestNextHeartbeatInAnswers: every 200 to `started` and `heartbeat`
// carries nextHeartbeatInMs by task.NextHeartbeatIn — from the lease as
// the callback left it (renewed, or kept by a skipped heartbeat), half
// the grace, the token the worker holds after the answer (a refreshed
// one's), the interval while CANCELLING — and no other answer does.
func TestNextHeartbeatInAnswers(t *testing.T) {
	e := newEnv(t, nil)
	base := e.clock.Now().Truncate(time.Second).Add(time.Second) // token times are whole seconds
	type step struct {
		at   time.Duration // after base
		kind callbacks.Kind
		body any
		// token: issued that long before the step, with that lifetime
		// (0: one hour, issued at base).
		issued, ttl time.Duration
		status      int
		want        int64 // nextHeartbeatInMs; 0: absent
		refreshed   bool
	}
	const s = time.Second
	plain := api.HeartbeatRequest{Attempt: 1, WorkerID: "w1"}
	progress := heartbeatReq(1, "w1") // progress and a message: always written
	tests := []struct {
		name   string
		timing api.Timing
		setup  func(tk task.Task)
		steps  []step
	}{
		{name: "started, a skipped heartbeat, a written one", timing: pacedTiming, steps: []step{
			{at: 0, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 2500},
			// Lease 3 s left: not written, kept; 3 - 1.5 = 1.5 s.
			{at: 1 * s, kind: callbacks.KindHeartbeat, body: plain, status: 200, want: 1500},
			// Lease 1.5 s left: written, renewed to 4 s.
			{at: 2500 * time.Millisecond, kind: callbacks.KindHeartbeat, body: plain, status: 200, want: 2500},
			// Progress: written; a repeated started keeps the lease.
			{at: 3 * s, kind: callbacks.KindHeartbeat, body: progress, status: 200, want: 2500},
			{at: 4 * s, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 1500},
			{at: 5 * s, kind: callbacks.KindCompleted, body: completedReq(1, "w1", api.OutcomeSucceeded), status: 200},
			// A refusal carries none.
			{at: 6 * s, kind: callbacks.KindHeartbeat, body: plain, status: 409},
		}},
		{name: "the grace binds", timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 12000, CancelGracePeriodMs: 6000}, steps: []step{
			{at: 0, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 3000},
		}},
		{name: "the defaults: the interval", timing: api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 90000, CancelGracePeriodMs: 30000}, steps: []step{
			{at: 0, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 30000},
			{at: 0, kind: callbacks.KindHeartbeat, body: progress, status: 200, want: 30000},
		}},
		{name: "the token binds", timing: pacedTiming, steps: []step{
			{at: 0, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 2500},
			// A 16 s token (valid from base - 10 s) with 4.4 s left: not
			// refreshed (a 4 s window); the next heartbeat must reach
			// Servo with 2 s left: in 2.4 s (the lease allows 2.5 s).
			{at: 1600 * time.Millisecond, kind: callbacks.KindHeartbeat, body: progress, issued: 11600 * time.Millisecond, ttl: 16 * s, status: 200, want: 2400},
			// 3.5 s left: refreshed (an hour); the lease decides again:
			// 3.1 s left (this plain heartbeat is not written) - 1.5 s.
			{at: 2500 * time.Millisecond, kind: callbacks.KindHeartbeat, body: plain, issued: 12500 * time.Millisecond, ttl: 16 * s, status: 200, want: 1600, refreshed: true},
		}},
		{name: "CANCELLING: the interval", timing: pacedTiming, setup: func(tk task.Task) {
			e.apply(tk.ID, task.Event{Kind: task.EventCancel, Reason: "user_requested"})
		}, steps: []step{
			{at: 0, kind: callbacks.KindHeartbeat, body: plain, status: 200, want: 1000},
			{at: 0, kind: callbacks.KindStarted, body: startedReq(1, "w1"), status: 200, want: 1000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.t = t
			e.clock.Set(base)
			tk := e.create(func(tk *task.Task) { tk.Timing = tt.timing })
			tk = e.apply(tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1}).Task
			if tt.setup != nil {
				tk = e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"}).Task
				tt.setup(tk)
			}
			for i, st := range tt.steps {
				now := base.Add(st.at)
				e.clock.Set(now)
				tok := e.tokenFor(scopeOf(tk, 1), time.Hour, base)
				if st.ttl > 0 {
					tok = e.tokenFor(scopeOf(tk, 1), st.ttl, now.Add(-st.issued))
				}
				rp := e.post(st.kind, tk.ID, tok, st.body)
				if rp.status != st.status {
					t.Fatalf("step %d (%s at +%v): %d %s, want %d", i, st.kind, st.at, rp.status, rp.raw, st.status)
				}
				_, present := rp.fields["nextHeartbeatInMs"]
				if st.want == 0 && present {
					t.Errorf("step %d (%s at +%v): nextHeartbeatInMs in %s", i, st.kind, st.at, rp.raw)
				}
				if st.want != 0 && rp.resp.NextHeartbeatInMs != st.want {
					t.Errorf("step %d (%s at +%v): nextHeartbeatInMs %d, want %d: %s", i, st.kind, st.at, rp.resp.NextHeartbeatInMs, st.want, rp.raw)
				}
				if got := rp.resp.TaskToken != ""; got != st.refreshed {
					t.Errorf("step %d: refreshed %v, want %v", i, got, st.refreshed)
				}
			}
		})
	}
}
