package quota_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
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
	for _, tk := range quota.FairOrder(shuffled) {
		got = append(got, tk.ID)
	}
	want := []string{"task_0", "task_3", "task_5", "task_1", "task_4", "task_2"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestAdmit(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var waiting []task.Task
	for i, tn := range []string{"a", "a", "a", "b", "b", "c"} {
		at := t0.Add(time.Duration(i) * time.Second)
		waiting = append(waiting, task.Task{ID: fmt.Sprintf("task_%d", i), TenantID: tn, WaitingSince: &at})
	}
	for _, c := range []struct {
		name    string
		refuse  map[string]bool // the tasks whose offer changes nothing
		stopAt  int             // stop after this many offers (0: never)
		offered []string
	}{
		{"every offer taken: fair order", nil, 0, []string{"task_0", "task_3", "task_5", "task_1", "task_4", "task_2"}},
		{"a refused task skips its tenant's later ones", map[string]bool{"task_0": true, "task_4": true},
			0, []string{"task_0", "task_3", "task_5", "task_4"}},
		{"stop ends the pass", nil, 2, []string{"task_0", "task_3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var offered []string
			quota.Admit(waiting, func() bool { return c.stopAt > 0 && len(offered) >= c.stopAt }, func(tk *task.Task) bool {
				offered = append(offered, tk.ID)
				return !c.refuse[tk.ID]
			})
			if !slices.Equal(offered, c.offered) {
				t.Fatalf("offered %v, want %v", offered, c.offered)
			}
		})
	}
}

// TestFairOrderByPriority: within a tenant, a higher priority goes first
// unless the lower one has waited PriorityAging longer per level; the
// tenants take turns, the one whose next task ranks lowest first.
func TestFairOrderByPriority(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	ag := task.PriorityAging
	in := []task.Task{
		{ID: "a-p5-old", TenantID: "a", Priority: 5, WaitingSince: at(-4*ag - time.Second)}, // rank t0-1s
		{ID: "a-p5", TenantID: "a", Priority: 5, WaitingSince: at(-time.Minute)},            // rank t0+4ag-1m
		{ID: "a-p1", TenantID: "a", Priority: 1, WaitingSince: at(0)},                       // rank t0
		{ID: "a-default", TenantID: "a", WaitingSince: at(-ag - time.Second)},               // priority 3: rank t0+ag-1s
		{ID: "b-p2", TenantID: "b", Priority: 2, WaitingSince: at(-2 * ag)},                 // rank t0-ag
		{ID: "b-p4", TenantID: "b", Priority: 4, WaitingSince: at(0)},                       // rank t0+3ag
	}
	var got []string
	for _, tk := range quota.FairOrder([]task.Task{in[3], in[1], in[5], in[0], in[2], in[4]}) {
		got = append(got, tk.ID)
	}
	want := []string{"b-p2", "a-p5-old", "b-p4", "a-p1", "a-default", "a-p5"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
