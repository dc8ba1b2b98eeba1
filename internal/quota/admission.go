package quota

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

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
	// start is the task's shard before reduction, seed the offset of the
	// shards it probes when that one is full (probes): hashes of its id.
	start int
	seed  uint32
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
	h := fnv.New64a()
	h.Write([]byte(t.ID))
	sum := h.Sum64()
	a.start, a.seed = int(sum&0x7fffffff), uint32(sum>>32)
	return a
}

// MaxProbes bounds how many other shards of one scope a transaction reads
// when the first it looked at has no room: a scope sized to its rate may
// have thousands of shards, and a submit or an admit reads at most
// 1 + MaxProbes of them.
const MaxProbes = 8

// probes are the shards other than k that a transaction reads when k has
// no room: every other one, from k+1 on, when there are at most MaxProbes;
// else MaxProbes consecutive ones from an offset drawn from seed, so that
// the submits that spill over from one full shard spread over the others.
func probes(n, k int, seed uint32) []int {
	if n <= 1 {
		return nil
	}
	m, off := n-1, 0
	if m > MaxProbes {
		m, off = MaxProbes, int(seed%uint32(n-1))
	}
	out := make([]int, m)
	for i := range m {
		out[i] = (k + 1 + (off+i)%(n-1)) % n
	}
	return out
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
// tx only when a shard has no room. In each limited scope the task is
// admitted on its own shard or, when that one is at its share of
// maxQueued, on the first of its probes (at most MaxProbes other shards,
// read in one more RPC) with room: an *ExceededError when none has. It
// takes a run slot on that shard or, when it has none, on any shard read
// with one: slotFree is false when a scope has no slot free among them, and
// the task then waits for one.
func (a *Admission) Hold(ctx context.Context, docs map[string]*pb.Document, tx Tx) (hold *task.QuotaHold, slotFree bool, err error) {
	h := task.QuotaHold{}
	slot := true
	for i, sc := range a.scopes {
		if sc == nil {
			continue
		}
		k, rk, err := a.c.admit(ctx, sc, a.start%sc.n, a.seed, slot, docs, tx)
		if err != nil {
			return nil, false, err
		}
		slot = slot && rk >= 0
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

// admit picks, in scope sc, the shard k a task is admitted on (own when it
// has room under maxQueued, else the first probe with room) and, when
// wantSlot, the shard rk of its run slot (k first; -1: none free). The
// probes are read, in one RPC, only when own has no room for either.
func (c *Counters) admit(ctx context.Context, sc *scope, own int, seed uint32, wantSlot bool, docs map[string]*pb.Document, tx Tx) (k, rk int, err error) {
	q, err := read(docs, c.shardName(sc.kind, sc.name, own))
	if err != nil {
		return 0, -1, err
	}
	okQueued := Fits(sc.lim.MaxQueued, sc.n, own, q.queued)
	okSlot := !wantSlot || Fits(sc.lim.MaxRunning, sc.n, own, q.running)
	if okQueued && okSlot {
		return own, own, nil
	}
	others := probes(sc.n, own, seed)
	more := map[string]*pb.Document{}
	if len(others) > 0 {
		names := make([]string, len(others))
		for i, j := range others {
			names[i] = c.shardName(sc.kind, sc.name, j)
		}
		if more, err = tx.Get(ctx, names); err != nil {
			return 0, -1, err
		}
	}
	counts := map[int]counter{own: q}
	for _, j := range others {
		if counts[j], err = read(more, c.shardName(sc.kind, sc.name, j)); err != nil {
			return 0, -1, err
		}
	}
	k = own
	if !okQueued {
		k = -1
		for _, j := range others {
			if Fits(sc.lim.MaxQueued, sc.n, j, counts[j].queued) {
				k = j
				break
			}
		}
		if k < 0 {
			return 0, -1, &ExceededError{Kind: sc.kind, Name: sc.name, Limit: sc.lim.MaxQueued}
		}
	}
	if !wantSlot {
		return k, -1, nil
	}
	return k, firstFree(sc, append([]int{k, own}, others...), counts), nil
}

// firstFree returns the first of shards whose count in counts is under
// its share of sc's maxRunning, or -1.
func firstFree(sc *scope, shards []int, counts map[int]counter) int {
	for _, j := range shards {
		if Fits(sc.lim.MaxRunning, sc.n, j, counts[j].running) {
			return j
		}
	}
	return -1
}

// FreeSlots is the quota step of the admit event (task.EventAdmit) in
// store.Apply: it reads in tx, in one RPC, the task's own shard of each of
// its scopes and at most MaxProbes others from a random offset (every
// shard of a scope of at most 1 + MaxProbes), and returns t's hold with,
// in each scope, the first of them with a run slot free (its own first);
// ok is false when a scope has none among them. The offset is drawn anew
// at every try, so a waiting task that found none looks at other shards at
// the next pass. The store hands the hold and ok to the state machine
// (task.Event.Hold, SlotFree), which gives the task its slot or leaves it
// waiting.
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
	cands := make([][]int, len(scopes))
	for i, sc := range scopes {
		k := own[i] % sc.n
		cands[i] = append([]int{k}, probes(sc.n, k, rand.Uint32())...)
		for _, j := range cands[i] {
			names = append(names, c.shardName(sc.kind, sc.name, j))
		}
	}
	docs, err := tx.Get(ctx, names)
	if err != nil {
		return nil, false, err
	}
	for i, sc := range scopes {
		counts := map[int]counter{}
		for _, j := range cands[i] {
			if counts[j], err = read(docs, c.shardName(sc.kind, sc.name, j)); err != nil {
				return nil, false, err
			}
		}
		k := firstFree(sc, cands[i], counts)
		if k < 0 {
			return nil, false, nil
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
