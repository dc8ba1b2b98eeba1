package zombie_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// TestHeartbeatAtIntervalKeepsLease: a worker heartbeating at its interval
// never loses its lease to the sweeper, although most heartbeats with over
// half the lease left write nothing; once it stops, the sweeper makes it a
// zombie within the heartbeat timeout (plus a pass) of its last heartbeat.
// Real time, the emulator and the real sweeper passing every 250 ms.
func TestHeartbeatAtIntervalKeepsLease(t *testing.T) {
	for _, tc := range []struct {
		intervalMs, timeoutMs int64
		skips                 bool // some heartbeats write nothing
	}{
		{1000, 2000, false},
		{1000, 3000, true},
		{1000, 5000, true},
	} {
		t.Run(fmt.Sprintf("every %d ms, lease %d ms", tc.intervalMs, tc.timeoutMs), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tm := api.Timing{HeartbeatIntervalMs: tc.intervalMs, HeartbeatTimeoutMs: tc.timeoutMs, CancelGracePeriodMs: 60_000, StartTimeoutMs: 60_000}
			tk := e.running(spec{maxAttempts: 1, timing: tm}, false)
			sw := e.sweeper(nil)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			expired := make(chan time.Time, 1)
			go func() {
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					st, err := sw.Sweep(ctx)
					if err == nil && st.Lease.Applied > 0 {
						expired <- time.Now()
						return
					}
				}
			}()
			interval := tm.HeartbeatInterval()
			const beats = 8
			writes := 0
			var last time.Time
			for i := range beats {
				time.Sleep(interval)
				last = time.Now().UTC()
				r, err := e.st.Apply(e.ctx, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: last,
					Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1"}})
				if err != nil {
					t.Fatalf("heartbeat %d: %v", i, err)
				}
				if r.Rejection != nil {
					t.Fatalf("heartbeat %d at +%v refused: %s", i, last.Sub(tk.CreatedAt), r.Rejection.Code)
				}
				if r.Write {
					writes++
				}
			}
			select {
			case at := <-expired:
				t.Fatalf("the sweeper expired the lease at %v while the worker heartbeated", at)
			default:
			}
			if got := e.get(tk.ID); got.State != api.Running {
				t.Fatalf("after %d heartbeats: %s", beats, got.State)
			}
			t.Logf("%d of %d heartbeats written", writes, beats)
			if tc.skips != (writes < beats) || writes == 0 {
				t.Errorf("%d of %d heartbeats written; skips expected: %v", writes, beats, tc.skips)
			}
			// The worker stops: a zombie within the timeout plus a pass
			// (and a second of margin) of its last heartbeat.
			limit := tm.HeartbeatTimeout() + 2*time.Second
			select {
			case at := <-expired:
				if d := at.Sub(last); d > limit {
					t.Errorf("zombie %v after the last heartbeat, over %v", d, limit)
				}
			case <-time.After(limit + 5*time.Second):
				t.Fatalf("no zombie %v after the last heartbeat", limit+5*time.Second)
			}
			if got := e.get(tk.ID); got.State != api.Failed || got.Reason != api.ReasonHeartbeatTimeout {
				t.Fatalf("after the worker stopped: %s %s", got.State, got.Reason)
			}
		})
	}
}
