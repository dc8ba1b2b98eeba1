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
	}{
		{"slot free: enqueued, holding a slot", true, false, true},
		{"no slot: QUEUED, waiting, no dispatch check", false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk, a, _ := NewTask(Task{ID: "task_x", TenantID: "acme", Worker: "w"}, t0)
			r := Apply(tk, &a, Event{Kind: EventEnqueued, Attempt: 1, Now: t0, Hold: hold, SlotFree: c.slotFree})
			got := r.Task
			if got.State != api.Queued || (got.WaitingSince != nil) != c.wantWait || (got.DispatchCheckAt != nil) != c.wantCheck {
				t.Fatalf("state %s waiting %v check %v", got.State, got.WaitingSince, got.DispatchCheckAt)
			}
			if got.Quota == nil || got.Quota.Slot != c.slotFree || got.Quota.TenantShard != 1 {
				t.Fatalf("hold %+v, want the event's with slot %v", got.Quota, c.slotFree)
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
