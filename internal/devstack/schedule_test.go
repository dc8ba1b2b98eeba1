package devstack

import (
	"testing"
	"time"
)

// TestSweepSchedule: TicksPerWindow passes a tick, the window ending half a
// period before the next tick and within the push's ack deadline.
func TestSweepSchedule(t *testing.T) {
	for _, c := range []struct {
		every, tick, window time.Duration
		ack                 int32
	}{
		{100 * time.Millisecond, time.Second, 950 * time.Millisecond, 60},
		{time.Second, 10 * time.Second, 9500 * time.Millisecond, 69},
		{time.Minute, 5 * time.Minute, 270 * time.Second, 330},
		{time.Hour, time.Hour, 30 * time.Minute, 600}, // one pass a tick
	} {
		tick, window := sweepSchedule(c.every)
		if tick != c.tick || window != c.window || ackDeadline(window) != c.ack {
			t.Errorf("every %v: tick %v, window %v, ack deadline %d s; want %v, %v, %d", c.every, tick, window, ackDeadline(window), c.tick, c.window, c.ack)
		}
		if passes := int((window + c.every - 1) / c.every); window > time.Duration(ackDeadline(window))*time.Second && passes > 1 {
			t.Errorf("every %v: a %v window of %d passes outlasts the ack deadline", c.every, window, passes)
		}
	}
}
