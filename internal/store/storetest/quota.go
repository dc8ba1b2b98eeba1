package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// The limited tenant of the quota subtest and its run slots.
const (
	limitedTenant = "limited"
	maxRunning    = 2
)

// With a tenant limited to maxRunning run slots, submits stored QUEUED
// (as the dispatcher stores them) take the slots in turn; the next ones
// wait QUEUED without a slot (the admit duty's due query lists them,
// oldest first) and an admit event gives them nothing while no slot is
// free. When a slot holder ends, an admit event hands its slot to a
// waiting task, and only one; a task of an unlimited tenant is never
// held. The counters follow (QuotaUsage) and need no repair.
func testQuotas(t *testing.T, o Opener) {
	if s := o.New(t, Config{}); s.QuotasEnabled() {
		t.Fatal("a store opened without quotas says quotas are enabled")
	}
	p := &quota.Policy{Tenants: map[string]quota.Limits{limitedTenant: {MaxRunning: maxRunning}}}
	s := o.New(t, Config{Quotas: p})
	if !s.QuotasEnabled() {
		t.Fatal("a store opened with a limited tenant says quotas are disabled")
	}
	ctx := t.Context()
	usage := func(when string, running, queued int) {
		t.Helper()
		u, err := s.QuotaUsage(ctx, quota.KindTenant, limitedTenant)
		if err != nil {
			t.Fatal(err)
		}
		if u.Running != running || u.Queued != queued {
			t.Fatalf("%s: usage %d running, %d queued; want %d, %d", when, u.Running, u.Queued, running, queued)
		}
	}
	now := time.Now().UTC()
	const n = maxRunning + 2
	var ids []string
	for i := range n {
		// One submit at a time, a millisecond apart: the order they wait in.
		at := now.Add(time.Duration(i) * time.Millisecond)
		res := s.CreateMany(ctx, []task.Task{submitted(at, limitedTenant, "")}, at, true)
		if len(res) != 1 || res[0].Err != nil {
			t.Fatalf("submit %d: %+v", i, res)
		}
		ids = append(ids, res[0].Task.ID)
	}
	slotted, waiting := ids[:maxRunning], ids[maxRunning:]
	for i, id := range ids {
		tk := mustGetTask(t, s, id)
		holds := tk.Quota != nil && tk.Quota.Slot
		switch {
		case tk.State != api.Queued || tk.Quota == nil:
			t.Fatalf("submit %d: %s, quota hold %+v; want QUEUED with a hold", i, tk.State, tk.Quota)
		case i < maxRunning && (!holds || tk.WaitingSince != nil || tk.DispatchCheckAt == nil):
			t.Fatalf("submit %d of %d slots: slot %v waiting %v check %v; want a slot and a dispatch check", i, maxRunning, holds, tk.WaitingSince, tk.DispatchCheckAt)
		case i >= maxRunning && (holds || tk.WaitingSince == nil || tk.DispatchCheckAt != nil):
			t.Fatalf("submit %d past %d slots: slot %v waiting %v check %v; want waiting, no slot", i, maxRunning, holds, tk.WaitingSince, tk.DispatchCheckAt)
		}
		es := checkOutbox(t, s, id)
		if last := es[len(es)-1]; i >= maxRunning && last.Reason != task.ReasonQuotaWait {
			t.Fatalf("submit %d: last transition %s→%s (%s), want %s", i, last.From, last.To, last.Reason, task.ReasonQuotaWait)
		}
	}
	usage("after the submits", maxRunning, n)
	free := submitted(now, "acme", "")
	res := s.CreateMany(ctx, []task.Task{free}, now, true)
	if len(res) != 1 || res[0].Err != nil || res[0].Task.Quota != nil || res[0].Task.WaitingSince != nil || res[0].Task.State != api.Queued {
		t.Fatalf("an unlimited tenant's submit: %+v", res)
	}

	// The admit duty's query lists the waiting tasks by rank (of one
	// priority here: oldest first), reading ranks up to the longest lead.
	admits := func() []string {
		t.Helper()
		got, _ := dueRead(t, s, store.DueAdmit, time.Now().UTC().Add(time.Minute+task.MaxWaitRankLead), 10)
		slices.SortStableFunc(got, func(a, b task.Task) int { return a.WaitingSince.Compare(*b.WaitingSince) })
		return idsOf(got)
	}
	if got := admits(); !slices.Equal(got, waiting) {
		t.Fatalf("waiting for a slot %v, want %v", got, waiting)
	}
	// The quota duty reads the same tasks through WaitingForSlot, with or
	// without the oldest (each once).
	for _, oldest := range []bool{false, true} {
		if got, failed, err := s.WaitingForSlot(ctx, time.Now().UTC().Add(time.Minute), 10, oldest); err != nil || failed != 0 {
			t.Fatalf("WaitingForSlot: %d groups failed: %v", failed, err)
		} else if ids := idsOf(got); !sameSet(ids, waiting) || len(ids) != len(waiting) {
			t.Fatalf("WaitingForSlot (oldest %v) %v, want %v", oldest, ids, waiting)
		}
	}
	// No slot is free: an admit gives nothing.
	if r := mustAccept(t, s, waiting[0], task.Event{Kind: task.EventAdmit, Now: time.Now().UTC()}); r.Write || r.Enqueue {
		t.Fatalf("admit with every slot taken: write %v enqueue %v", r.Write, r.Enqueue)
	}
	if tk := mustGetTask(t, s, waiting[0]); tk.WaitingSince == nil || tk.Quota.Slot {
		t.Fatalf("admit with every slot taken gave %s a slot", waiting[0])
	}
	// A slot holder runs (its slot counts as running) and ends.
	at := now.Add(time.Second)
	mustAccept(t, s, slotted[0], started(1, "w1", at))
	usage("one slot holder started", maxRunning, n-1)
	mustAccept(t, s, slotted[0], completed(1, "w1", api.OutcomeSucceeded, "", at.Add(time.Second)))
	usage("one slot holder ended", maxRunning-1, n-1)

	// The oldest waiting task is admitted: it takes the freed slot.
	r := mustAccept(t, s, waiting[0], task.Event{Kind: task.EventAdmit, Now: time.Now().UTC()})
	if !r.Write || !r.Enqueue || r.Task.State != api.Queued || r.Task.Quota == nil || !r.Task.Quota.Slot || r.Task.WaitingSince != nil {
		t.Fatalf("admit with a free slot: write %v enqueue %v %s hold %+v waiting %v; want the slot, QUEUED, to enqueue",
			r.Write, r.Enqueue, r.Task.State, r.Task.Quota, r.Task.WaitingSince)
	}
	if tk := mustGetTask(t, s, waiting[0]); tk.Quota == nil || !tk.Quota.Slot || tk.WaitingSince != nil || tk.DispatchCheckAt == nil {
		t.Fatalf("stored after admit: hold %+v waiting %v check %v", tk.Quota, tk.WaitingSince, tk.DispatchCheckAt)
	}
	usage("one admitted", maxRunning, n-1)
	// The slots are full again: the next waiting task stays waiting.
	if r := mustAccept(t, s, waiting[1], task.Event{Kind: task.EventAdmit, Now: time.Now().UTC()}); r.Write || r.Enqueue {
		t.Fatalf("second admit after one slot freed: write %v enqueue %v", r.Write, r.Enqueue)
	}
	if got := admits(); !slices.Equal(got, waiting[1:]) {
		t.Fatalf("waiting for a slot %v, want %v", got, waiting[1:])
	}
	// The admitted task runs on its slot.
	if r := mustAccept(t, s, waiting[0], started(1, "w2", time.Now().UTC())); r.Task.State != api.Running {
		t.Fatalf("the admitted task started: %s", r.Task.State)
	}
	usage("the admitted task started", maxRunning, n-2)
	// The counters are exact: the repair rewrites nothing.
	reps, err := s.RepairQuotaCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range reps {
		if !rep.Skipped {
			t.Fatalf("repair found drifted counters: %+v", reps)
		}
	}
}

// sameSet reports whether a and b hold the same ids, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
