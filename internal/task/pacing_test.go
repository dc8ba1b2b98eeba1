package task

import (
	"fmt"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

func pacingTiming(interval, timeout, grace time.Duration) api.Timing {
	return api.Timing{HeartbeatIntervalMs: interval.Milliseconds(), HeartbeatTimeoutMs: timeout.Milliseconds(),
		CancelGracePeriodMs: grace.Milliseconds(), StartTimeoutMs: 600_000}
}

func TestNextHeartbeatIn(t *testing.T) {
	const s = time.Second
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	hour := t0.Add(time.Hour)
	for _, c := range []struct {
		name     string
		state    api.State
		timing   api.Timing
		lease    *time.Time
		tokenExp time.Time
		lifetime time.Duration
		want     time.Duration
		bound    string // which bound decides, for the reader
	}{
		{name: "defaults: the cancel notice keeps the interval", state: api.Running, timing: pacingTiming(30*s, 90*s, 30*s),
			lease: at(90 * s), tokenExp: hour, lifetime: time.Hour, want: 30 * s, bound: "cancel (15 s) below the interval"},
		{name: "defaults with a 2 min grace: the lease", state: api.Running, timing: pacingTiming(30*s, 90*s, 120*s),
			lease: at(90 * s), tokenExp: hour, lifetime: time.Hour, want: 45 * s, bound: "lease: 90 s - 1.5 intervals"},
		{name: "long lease: a quarter of it is the margin", state: api.Running, timing: pacingTiming(10*s, 10*time.Minute, time.Hour),
			lease: at(10 * time.Minute), tokenExp: hour, lifetime: time.Hour, want: 450 * s, bound: "lease: 600 s - 150 s"},
		{name: "short timers, fresh lease", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4 * s), tokenExp: hour, lifetime: time.Hour, want: 2500 * time.Millisecond, bound: "lease: 4 s - 1.5 s"},
		{name: "short timers, lease unchanged by a skipped heartbeat", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(2200 * time.Millisecond), tokenExp: hour, lifetime: time.Hour, want: s, bound: "the interval (lease bound 0.7 s)"},
		{name: "grace binds below the lease", state: api.Running, timing: pacingTiming(s, 12*s, 6*s),
			lease: at(12 * s), tokenExp: hour, lifetime: time.Hour, want: 3 * s, bound: "cancel: 6 s / 2"},
		{name: "token binds: half the refresh window left on arrival", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4 * s), tokenExp: t0.Add(5 * s), lifetime: 24 * s, want: 2 * s, bound: "token: 5 s - 6 s / 2"},
		{name: "token nearly due: the interval", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4 * s), tokenExp: t0.Add(3 * s), lifetime: 24 * s, want: s, bound: "the interval (token bound 0 s)"},
		{name: "token not known: no token bound", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4 * s), want: 2500 * time.Millisecond, bound: "lease"},
		{name: "rounded down to whole milliseconds", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4*s + 700*time.Microsecond), tokenExp: hour, lifetime: time.Hour, want: 2500 * time.Millisecond, bound: "lease"},
		{name: "CANCELLING: the interval", state: api.Cancelling, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(4 * s), tokenExp: hour, lifetime: time.Hour, want: s, bound: "winding down"},
		{name: "no lease: the interval", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			tokenExp: hour, lifetime: time.Hour, want: s, bound: "no lease"},
		{name: "lease already run out: the interval", state: api.Running, timing: pacingTiming(s, 4*s, 8*s),
			lease: at(-s), tokenExp: hour, lifetime: time.Hour, want: s, bound: "the interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := &Task{State: c.state, Timing: c.timing, LeaseExpiresAt: c.lease}
			if got := NextHeartbeatIn(tk, t0, c.tokenExp, c.lifetime); got != c.want {
				t.Errorf("NextHeartbeatIn = %v, want %v (%s)", got, c.want, c.bound)
			}
		})
	}
}

