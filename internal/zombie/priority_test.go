package zombie_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// The dispatch duty re-drives a page's stuck tasks by priority (1 first),
// each priority's in due order; every task of the page once, and the page
// after it still found (its cursor is the query's, not the sorted page's).
func TestDispatchDutyByPriority(t *testing.T) {
	ms, enq := newMemStore(), &recorder{}
	var order []string
	ms.beforeApply = func(id string) { order = append(order, id) }
	priorities := []int{5, 0, 1, 5, 2, 1, 3}
	ids := make([]string, len(priorities))
	for i, p := range priorities {
		tk := build(t, i, t0.Add(time.Duration(i)*time.Millisecond), 3) // PENDING, due in order i
		tk.Priority = p
		ms.put(tk)
		ids[i] = tk.ID
	}
	sw := newUnitSweeper(t, ms, enq, func() time.Time { return t0.Add(time.Hour) }, func(c *zombie.Config) {
		c.Concurrency, c.PageSize = 1, 4 // one at a time; two pages
	})
	if _, err := sw.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Page 1: tasks 0-3 (priorities 5, 3, 1, 5); page 2: 4-6 (2, 1, 3).
	want := []string{ids[2], ids[1], ids[0], ids[3], ids[5], ids[4], ids[6]}
	if !slices.Equal(order, want) {
		t.Fatalf("re-drive order %v, want %v", order, want)
	}
	if n := len(ms.eventsOf(task.EventRedrive)); n != len(ids) {
		t.Fatalf("%d re-drives, want %d", n, len(ids))
	}
}
