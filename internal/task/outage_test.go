package task

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

func TestOutageCredit(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name     string
		outs     []Outage
		from, to int
		want     int
	}{
		{"none", nil, 0, 60, 0},
		{"inside", []Outage{{at(10), at(16)}}, 0, 60, 6},
		{"before the window", []Outage{{at(-20), at(-5)}}, 0, 60, 0},
		{"straddles the start", []Outage{{at(-5), at(4)}}, 0, 60, 4},
		{"straddles the end", []Outage{{at(55), at(70)}}, 0, 60, 5},
		{"overlapping count once", []Outage{{at(10), at(20)}, {at(15), at(25)}, {at(12), at(14)}}, 0, 60, 15},
		{"two apart", []Outage{{at(30), at(32)}, {at(10), at(13)}}, 0, 60, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := outageCredit(tt.outs, at(tt.from), at(tt.to))
			if got != time.Duration(tt.want)*time.Second {
				t.Errorf("credit = %v, want %ds", got, tt.want)
			}
		})
	}
}

// A worker that kept heartbeating through an outage of Servo's keeps its
// attempt: neither its own late heartbeat nor the sweeper expires the
// lease for time Servo could not record it; once the lease has lasted its
// full length outside the outage, it runs out as before.
func TestLeaseOutlivesOutage(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	timing := api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 5000}
	running := func() (Task, *Attempt) {
		lease := t0.Add(5 * time.Second)
		tk := Task{ID: "t1", State: api.Running, Attempt: 1, Timing: timing, LeaseExpiresAt: &lease,
			Retry: api.RetryPolicy{MaxAttempts: 3}}
		return tk, &Attempt{Attempt: 1, WorkerID: "w1", StartedAt: &t0}
	}
	outage := []Outage{{From: t0.Add(time.Second), To: t0.Add(7 * time.Second)}} // 6 s
	tests := []struct {
		name    string
		ev      Event
		expired bool
	}{
		{"heartbeat after the outage, no credit", Event{Kind: EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: t0.Add(8 * time.Second), Heartbeat: &api.HeartbeatRequest{}}, true},
		{"heartbeat after the outage, credited", Event{Kind: EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: t0.Add(8 * time.Second), Heartbeat: &api.HeartbeatRequest{}, Outages: outage}, false},
		{"sweeper after the outage, credited", Event{Kind: EventLeaseExpired, Attempt: 1, Now: t0.Add(10 * time.Second), Outages: outage}, false},
		{"sweeper once the credit is spent", Event{Kind: EventLeaseExpired, Attempt: 1, Now: t0.Add(11 * time.Second), Outages: outage}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, cur := running()
			r := Apply(tk, cur, tt.ev)
			if r.Expired() != tt.expired {
				t.Fatalf("expired = %v, want %v (rejection %+v, state %s)", r.Expired(), tt.expired, r.Rejection, r.Task.State)
			}
			if !tt.expired && tt.ev.Kind == EventHeartbeat && (r.Rejection != nil || !r.Task.LeaseExpiresAt.After(tt.ev.Now)) {
				t.Fatalf("heartbeat not accepted: %+v, lease %v", r.Rejection, r.Task.LeaseExpiresAt)
			}
		})
	}
}
