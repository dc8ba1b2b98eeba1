package quota

import (
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func TestCounts(t *testing.T) {
	for _, c := range []struct {
		state api.State
		slot  bool
		q, r  int
	}{
		{api.Pending, false, 1, 0}, {api.Queued, false, 1, 0}, {api.Queued, true, 1, 1}, {api.Running, true, 0, 1},
		{api.Cancelling, true, 0, 1}, {api.Succeeded, true, 0, 0}, {api.Failed, true, 0, 0}, {api.Cancelled, false, 0, 0},
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
