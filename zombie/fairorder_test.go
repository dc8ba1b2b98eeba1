package zombie_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/zombie"
)

func TestFairOrder(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var in []task.Task
	// a submits 3 first, then b 2, then c 1; given shuffled.
	for i, tn := range []string{"a", "a", "a", "b", "b", "c"} {
		at := t0.Add(time.Duration(i) * time.Second)
		in = append(in, task.Task{ID: fmt.Sprintf("task_%d", i), TenantID: tn, WaitingSince: &at})
	}
	shuffled := []task.Task{in[5], in[2], in[3], in[0], in[4], in[1]}
	var got []string
	for _, tk := range zombie.FairOrder(shuffled) {
		got = append(got, tk.ID)
	}
	want := []string{"task_0", "task_3", "task_5", "task_1", "task_4", "task_2"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
