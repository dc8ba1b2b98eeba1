package dispatcher

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// Tasks waiting for a run slot are admitted by rank (task.WaitRank): a
// priority-1 task submitted behind a backlog of priority-5 tasks takes
// the next free slot, then a default-priority one, then the backlog in
// submit order.
func TestQuotaAdmitsByPriority(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"limited": {MaxRunning: 1, MaxQueued: 100}}})
	submit := func(key string, priority int) string {
		body := validSubmit("limited")
		body["taskKey"] = key
		if priority != 0 {
			body["priority"] = priority
		}
		return e.submit(body, http.StatusCreated).TaskID
	}
	holder := submit("holder", 0)
	if st := e.storedTask(holder); st.Quota == nil || !st.Quota.Slot {
		t.Fatalf("the first task has no slot: %+v", st.Quota)
	}
	var backlog []string
	for i := range 20 {
		backlog = append(backlog, submit(fmt.Sprintf("backfill-%d", i), 5))
	}
	urgent := submit("urgent", 1)
	normal := submit("normal", 0)
	if v := e.getTask(urgent); v.Reason != "QUOTA_WAIT" || v.Priority != 1 {
		t.Fatalf("the urgent task: reason %s priority %d, want QUOTA_WAIT 1", v.Reason, v.Priority)
	}
	// The admit duty's query reads the lowest ranks of each group of due
	// shards: the urgent task is among the first few even behind an older
	// backlog larger than the page.
	page, _, err := e.st.WaitingForSlot(e.ctx, time.Now().UTC(), 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(page, func(tk task.Task) bool { return tk.ID == urgent }) {
		t.Fatalf("a page of 3 waiting tasks lacks the priority-1 task")
	}
	sw := e.sweeper()
	next := func(done string) string {
		t.Helper()
		e.complete(e.start(done, 1).ID, 1, api.OutcomeSucceeded)
		if _, err := sw.Sweep(e.ctx); err != nil {
			t.Fatal(err)
		}
		var admitted []string
		for _, id := range append([]string{urgent, normal}, backlog...) {
			if st := e.storedTask(id); st.Quota != nil && st.Quota.Slot && st.State == api.Queued {
				admitted = append(admitted, id)
			}
		}
		if len(admitted) != 1 {
			t.Fatalf("after %s ended: %d tasks admitted (%v), want 1", done, len(admitted), admitted)
		}
		return admitted[0]
	}
	if got := next(holder); got != urgent {
		t.Fatalf("admitted %s first, want the priority-1 task %s", got, urgent)
	}
	if got := next(urgent); got != normal {
		t.Fatalf("admitted %s second, want the priority-3 task %s", got, normal)
	}
	if got := next(normal); got != backlog[0] {
		t.Fatalf("admitted %s third, want the backlog's first %s", got, backlog[0])
	}
}
