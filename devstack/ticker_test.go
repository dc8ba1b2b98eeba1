package devstack_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/devstack"
	"github.com/servo-dev/servo/emulator/emulatortest"
)

// logBuffer is a log writer safe for the stack's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestTickStartsWindowedInvocation: one scheduler tick (a Pub/Sub push)
// starts a sweeper invocation that runs several passes, as production's
// once-a-minute tick does, instead of one pass a tick.
func TestTickStartsWindowedInvocation(t *testing.T) {
	var log logBuffer
	s, err := devstack.Start(context.Background(), devstack.Options{Addr: "127.0.0.1:0", Project: emulatortest.ProjectID(t), ReuseEmulators: true,
		SweepEvery: 100 * time.Millisecond, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const done = `"message":"sweeper invocation done"`
	for deadline := time.Now().Add(2 * time.Minute); log.count(done) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sweeper invocations done", log.count(done))
		}
	}
	invocations := log.count(done)
	st, found, err := s.Store.LastSweep(context.Background())
	if err != nil || !found {
		t.Fatalf("last sweep: %v, found %v", err, found)
	}
	// The invocation still running has done at least one pass too.
	if st.Passes <= int64(invocations)+1 {
		t.Errorf("%d passes for %d invocations: want several passes per tick", st.Passes, invocations)
	}
}
