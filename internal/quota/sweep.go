package quota

import (
	"cmp"
	"slices"
	"time"

	"github.com/servo-dev/servo/internal/task"
)

// Admit is the sweeper's admit duty over waiting, the tasks waiting for a
// run slot (the lowest ranked of every due shard): it orders them fairly
// (FairOrder) and offers each a slot, one at a time so that the order
// holds, until stop reports true. offer applies task.EventAdmit to one
// task; it returns false when that changed nothing (no slot was free, or
// the task no longer waits), and the task's tenant is then skipped for the
// rest of the pass, so that its later tasks never start before its
// earlier ones.
func Admit(waiting []task.Task, stop func() bool, offer func(*task.Task) (taken bool)) {
	full := map[string]bool{}
	for _, t := range FairOrder(waiting) {
		if stop() {
			break
		}
		if full[t.TenantID] {
			continue
		}
		if !offer(&t) {
			full[t.TenantID] = true
		}
	}
}

// FairOrder orders tasks waiting for a slot: each tenant's by rank
// (task.WaitRank: priority, raised by waiting; then id), the tenants
// taking turns, the one whose next task ranks lowest first.
func FairOrder(ts []task.Task) []task.Task {
	sorted := slices.Clone(ts)
	slices.SortFunc(sorted, func(a, b task.Task) int {
		if c := cmp.Compare(timeOf(task.WaitRank(&a)), timeOf(task.WaitRank(&b))); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var tenants []string
	queues := map[string][]task.Task{}
	for _, t := range sorted {
		if _, ok := queues[t.TenantID]; !ok {
			tenants = append(tenants, t.TenantID)
		}
		queues[t.TenantID] = append(queues[t.TenantID], t)
	}
	out := make([]task.Task, 0, len(ts))
	for round := 0; len(out) < len(ts); round++ {
		for _, tn := range tenants {
			if q := queues[tn]; round < len(q) {
				out = append(out, q[round])
			}
		}
	}
	return out
}

func timeOf(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixNano()
}
