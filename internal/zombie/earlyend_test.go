package zombie_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/zombie"
)

// A window ends after the first pass that finds nothing due before its
// end, and goes on while something is: a lease that runs out within the
// window is swept by the same invocation, within a pass of its expiry.
func TestWindowEndsEarly(t *testing.T) {
	const every = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		// timing of a silent running task (zero: no task)
		timing api.Timing
		keep   bool
		// redrive: the outbox re-drive runs (a fake that leaves the
		// task's outbox entries undelivered)
		redrive   bool
		wantState api.State // of the task after the window
		wantEarly int
		// minPasses, maxPasses bound the window's passes (a full window
		// is Window/every = 20)
		minPasses, maxPasses int
	}{
		{name: "nothing due", wantEarly: 1, minPasses: 1, maxPasses: 1},
		{name: "nothing due, early end disabled", keep: true, minPasses: 15, maxPasses: 20},
		{name: "lease runs out within the window", timing: api.Timing{HeartbeatIntervalMs: 500, HeartbeatTimeoutMs: 1500, CancelGracePeriodMs: 300, StartTimeoutMs: 300},
			wantState: api.Failed, wantEarly: 1, minPasses: 3, maxPasses: 12},
		{name: "lease runs out after the window", timing: api.Timing{HeartbeatIntervalMs: 10_000, HeartbeatTimeoutMs: 30_000, CancelGracePeriodMs: 300, StartTimeoutMs: 300},
			wantState: api.Running, wantEarly: 1, minPasses: 1, maxPasses: 1},
		{name: "outbox entries wait for the re-drive", timing: api.Timing{HeartbeatIntervalMs: 10_000, HeartbeatTimeoutMs: 30_000, CancelGracePeriodMs: 300, StartTimeoutMs: 300},
			redrive: true, wantState: api.Running, minPasses: 15, maxPasses: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var id string
			if tc.timing != (api.Timing{}) {
				id = e.running(spec{timing: tc.timing}, false).ID
			}
			sw := e.sweeper(func(c *zombie.Config) {
				c.Every, c.Window, c.KeepWindow = every, 20*every, tc.keep
				if tc.redrive {
					c.Redriver = e.rec
				}
			})
			st, err := sw.Run(e.ctx)
			if err != nil {
				t.Fatalf("run: %v (%+v)", err, st)
			}
			if st.EndedEarly != tc.wantEarly || st.Passes < tc.minPasses || st.Passes > tc.maxPasses {
				t.Fatalf("ended early %d times after %d passes, want %d after %d..%d", st.EndedEarly, st.Passes, tc.wantEarly, tc.minPasses, tc.maxPasses)
			}
			if id == "" {
				return
			}
			got := e.get(id)
			if got.State != tc.wantState {
				t.Fatalf("task %s %s, want %s", got.State, got.Reason, tc.wantState)
			}
			if tc.wantState == api.Failed {
				if got.Reason != api.ReasonHeartbeatTimeout || st.Lease.Applied != 1 {
					t.Fatalf("task %s %s, lease duty %+v", got.State, got.Reason, st.Lease)
				}
				// Swept by the next pass after the lease ran out (margin:
				// two more passes on a loaded machine).
				if lag := time.Duration(st.Lease.MaxLagMs) * time.Millisecond; lag > 3*every {
					t.Fatalf("swept %v after the lease ran out, want within %v", lag, 3*every)
				}
			}
		})
	}
}

