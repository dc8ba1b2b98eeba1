package quota

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// Collection holds the counter shards of the limited scopes.
const Collection = "quotas"

// Counters are the counter shards of a Policy in one Firestore database.
// Its methods read through the store (Tx, DB) and return writes for the
// store to commit; it is safe for concurrent use.
type Counters struct {
	policy *Policy
	root   string // projects/P/databases/D/documents
	// repairBatch is MaxRepairShards (tests set less); repairAfter is the
	// last shard the previous Repair pass took ("": start from the first).
	repairBatch int
	repairMu    sync.Mutex
	repairAfter string
}

// NewCounters returns the counters of p (nil: no limit) in the database
// whose documents are under root (projects/P/databases/D/documents).
func NewCounters(p *Policy, root string) (*Counters, error) {
	if p == nil {
		p = &Policy{}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Counters{policy: p, root: root}, nil
}

// Policy returns the policy in force (never nil).
func (c *Counters) Policy() *Policy {
	if c == nil {
		return &Policy{}
	}
	return c.policy
}

// Enabled reports whether any scope is limited.
func (c *Counters) Enabled() bool { return c.Policy().Enabled() }

// scope is a limited scope of a task.
type scope struct {
	kind Kind
	name string
	lim  Limits
	n    int
}

// limited returns the scope (kind, name) when it is limited, else nil.
func (c *Counters) limited(kind Kind, name string) *scope {
	l := c.policy.For(kind, name)
	if !l.Limited() {
		return nil
	}
	return &scope{kind: kind, name: name, lim: l, n: c.policy.ShardsFor(l)}
}

// held is limited for a scope a task holds counts in: its limits now
// (unlimited, with one shard, when its limit was removed since).
func (c *Counters) held(kind Kind, name string) *scope {
	if sc := c.limited(kind, name); sc != nil {
		return sc
	}
	return &scope{kind: kind, name: name, n: 1}
}

// shardName is the document name of shard k of the scope (kind, name).
func (c *Counters) shardName(kind Kind, name string, k int) string {
	prefix := string(kind[0]) // t, w, s
	return c.root + "/" + Collection + "/" + prefix + "_" + base64.RawURLEncoding.EncodeToString([]byte(name)) + "-" + strconv.Itoa(k)
}

// Counts is what t adds to its scopes' counters: queued is 1 while the
// task is PENDING or QUEUED, running is 1 while it holds a run slot and
// has not ended. Both are 0 for a task without a quota hold. The store
// writes the difference between a task's counts before and after each
// transition in the transition's own commit (Writes).
func Counts(t *task.Task) (queued, running int) {
	if t.Quota == nil {
		return 0, 0
	}
	if t.State == api.Pending || t.State == api.Queued {
		queued = 1
	}
	if t.Quota.Slot && !t.State.Terminal() {
		running = 1
	}
	return queued, running
}

// Writes are the counter writes of a change of a task from before to
// after (none for a task without a quota hold, or whose counts did not
// change): blind writes (increment transforms), so they read nothing.
func (c *Counters) Writes(before, after *task.Task) []*pb.Write {
	h := after.Quota
	if h == nil {
		h = before.Quota
	}
	if h == nil {
		return nil
	}
	bq, br := Counts(before)
	aq, ar := Counts(after)
	dq, dr := aq-bq, ar-br
	if dq == 0 && dr == 0 {
		return nil
	}
	var out []*pb.Write
	add := func(kind Kind, name string, qk, rk int) {
		if qk == rk || dq == 0 || dr == 0 {
			k := qk
			if dq == 0 {
				k = rk
			}
			out = append(out, c.counterWrite(kind, name, k, dq, dr))
			return
		}
		out = append(out, c.counterWrite(kind, name, qk, dq, 0), c.counterWrite(kind, name, rk, 0, dr))
	}
	if h.Tenant {
		add(KindTenant, after.TenantID, h.TenantShard, h.TenantSlotShard)
	}
	if h.Worker {
		add(KindWorker, after.Worker, h.WorkerShard, h.WorkerSlotShard)
	}
	if h.Share {
		add(KindShare, ShareName(after.Worker, after.TenantID), h.ShareShard, h.ShareSlotShard)
	}
	return out
}

// counterWrite adds dq queued and dr running to one shard, creating it if
// needed.
func (c *Counters) counterWrite(kind Kind, name string, k, dq, dr int) *pb.Write {
	meta := map[string]*pb.Value{"kind": strVal(string(kind)), "name": strVal(name), "shard": intVal(k)}
	var tr []*pb.DocumentTransform_FieldTransform
	for _, f := range []struct {
		path string
		d    int
	}{{"queued", dq}, {"running", dr}} {
		if f.d != 0 {
			tr = append(tr, &pb.DocumentTransform_FieldTransform{FieldPath: f.path,
				TransformType: &pb.DocumentTransform_FieldTransform_Increment{Increment: intVal(f.d)}})
		}
	}
	return &pb.Write{
		Operation:        &pb.Write_Update{Update: &pb.Document{Name: c.shardName(kind, name, k), Fields: meta}},
		UpdateMask:       &pb.DocumentMask{FieldPaths: []string{"kind", "name", "shard"}},
		UpdateTransforms: tr,
	}
}

// counter is a counter shard as stored.
type counter struct {
	kind, name             string
	shard, queued, running int
}

// decodeCounter decodes a counter shard's fields; a field the document
// lacks (or null) is zero.
func decodeCounter(fields map[string]*pb.Value) (counter, error) {
	var c counter
	for _, f := range []struct {
		name string
		s    *string
		n    *int
	}{{"kind", &c.kind, nil}, {"name", &c.name, nil}, {"shard", nil, &c.shard}, {"queued", nil, &c.queued}, {"running", nil, &c.running}} {
		v, ok := fields[f.name]
		if !ok {
			continue
		}
		switch x := v.GetValueType().(type) {
		case nil, *pb.Value_NullValue:
		case *pb.Value_StringValue:
			if f.s == nil {
				return c, fmt.Errorf("%s: cannot decode %T into int", f.name, x)
			}
			*f.s = x.StringValue
		case *pb.Value_IntegerValue:
			if f.n == nil {
				return c, fmt.Errorf("%s: cannot decode %T into string", f.name, x)
			}
			*f.n = int(x.IntegerValue)
		default:
			want := "int"
			if f.s != nil {
				want = "string"
			}
			return c, fmt.Errorf("%s: cannot decode %T into %s", f.name, x, want)
		}
	}
	return c, nil
}

// read decodes a shard read in a transaction (absent: zero).
func read(docs map[string]*pb.Document, name string) (counter, error) {
	if d := docs[name]; d != nil {
		c, err := decodeCounter(d.GetFields())
		if err != nil {
			return c, fmt.Errorf("decode %s: %w", name, err)
		}
		return c, nil
	}
	return counter{}, nil
}

// Usage is a scope's counts: the sum of its counter shards.
type Usage struct {
	// Queued counts tasks PENDING or QUEUED.
	Queued int
	// Running counts run slots held: tasks RUNNING or CANCELLING, and
	// those enqueued to their worker and not yet started.
	Running int
	// Shards is the number of counter shards read.
	Shards int
}

// Usage sums the counter shards of a scope (zero when the scope has
// never been limited) with aggregation queries (DB.Sum): a scope sized for a
// peak of 30 000 tasks/s has 150 000 shards, which a plain query would
// bill as 150 000 reads each time a page or `servo usage` shows it; the
// sums cost one read per 1 000.
func (c *Counters) Usage(ctx context.Context, db DB, kind Kind, name string) (Usage, error) {
	q := &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: Collection}},
		Where: and(fieldFilter("kind", pb.StructuredQuery_FieldFilter_EQUAL, strVal(string(kind))),
			fieldFilter("name", pb.StructuredQuery_FieldFilter_EQUAL, strVal(name))),
	}
	n, sums, err := db.Sum(ctx, q, []string{"queued", "running"})
	if err != nil {
		return Usage{}, err
	}
	return Usage{Queued: int(sums[0]), Running: int(sums[1]), Shards: int(n)}, nil
}
