package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

// TestTickStartsWindowedInvocation: one scheduler tick (a Pub/Sub push)
// starts a sweeper invocation that runs several passes, as production's
// once-a-minute tick does, instead of one pass a tick.
func TestTickStartsWindowedInvocation(t *testing.T) {
	t.Parallel()
	var log servotest.Buffer
	count := func(s string) int { return strings.Count(log.String(), s) }
	s := stacktest.Start(t, devstack.Options{SweepEvery: 100 * time.Millisecond, Log: &log})
	const done = `"message":"sweeper invocation done"`
	servotest.Until(t, "two sweeper invocations done", func() bool { return count(done) >= 2 })
	invocations := count(done)
	st, found, err := s.Store.LastSweep(context.Background())
	if err != nil || !found {
		t.Fatalf("last sweep: %v, found %v", err, found)
	}
	// The invocation still running has done at least one pass too.
	if st.Passes <= int64(invocations)+1 {
		t.Errorf("%d passes for %d invocations: want several passes per tick", st.Passes, invocations)
	}
}