// TestNextHeartbeatInBounds checks the rule's promises over a grid of
// timers, lease and token states: never below the interval; above it, the
// heartbeat sent at the hint (and received up to 1 ms to a second later,
// within the margin) has LeaseMargin of the lease left and is written by
// the skip rule when the lease bound decides, comes within half the grace
// period, and leaves half the refresh window on the token, inside it.
func TestNextHeartbeatInBounds(t *testing.T) {
	const s = time.Second
	for _, interval := range []time.Duration{100 * time.Millisecond, s, 30 * s, 10 * time.Minute} {
		for _, timeoutX := range []int64{2, 3, 4, 7, 40} {
			timeout := interval * time.Duration(timeoutX)
			for _, grace := range []time.Duration{interval / 2, interval, 3 * interval, 100 * interval} {
				timing := pacingTiming(interval, timeout, grace)
				for _, leasePct := range []int64{0, 10, 40, 50, 51, 75, 100} {
					for _, tokenLeftPct := range []int64{10, 25, 40, 100} {
						lifetime := max(time.Hour, 2*interval)
						tokExp := t0.Add(lifetime * time.Duration(tokenLeftPct) / 100)
						lease := t0.Add(timeout * time.Duration(leasePct) / 100)
						tk := &Task{State: api.Running, Timing: timing, LeaseExpiresAt: &lease}
						name := fmt.Sprintf("interval %v timeout %v grace %v lease %d%% token %d%%", interval, timeout, grace, leasePct, tokenLeftPct)
						h := NextHeartbeatIn(tk, t0, tokExp, lifetime)
						if h < interval {
							t.Fatalf("%s: hint %v below the interval", name, h)
						}
						if h == interval {
							continue // a worker heartbeating at its interval, as without pacing
						}
						sent := t0.Add(h)
						if left := lease.Sub(sent); left < LeaseMargin(timing) {
							t.Fatalf("%s: hint %v leaves %v of the lease, under the margin %v", name, h, left, LeaseMargin(timing))
						}
						if h > grace/2 {
							t.Fatalf("%s: hint %v beyond half the grace %v", name, h, grace)
						}
						refresh := RefreshBefore(lifetime, interval)
						if left := tokExp.Sub(sent); left < refresh/2 {
							t.Fatalf("%s: hint %v leaves %v on the token, under half the refresh window %v", name, h, left, refresh)
						}
						if lease.Sub(sent)-LeaseMargin(timing) < time.Millisecond {
							// The lease bound decides: the heartbeat sent at the
							// hint is written, however soon it arrives.
							m := &machine{r: &Result{Task: *tk}, now: sent.Add(time.Millisecond)}
							if !m.heartbeatWrites(&Attempt{}, &api.HeartbeatRequest{}) {
								t.Fatalf("%s: the plain heartbeat sent at the hint %v is not written", name, h)
							}
						}
					}
				}
			}
		}
	}
}

// TestPacedWorkerKeepsLeaseAndToken simulates a worker that sends plain
// heartbeats at the hint, each received up to a tenth of an interval
// later, against the store's skip rule and the token refresh rule for
// many leases: the lease never runs out, the token never expires, and it
// sends fewer heartbeats than one heartbeating at its interval.
func TestPacedWorkerKeepsLeaseAndToken(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		timing   api.Timing
		lifetime time.Duration
		fewer    bool // the bounds let it wait past the interval
	}{
		{pacingTiming(s, 4*s, 8*s), 24 * s, true},
		{pacingTiming(s, 4*s, 2*s), 24 * s, false},
		{pacingTiming(30*s, 90*s, 30*s), time.Hour, false},
		{pacingTiming(30*s, 90*s, 5*time.Minute), time.Hour, true},
		{pacingTiming(s, 60*s, 30*s), 30 * s, true},
	} {
		t.Run(fmt.Sprintf("%+v lifetime %v", c.timing, c.lifetime), func(t *testing.T) {
			interval, timeout := c.timing.HeartbeatInterval(), c.timing.HeartbeatTimeout()
			now := t0
			lease := now.Add(timeout)
			tokExp, lifetime := now.Add(c.lifetime), c.lifetime
			end := now.Add(200 * timeout)
			beats, refreshes := 0, 0
			for i := 0; now.Before(end); i++ {
				tk := &Task{State: api.Running, Timing: c.timing, LeaseExpiresAt: &lease}
				h := NextHeartbeatIn(tk, now, tokExp, lifetime)
				now = now.Add(h + interval*time.Duration(i%11)/100) // 0-10% of an interval late
				beats++
				if !now.Before(lease) {
					t.Fatalf("beat %d at +%v: the lease ran out at +%v", beats, now.Sub(t0), lease.Sub(t0))
				}
				if !now.Before(tokExp) {
					t.Fatalf("beat %d at +%v: the token expired at +%v", beats, now.Sub(t0), tokExp.Sub(t0))
				}
				m := &machine{r: &Result{Task: *tk}, now: now}
				if m.heartbeatWrites(&Attempt{}, &api.HeartbeatRequest{}) {
					lease = now.Add(timeout)
				}
				if tokExp.Sub(now) < RefreshBefore(lifetime, interval) {
					lifetime = TokenTTL(now, nil, interval)
					tokExp = now.Add(lifetime)
					refreshes++
				}
			}
			atInterval := int(end.Sub(t0) / interval)
			if c.fewer && beats*10 > atInterval*7 {
				t.Errorf("%d paced heartbeats, %d at the interval: want under 70%%", beats, atInterval)
			}
			if c.lifetime < time.Hour && refreshes == 0 {
				t.Errorf("the short token was never refreshed")
			}
		})
	}
}
