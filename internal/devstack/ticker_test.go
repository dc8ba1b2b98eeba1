package devstack_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
)

// TestTickStartsWindowedInvocation: one scheduler tick (a Pub/Sub push)
// starts a sweeper invocation that runs several passes while a timer is
// due within its window, as production's once-a-minute tick does, instead
// of one pass a tick; with nothing due, an invocation ends after its first
// pass.
func TestTickStartsWindowedInvocation(t *testing.T) {
	t.Parallel()
	var log servotest.Buffer
	// Ticks every 3 s at most, each window 2.85 s long.
	e := start(t, withLog(&log), func(o *devstack.Options) { o.SweepEvery = 300 * time.Millisecond })
	// Nothing due: the start-up tick's invocation ends after one pass.
	inv := servotest.WaitFor(t, "the start-up invocation", func() []invocation { return invocations(t, log.String()) },
		func(v []invocation) bool { return len(v) >= 1 }, nil)
	if inv[0].Stats.Passes != 1 || inv[0].Stats.EndedEarly != 1 {
		t.Errorf("idle start-up invocation: %+v, want one pass, ended early", inv[0].Stats)
	}
	// A task whose deadline comes 2.5 s after the submit: the submit
	// wakes the sweeper, whose invocation sees the deadline upcoming
	// within its window and sweeps every 300 ms until it has applied it.
	deadline := time.Now().Add(2500 * time.Millisecond).UTC()
	r := e.submit(map[string]any{"deadline": deadline.Format(time.RFC3339Nano)})
	e.worker.next(t) // delivered; the worker never starts it
	servotest.Until(t, "the deadline applied", func() bool { return e.Task(r.TaskID).State.Terminal() })
	most := 0
	servotest.Until(t, "an invocation of several passes", func() bool {
		for _, v := range invocations(t, log.String()) {
			most = max(most, v.Stats.Passes)
		}
		return most >= 3
	})
}

// invocation is a "sweeper invocation done" log line.
type invocation struct {
	Stats struct {
		Passes     int `json:"passes"`
		EndedEarly int `json:"endedEarly"`
	} `json:"stats"`
}

// invocations parses the stack's log for the invocations that ended.
func invocations(t testing.TB, log string) []invocation {
	var out []invocation
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"message":"sweeper invocation done"`) {
			continue
		}
		var v invocation
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("invocation line %s: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}
