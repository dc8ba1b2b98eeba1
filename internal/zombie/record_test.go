package zombie_test

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/zombie"
)

// TestPassIsRecorded: every pass writes meta/sweeper with its figures, so
// operators (GET /v1/health, servo doctor) can tell the sweeper is alive;
// the lease duty's lag is the time from the lease's end to the transaction.
func TestPassIsRecorded(t *testing.T) {
	e := newEnv(t)
	if _, found, err := e.st.LastSweep(e.ctx); err != nil || found {
		t.Fatalf("before any pass: found %v, err %v", found, err)
	}
	tm := shortTiming
	tm.StartTimeoutMs = 60000
	tk := e.running(spec{maxAttempts: 1, timing: tm}, true)
	lag := 3 * time.Second
	sw := e.sweeper(func(c *zombie.Config) {
		c.Recorder = e.st
		c.Now = func() time.Time { return tk.LeaseExpiresAt.Add(lag) }
	})
	before := time.Now()
	st := e.sweep(sw)
	if st.Lease.Applied != 1 {
		t.Fatalf("stats %+v", st)
	}
	rec, found, err := e.st.LastSweep(e.ctx)
	if err != nil || !found {
		t.Fatalf("after a pass: found %v, err %v", found, err)
	}
	if rec.Passes != 1 || rec.LastPassAt.Before(before.Add(-time.Second)) || rec.Duties["lease"].Applied != 1 || rec.Duties["lease"].Due != 1 {
		t.Fatalf("record %+v", rec)
	}
	if got := rec.Duties["lease"].MaxLagMs; got != lag.Milliseconds() {
		t.Fatalf("lease lag %d ms, want %d", got, lag.Milliseconds())
	}
	if len(rec.Duties) != len(zombie.Duties) {
		t.Fatalf("duties %v", rec.Duties)
	}
	e.sweep(sw)
	if rec, _, _ = e.st.LastSweep(e.ctx); rec.Passes != 2 || rec.Duties["lease"].Applied != 0 {
		t.Fatalf("second record %+v", rec)
	}
}
