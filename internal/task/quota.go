package task

import (
	"time"

	"github.com/servo-dev/servo/api"
)

// QuotaHold records where a task of a limited tenant or worker keeps its
// counts: the counter shard of each limited scope it was admitted on (its
// queued count, fixed for the task's life, so that every later change
// goes to the same shard), whether it holds a run slot, and the shard of
// each scope whose slot it took (its running count; any shard with a slot
// free, chosen when the slot is given). Package quota keeps the counters
// (quota.Counts is what a task adds to them); the machine's quota steps
// are below.
type QuotaHold struct {
	// Tenant and Worker say which of the task's scopes are limited.
	Tenant bool `json:"tenant"`
	Worker bool `json:"worker"`
	// TenantShard and WorkerShard are the scopes' counter shards.
	TenantShard int `json:"tenantShard"`
	WorkerShard int `json:"workerShard"`
	// Slot: the task was given a run slot (it was enqueued); it holds it
	// until it ends, retries included.
	Slot bool `json:"slot"`
	// TenantSlotShard and WorkerSlotShard are the shards whose run slots
	// the task holds (with Slot).
	TenantSlotShard int `json:"tenantSlotShard"`
	WorkerSlotShard int `json:"workerSlotShard"`
	// Share says the tenant's share of the worker is limited (the
	// worker's perTenant limits); ShareShard and ShareSlotShard are its
	// counter shards.
	Share          bool `json:"share,omitempty"`
	ShareShard     int  `json:"shareShard,omitempty"`
	ShareSlotShard int  `json:"shareSlotShard,omitempty"`
}

// ReasonQuotaWait is the reason of the PENDING → QUEUED transition of a
// task admitted while its tenant or worker had no free run slot.
const ReasonQuotaWait = "QUOTA_WAIT"

// hold gives a task being enqueued at creation its quota hold; without a
// free slot it becomes QUEUED waiting for one, with no Cloud Task and no
// dispatch check (the admit duty enqueues it later).
func (m *machine) hold() {
	t := m.t()
	h := *m.ev.Hold
	// A delayed start takes no run slot before it: it waits for one from
	// its start (the admit duty's query takes waitingSince ≤ now), so a
	// slot is never held by a task that cannot run yet.
	delayed := t.NotBefore != nil && t.NotBefore.After(m.now)
	h.Slot = m.ev.SlotFree && !delayed
	t.Quota = &h
	t.EnqueueAt = nil // the admit duty hands it over
	if h.Slot {
		return
	}
	if delayed {
		m.transition(api.Queued, api.ReasonEnqueued, "")
		at := *t.NotBefore
		t.WaitingSince, t.DispatchCheckAt = &at, nil
		return
	}
	m.transition(api.Queued, ReasonQuotaWait, "")
	now := m.now
	t.WaitingSince, t.DispatchCheckAt = &now, nil
}

// PriorityAging is how long a task waits to rank with the tasks one
// priority level above it that begin to wait then (docs/contract.md §12,
// "Priority"): no waiting task is overtaken for ever.
const PriorityAging = 5 * time.Minute

// WaitRank is the rank of a task waiting for a run slot (nil when it does
// not wait): the time it waits from, plus PriorityAging for each level
// below the highest. Waiting tasks are admitted lowest rank first, so a
// priority-1 task goes before every priority-5 task that has waited less
// than 4 × PriorityAging longer.
func WaitRank(t *Task) *time.Time {
	if t.WaitingSince == nil {
		return nil
	}
	r := t.WaitingSince.Add(time.Duration(PriorityOf(t.Priority)-HighestPriority) * PriorityAging)
	return &r
}

// MaxWaitRankLead is how far ahead of its WaitingSince a rank may be.
const MaxWaitRankLead = time.Duration(LowestPriority-HighestPriority) * PriorityAging

// admit hands a waiting task the run slots the store found free (on the
// shards ev.Hold names): the task stays QUEUED, gets its dispatch check,
// and asks to be enqueued.
func (m *machine) admit() {
	t := m.t()
	if t.State != api.Queued || t.WaitingSince == nil || t.Quota == nil || !m.ev.SlotFree || (m.ev.Attempt != 0 && m.ev.Attempt != t.Attempt) {
		return
	}
	h := *t.Quota
	h.Slot = true
	if m.ev.Hold != nil {
		h.TenantSlotShard, h.WorkerSlotShard = m.ev.Hold.TenantSlotShard, m.ev.Hold.WorkerSlotShard
	}
	t.Quota = &h
	t.WaitingSince = nil
	m.armDispatch(laterOf(m.now, t.NotBefore))
	m.r.Write, m.r.Enqueue = true, true
}
