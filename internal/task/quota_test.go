package task

import (
	"testing"

	"github.com/servo-dev/servo/api"
)

func TestQuotaHoldAndAdmit(t *testing.T) {
	hold := &QuotaHold{Tenant: true, TenantShard: 1, TenantSlotShard: 1}
	for _, c := range []struct {
		name      string
		slotFree  bool
		wantWait  bool
		wantCheck bool
		wantQ     int
		wantR     int
	}{
		{"slot free: enqueued, holding a slot", true, false, true, 1, 1},
		{"no slot: QUEUED, waiting, no dispatch check", false, true, false, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk, a, _ := NewTask(Task{ID: "task_x", TenantID: "acme", Worker: "w"}, t0)
			r := Apply(tk, &a, Event{Kind: EventEnqueued, Attempt: 1, Now: t0, Hold: hold, SlotFree: c.slotFree})
			got := r.Task
			if got.State != api.Queued || (got.WaitingSince != nil) != c.wantWait || (got.DispatchCheckAt != nil) != c.wantCheck {
				t.Fatalf("state %s waiting %v check %v", got.State, got.WaitingSince, got.DispatchCheckAt)
			}
			if q, run := got.QuotaCounts(); q != c.wantQ || run != c.wantR {
				t.Fatalf("counts %d/%d, want %d/%d", q, run, c.wantQ, c.wantR)
			}
			if len(r.Transitions) != 1 || (r.Transitions[0].Reason == ReasonQuotaWait) != c.wantWait {
				t.Fatalf("transitions %+v", r.Transitions)
			}
			if hold.Slot {
				t.Fatal("the event's hold was changed")
			}
			// Admit: only with a free slot, only while waiting.
			for _, free := range []bool{false, true} {
				ar := Apply(got, nil, Event{Kind: EventAdmit, Attempt: 1, Now: t0, SlotFree: free, Hold: &QuotaHold{TenantSlotShard: 3}})
				admitted := ar.Write && ar.Enqueue
				if admitted != (free && c.wantWait) {
					t.Fatalf("admit (free %v): write %v enqueue %v", free, ar.Write, ar.Enqueue)
				}
				if admitted && (ar.Task.WaitingSince != nil || ar.Task.DispatchCheckAt == nil || !ar.Task.Quota.Slot || ar.Task.Quota.TenantSlotShard != 3 || ar.Task.State != api.Queued) {
					t.Fatalf("admitted task %+v", ar.Task)
				}
				if admitted && got.Quota.Slot {
					t.Fatal("admit changed the task it was given")
				}
			}
		})
	}
}

func TestQuotaCounts(t *testing.T) {
	for _, c := range []struct {
		state api.State
		slot  bool
		q, r  int
	}{
		{api.Pending, false, 1, 0}, {api.Queued, false, 1, 0}, {api.Queued, true, 1, 1}, {api.Running, true, 0, 1},
		{api.Cancelling, true, 0, 1}, {api.Succeeded, true, 0, 0}, {api.Failed, true, 0, 0}, {api.Cancelled, false, 0, 0},
	} {
		tk := Task{State: c.state, Quota: &QuotaHold{Slot: c.slot}}
		if q, r := tk.QuotaCounts(); q != c.q || r != c.r {
			t.Errorf("%s slot %v: %d/%d, want %d/%d", c.state, c.slot, q, r, c.q, c.r)
		}
		tk.Quota = nil
		if q, r := tk.QuotaCounts(); q != 0 || r != 0 {
			t.Errorf("%s without a hold counts %d/%d", c.state, q, r)
		}
	}
}
