package dispatcher

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
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

// backlogSize is TestPriorityBehindABacklog's backlog: 500 by default (a
// page of the admit duty's query), 2 000 as the issue asks with
// -priority.backlog=2000 (two minutes of submits on this machine).
var backlogSize = flag.Int("priority.backlog", 500, "TestPriorityBehindABacklog's backlog of priority-5 tasks (a multiple of 500)")

// The backlog bound (docs/contract.md §12, "Priority"): on a worker
// saturated at its maxRunning, a priority-1 task submitted behind a
// backlog of waiting priority-5 tasks (-priority.backlog) takes the first
// slot that frees, in the sweeper's next pass, whatever the backlog's
// size; the pass reads by rank alone (no repair pass: the longest-waiting
// query does not help), one task a group of due shards (PageSize 1), so
// that only the query's order can find it.
func TestPriorityBehindABacklog(t *testing.T) {
	t.Parallel()
	backlog, running := *backlogSize, 2
	e := quotaEnv(t, quota.Policy{Workers: map[string]quota.Limits{"render": {MaxRunning: running}}})
	var first []string
	for i := range running {
		body := validSubmit("acme")
		body["taskKey"] = fmt.Sprint("running-", i)
		first = append(first, e.submit(body, http.StatusCreated).TaskID)
	}
	for b := 0; b < backlog; b += 500 {
		items := make([]map[string]any, 500)
		for i := range items {
			items[i] = validSubmit("acme")
			items[i]["taskKey"] = fmt.Sprint("backfill-", b+i)
			items[i]["priority"] = 5
		}
		if r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": items}, ""); r.status != http.StatusCreated {
			t.Fatalf("batch %d: %d %s", b/500, r.status, r.body)
		}
	}
	body := validSubmit("acme")
	body["taskKey"], body["priority"] = "urgent", 1
	urgent := e.submit(body, http.StatusCreated).TaskID
	sw, err := zombie.New(zombie.Config{Store: e.st, Enqueuer: e.enq, Logger: testLogger(t), QuotaRepairEvery: time.Hour, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The first pass is the repair's (and admits nothing: no slot is free).
	if _, err := sw.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.complete(e.start(first[0], 1).ID, 1, api.OutcomeSucceeded)
	st, err := sw.Sweep(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.storedTask(urgent); got.Quota == nil || !got.Quota.Slot {
		t.Fatalf("the priority-1 task was not admitted in the pass after a slot freed (admit duty %+v)", st.Admit)
	}
	if st.Admit.Applied != 1 {
		t.Fatalf("admit duty %+v: want exactly one admission (one slot freed)", st.Admit)
	}
}
