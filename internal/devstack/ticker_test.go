package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
)

// TestTickStartsWindowedInvocation: one scheduler tick (a Pub/Sub push)
// starts a sweeper invocation that runs several passes, as production's
// once-a-minute tick does, instead of one pass a tick.
func TestTickStartsWindowedInvocation(t *testing.T) {
	var log servotest.Buffer
	count := func(s string) int { return strings.Count(log.String(), s) }
	s, err := devstack.Start(context.Background(), devstack.Options{Addr: "127.0.0.1:0", Project: emulatortest.ProjectID(t), ReuseEmulators: true,
		SweepEvery: 100 * time.Millisecond, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const done = `"message":"sweeper invocation done"`
	for deadline := time.Now().Add(2 * time.Minute); count(done) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sweeper invocations done", count(done))
		}
	}
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
