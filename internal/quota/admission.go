package quota

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/internal/task"
)

// ErrExceeded: a submit would take its tenant or worker past maxQueued;
// nothing was written. The error is an *ExceededError.
var ErrExceeded = errors.New("quota: maxQueued exceeded")

// ExceededError says which limit refused a submit.
type ExceededError struct {
	Kind  Kind
	Name  string
	Limit int
}

func (e *ExceededError) Error() string {
	if e.Kind == KindShare {
		w, t := splitShare(e.Name)
		return fmt.Sprintf("tenant %q has %d tasks queued on worker %q (its share: the worker's perTenant maxQueued)", t, e.Limit, w)
	}
	return fmt.Sprintf("%s %q has %d tasks queued (maxQueued)", e.Kind, e.Name, e.Limit)
}

// Unwrap makes errors.Is(err, ErrExceeded) hold.
func (e *ExceededError) Unwrap() error { return ErrExceeded }

// Admission admits one submitted task of a limited scope, to be stored
// QUEUED, in the store's creating transaction: that transaction's first
// read takes the counter shards Reads names, then Hold decides where the
// task keeps its counts and whether it has a run slot. An Admission holds
// no state of a try: every retry of the transaction uses it again.
type Admission struct {
	c *Counters
	// start is the task's shard before reduction: a hash of its id.
	start int
	// scopes are the task's tenant, worker and tenant-on-worker (share)
	// scopes, nil when unlimited.
	scopes [3]*scope
}

// Admission returns the admission of t, or nil when none of t's scopes is
// limited (t is then stored as without quotas).
func (c *Counters) Admission(t *task.Task) *Admission {
	a := &Admission{c: c, scopes: [3]*scope{c.limited(KindTenant, t.TenantID), c.limited(KindWorker, t.Worker),
		c.limited(KindShare, ShareName(t.Worker, t.TenantID))}}
	if a.scopes[0] == nil && a.scopes[1] == nil && a.scopes[2] == nil {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(t.ID))
	a.start = int(h.Sum32() & 0x7fffffff)
	return a
}

// Keys name the in-process locks of the task's limited scopes (LockKeys).
func (a *Admission) Keys() []string {
	var out []string
	for _, sc := range a.scopes {
		if sc != nil {
			out = append(out, lockKey(sc.kind, sc.name))
		}
	}
	return out
}

// LockKeys name the in-process locks of the scopes t holds counts in,
// tenant before worker. The store takes them around a transaction that
// reads those scopes' shards, so that within one process the transactions
// of one scope run one at a time: they would only contend inside
// Firestore, whose emulator handles contention poorly; across processes,
// Firestore's transactions decide.
func LockKeys(t *task.Task) []string {
	if t.Quota == nil {
		return nil
	}
	var out []string
	if t.Quota.Tenant {
		out = append(out, lockKey(KindTenant, t.TenantID))
	}
	if t.Quota.Worker {
		out = append(out, lockKey(KindWorker, t.Worker))
	}
	if t.Quota.Share {
		out = append(out, lockKey(KindShare, ShareName(t.Worker, t.TenantID)))
	}
	return out
}

func lockKey(kind Kind, name string) string { return string(kind) + "\x00" + name }

// Reads are the counter shards the creating transaction's first read
// takes: the task's own shard of each limited scope.
func (a *Admission) Reads() []string {
	var names []string
	for _, sc := range a.scopes {
		if sc != nil {
			names = append(names, a.c.shardName(sc.kind, sc.name, a.start%sc.n))
		}
	}
	return names
}

// Hold decides the task's hold from docs, the documents of the
// transaction's first read (with every shard Reads named), reading more in
// tx only when a shard is full. In each limited scope the task is admitted
// on the first shard, from its own, with room under maxQueued (an
// *ExceededError when none has), and takes a run slot on its shard or,
// when that one has none, on any other: slotFree is false when a scope has
// no slot free, and the task then waits for one.
func (a *Admission) Hold(ctx context.Context, docs map[string]*pb.Document, tx Tx) (hold *task.QuotaHold, slotFree bool, err error) {
	h := task.QuotaHold{}
	slot := true
	for i, sc := range a.scopes {
		if sc == nil {
			continue
		}
		k, q, err := a.c.pickShard(ctx, sc, a.start%sc.n, docs, tx)
		if err != nil {
			return nil, false, err
		}
		rk := k
		if slot && !Fits(sc.lim.MaxRunning, sc.n, k, q.running) {
			// No slot on the task's shard: look at the others (one more
			// read, only then).
			if rk, err = a.c.slotElsewhere(ctx, sc, k, tx); err != nil {
				return nil, false, err
			}
			slot = rk >= 0
		}
		switch i {
		case 0:
			h.Tenant, h.TenantShard, h.TenantSlotShard = true, k, max(rk, 0)
		case 1:
			h.Worker, h.WorkerShard, h.WorkerSlotShard = true, k, max(rk, 0)
		default:
			h.Share, h.ShareShard, h.ShareSlotShard = true, k, max(rk, 0)
		}
	}
	return &h, slot, nil
}

