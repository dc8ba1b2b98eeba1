package events

import (
	"slices"
	"testing"

	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestHeldBack: the re-drive sends no event of a task while an earlier
// one of the same task waits out its backoff (seq 1 failed twice, seq 4
// once: seq 4 is due first and must wait).
func TestHeldBack(t *testing.T) {
	e := func(taskID string, seq int64) store.OutboxEntry {
		return store.OutboxEntry{Transition: task.Transition{TaskID: taskID, Seq: seq}}
	}
	for _, c := range []struct {
		name         string
		due, waiting []store.OutboxEntry
		want         []string
	}{
		{"nothing waiting", []store.OutboxEntry{e("a", 1), e("a", 2), e("b", 1)}, nil, []string{"a1", "a2", "b1"}},
		{"an earlier event backed off", []store.OutboxEntry{e("a", 4), e("b", 2)}, []store.OutboxEntry{e("a", 1)}, []string{"b2"}},
		{"the due ones before the waiting one go", []store.OutboxEntry{e("a", 1), e("a", 3)}, []store.OutboxEntry{e("a", 2)}, []string{"a1"}},
		{"another task's wait holds nothing", []store.OutboxEntry{e("a", 2)}, []store.OutboxEntry{e("b", 1)}, []string{"a2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, x := range heldBack(c.due, c.waiting) {
				got = append(got, x.TaskID+string(rune('0'+x.Seq)))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("sent %q, want %q", got, c.want)
			}
		})
	}
}