// ticks runs a Scheduler for sw: a tick every period starts a Run (as
// ServoSweeper does), until ctx ends; it returns the summed stats.
func ticks(ctx context.Context, sw *zombie.Sweeper, period time.Duration) (total func() zombie.Stats) {
	var (
		mu  sync.Mutex
		sum zombie.Stats
	)
	go func() {
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			st, _ := sw.Run(ctx)
			mu.Lock()
			sum.Add(st)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	return func() zombie.Stats {
		mu.Lock()
		defer mu.Unlock()
		return sum
	}
}

// A worker that starts after a window ended early and then goes silent is
// still failed HEARTBEAT_TIMEOUT within a pass of its lease's expiry (the
// contract's timeout + 20 s is timeout + Every + the pass in production):
// the tick after its start sees the lease due within its window and keeps
// sweeping. A task created and due between two ticks is swept by the next
// tick.
func TestZombieDetectedAcrossEarlyEnds(t *testing.T) {
	const (
		every  = 250 * time.Millisecond
		period = 4 * time.Second // the Scheduler's tick
	)
	e := newEnv(t)
	sw := e.sweeper(func(c *zombie.Config) { c.Every, c.Window = every, period-every })
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	total := ticks(ctx, sw, period)
	eventually(t, "the first window to end early", func() bool { return total().EndedEarly >= 1 })

	// Started after the early end: its lease (5 s) runs out after the next
	// tick (4 s) and before that window's end.
	zombieTask := e.running(spec{timing: api.Timing{HeartbeatIntervalMs: 2000, HeartbeatTimeoutMs: 5000, CancelGracePeriodMs: 300, StartTimeoutMs: 300}}, false)
	// Started and due between two ticks: the next tick sweeps it.
	short := e.running(spec{}, false)

	eventually(t, "both tasks failed", func() bool {
		return e.get(zombieTask.ID).State == api.Failed && e.get(short.ID).State == api.Failed
	})
	for _, id := range []string{zombieTask.ID, short.ID} {
		if got := e.get(id); got.Reason != api.ReasonHeartbeatTimeout {
			t.Fatalf("task %s: %s %s, want HEARTBEAT_TIMEOUT", id, got.State, got.Reason)
		}
	}
	// The window that swept the zombie ends early after it.
	eventually(t, "the sweeping window to end early", func() bool { return total().EndedEarly >= 2 })
	st := total()
	// The short task waits for the next tick (up to a period); the zombie
	// must not: the sweeper's largest lag is the short task's, so check the
	// zombie's own: it ended within 4 passes of its lease's expiry.
	got := e.get(zombieTask.ID)
	if got.EndedAt == nil || len(got.Attempts) == 0 || got.Attempts[0].StartedAt == nil {
		t.Fatalf("zombie task without its start or end: %+v", got)
	}
	lease := got.Attempts[0].StartedAt.Add(5 * time.Second)
	if lag := got.EndedAt.Sub(lease); lag > 4*every {
		t.Fatalf("zombie failed %v after its lease ran out, want within %v (stats %+v)", lag, 4*every, st)
	}
	if st.Lease.Applied != 2 {
		t.Fatalf("lease duty %+v, want 2 applied", st.Lease)
	}
}

// An early-ended window promises the next tick: the gap until it is no
// outage, and a tick that does not come is still one.
func TestEarlyEndIsNoOutage(t *testing.T) {
	const (
		every  = 500 * time.Millisecond
		window = 4 * time.Second
	)
	e := newEnv(t)
	sw := e.sweeper(func(c *zombie.Config) { c.Every, c.Window = every, window })
	outages := func() int {
		outs, err := e.st.Outages(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(outs)
	}
	for i, tc := range []struct {
		name  string
		after time.Duration // since the previous Run started
		want  int           // outages recorded by then
	}{
		{name: "first tick", want: 0},
		// The next tick, later than a pass every 500 ms would be, within
		// the promise (the window's end plus a pass).
		{name: "next tick", after: window, want: 0},
		// A tick missed: the gap past the promise is an outage.
		{name: "tick missed", after: 2 * window, want: 1},
	} {
		time.Sleep(tc.after)
		st, err := sw.Run(e.ctx)
		if err != nil || st.EndedEarly != 1 {
			t.Fatalf("%s: run %d: %+v %v, want an early end", tc.name, i, st, err)
		}
		if tc.want > 0 {
			eventually(t, "the outage's write", func() bool { return outages() >= tc.want })
		}
		time.Sleep(300 * time.Millisecond) // an outage's write is in the background
		if got := outages(); got != tc.want {
			t.Fatalf("%s: %d outages recorded, want %d", tc.name, got, tc.want)
		}
	}
}