// pickShard returns a shard of sc with room for one more queued task: k
// (already read into docs) when it has, else the first other one that has
// (all read, in one more RPC); an *ExceededError when none has.
func (c *Counters) pickShard(ctx context.Context, sc *scope, k int, docs map[string]*pb.Document, tx Tx) (int, counter, error) {
	q, err := read(docs, c.shardName(sc.kind, sc.name, k))
	if err != nil || Fits(sc.lim.MaxQueued, sc.n, k, q.queued) {
		return k, q, err
	}
	var names []string
	for j := range sc.n {
		if j != k {
			names = append(names, c.shardName(sc.kind, sc.name, j))
		}
	}
	if len(names) == 0 { // one shard: nothing more to read
		return 0, q, &ExceededError{Kind: sc.kind, Name: sc.name, Limit: sc.lim.MaxQueued}
	}
	more, err := tx.Get(ctx, names)
	if err != nil {
		return 0, q, err
	}
	for i := 1; i < sc.n; i++ {
		j := (k + i) % sc.n
		q, err := read(more, c.shardName(sc.kind, sc.name, j))
		if err != nil {
			return 0, q, err
		}
		if Fits(sc.lim.MaxQueued, sc.n, j, q.queued) {
			return j, q, nil
		}
	}
	return 0, q, &ExceededError{Kind: sc.kind, Name: sc.name, Limit: sc.lim.MaxQueued}
}

// slotElsewhere reads every shard of sc in tx and returns one with a run
// slot free (-1: none).
func (c *Counters) slotElsewhere(ctx context.Context, sc *scope, k int, tx Tx) (int, error) {
	if sc.n == 1 {
		return -1, nil
	}
	docs, err := tx.Get(ctx, c.shardNames(sc))
	if err != nil {
		return -1, err
	}
	return c.freeSlot(sc, k, docs)
}

// freeSlot returns the first shard of sc, from k on, whose share of
// maxRunning has room in docs (which hold every shard of sc), or -1.
func (c *Counters) freeSlot(sc *scope, k int, docs map[string]*pb.Document) (int, error) {
	for i := range sc.n {
		j := (k + i) % sc.n
		q, err := read(docs, c.shardName(sc.kind, sc.name, j))
		if err != nil {
			return -1, err
		}
		if Fits(sc.lim.MaxRunning, sc.n, j, q.running) {
			return j, nil
		}
	}
	return -1, nil
}

// FreeSlots is the quota step of the admit event (task.EventAdmit) in
// store.Apply: it reads in tx every counter shard of t's scopes (one RPC)
// and returns t's hold with, in each scope, the first shard with a run
// slot free (t's own shard first); ok is false when a scope has none. The
// store hands the hold and ok to the state machine (task.Event.Hold,
// SlotFree), which gives the task its slot or leaves it waiting.
func (c *Counters) FreeSlots(ctx context.Context, t *task.Task, tx Tx) (hold *task.QuotaHold, ok bool, err error) {
	if t.Quota == nil {
		return nil, false, nil
	}
	h := *t.Quota
	var scopes []*scope
	var own []int
	if h.Tenant {
		scopes, own = append(scopes, c.held(KindTenant, t.TenantID)), append(own, h.TenantShard)
	}
	if h.Worker {
		scopes, own = append(scopes, c.held(KindWorker, t.Worker)), append(own, h.WorkerShard)
	}
	if h.Share {
		scopes, own = append(scopes, c.held(KindShare, ShareName(t.Worker, t.TenantID))), append(own, h.ShareShard)
	}
	var names []string
	for _, sc := range scopes {
		names = append(names, c.shardNames(sc)...)
	}
	docs, err := tx.Get(ctx, names)
	if err != nil {
		return nil, false, err
	}
	for i, sc := range scopes {
		k, err := c.freeSlot(sc, own[i]%sc.n, docs)
		if err != nil || k < 0 {
			return nil, false, err
		}
		switch sc.kind {
		case KindTenant:
			h.TenantSlotShard = k
		case KindWorker:
			h.WorkerSlotShard = k
		default:
			h.ShareSlotShard = k
		}
	}
	return &h, true, nil
}
