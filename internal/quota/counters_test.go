package quota

import (
	"testing"

	"github.com/servo-dev/servo/internal/task"
)

func TestCounts(t *testing.T) {
	for _, c := range []struct {
		state task.State
		slot  bool
		q, r  int
	}{
		{task.Pending, false, 1, 0}, {task.Queued, false, 1, 0}, {task.Queued, true, 1, 1}, {task.Running, true, 0, 1},
		{task.Cancelling, true, 0, 1}, {task.Succeeded, true, 0, 0}, {task.Failed, true, 0, 0}, {task.Cancelled, false, 0, 0},
	} {
		tk := task.Task{State: c.state, Quota: &task.QuotaHold{Slot: c.slot}}
		if q, r := Counts(&tk); q != c.q || r != c.r {
			t.Errorf("%s slot %v: %d/%d, want %d/%d", c.state, c.slot, q, r, c.q, c.r)
		}
		tk.Quota = nil
		if q, r := Counts(&tk); q != 0 || r != 0 {
			t.Errorf("%s without a hold counts %d/%d", c.state, q, r)
		}
	}
}
