package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// DefaultDueShards is the number of due-index shards (WithDueShards).
const DefaultDueShards = 384

// WithDueShards sets how many shards the due indexes are split into
// (default DefaultDueShards): each task is given a shard at creation, and
// the sweeper and the outbox re-drive query every shard, a group of
// shards a query (DueGroups, OutboxGroups). The number may
// grow between deployments, never shrink: a task's shard is fixed, and a
// shard no longer queried would never be swept.
func WithDueShards(n int) Option { return func(c *config) { c.shards = n } }

// DueShards is the number of due-index shards; DueTasks and Undelivered
// take a shard in [0, DueShards()).
func (s *Store) DueShards() int { return s.shards }

// DueShardsInUse returns one more than the highest due shard of any task,
// outbox entry or schedule in the database (0 when there is none): the least
// WithDueShards that sweeps and re-drives every one of them. A store may
// start with fewer shards on an empty database (servo dev), never with
// fewer than this. Three queries of at most one document each, ordered by
// dueShard alone (its automatic single-field index).
func (s *Store) DueShardsInUse(ctx context.Context) (int, error) {
	n := 0
	for _, coll := range []string{TasksCollection, OutboxCollection, SchedulesCollection} {
		err := s.runQuery(ctx, s.docs, highestShardQuery(coll), func(d *pb.Document) error {
			n = max(n, int(d.GetFields()["dueShard"].GetIntegerValue())+1)
			return nil
		})
		if err != nil {
			return 0, wrap("due shards in use", err)
		}
	}
	return n, nil
}

// highestShardQuery reads the document of coll with the highest dueShard,
// projected to it.
func highestShardQuery(coll string) *pb.StructuredQuery {
	return &pb.StructuredQuery{
		Select:  &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{fieldRef("dueShard")}},
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: coll}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("dueShard"), Direction: pb.StructuredQuery_DESCENDING}},
		Limit:   wrapInt(1),
	}
}

// DueShardOf is the due-index shard of a task id among n shards: a hash,
// so that tasks created together spread over every shard.
func DueShardOf(taskID string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(taskID))
	return int(h.Sum32() % uint32(n))
}

// DueGroups splits the due shards into the groups DueTasks takes for duty
// d: as many shards a query as Firestore's 30 disjunctions allow beside
// the duty's states (15 for a duty of two states), so that a pass over
// 384 shards costs 13 to 55 queries a duty, not 384.
func (s *Store) DueGroups(d Due) [][]int {
	return shardGroups(s.shards, maxDisjunctions/max(len(DueStates[d]), 1), 1)
}

// Due names a sweeper duty's query.
type Due string

// The sweeper's duties, each one indexed query (see Indexes).
const (
	DueLease    Due = "leaseExpiresAt"  // RUNNING, CANCELLING past the lease
	DueCancel   Due = "cancelDeadline"  // CANCELLING past the grace period
	DueDispatch Due = "dispatchCheckAt" // PENDING, QUEUED past the start timeout
	DueDeadline Due = "deadline"        // any active state past the task deadline
	DueAdmit    Due = "waitRank"        // QUEUED waiting for a run slot (quotas), by rank (task.WaitRank)
	// DueAdmitOldest reads the same tasks oldest first: the quota duty's
	// look, every quota.OldestEvery, for waiting tasks a build before ranks
	// wrote without one.
	DueAdmitOldest Due = "waitingSince"
)

// DueStates are the states each duty's query selects.
var DueStates = map[Due][]api.State{
	DueLease:       {api.Running, api.Cancelling},
	DueCancel:      {api.Cancelling},
	DueDispatch:    {api.Pending, api.Queued},
	DueDeadline:    task.ActiveStates,
	DueAdmit:       {api.Queued},
	DueAdmitOldest: {api.Queued},
}

// DueCursor continues a due query after the last task of a page.
type DueCursor struct {
	At time.Time
	ID string
}

// dueFields are the task fields a due query returns: what the sweeper
// needs to apply the duty's event (id, attempt), log it (tenant, state)
// and continue the query (the due time), and, for a stuck dispatch, where
// its Cloud Task is (worker, redrives). The sweeper acts on the task that
// its transaction reads; a due task has no payload, timing or other field.
var dueFields = []string{"taskId", "tenantId", "state", "attempt", "dueShard", "trace", "worker", "redrives"}

// dueExtra are the fields a duty's query projects beside dueFields: the
// dispatch duty's tell since when an attempt has waited to start (the
// task's creation, its attempt's schedule time), for the sweeper's
// servo.queued.oldest_age even when its transaction fails.
var dueExtra = map[Due][]string{DueDispatch: {"createdAt", "notBefore", "priority"}, DueAdmit: {"waitingSince", "priority"}, DueAdmitOldest: {"priority"}}

// DueTasks returns up to limit tasks of a group of due shards (one of
// DueGroups(d)) whose duty d is due at now, ordered by the due time and
// then the document name across the group, after cursor (nil for the
// first page). The query reads only
// due tasks: its cost grows with their number, not with the running ones.
// It projects the tasks to their id, tenant, state, attempt and d's due
// time: a page's size does not depend on the tasks' payloads.
func (s *Store) DueTasks(ctx context.Context, d Due, shards []int, now time.Time, limit int, after *DueCursor) ([]task.Task, error) {
	q, err := s.dueQuery(d, shards, now, limit, after)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	var out []task.Task
	err = s.runQuery(ctx, s.docs, q, func(doc *pb.Document) error {
		var t task.Task
		if err := decodeFields(doc.GetFields(), &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	s.outages.observe(began, err)
	return out, wrap("due "+string(d), err)
}

// dueQuery is DueTasks' query: a group of shards, the duty's states, due
// by now, in due order; served by the index (dueShard, state, due field),
// one range per shard and state, which Firestore merges in order (at most
// maxDisjunctions of them).
func (s *Store) dueQuery(d Due, shards []int, now time.Time, limit int, after *DueCursor) (*pb.StructuredQuery, error) {
	states, ok := DueStates[d]
	if !ok {
		return nil, fmt.Errorf("store: unknown duty %q", d)
	}
	if len(shards) == 0 || len(shards)*len(states) > maxDisjunctions {
		return nil, fmt.Errorf("store: %s query over %d due shards: want 1 to %d", d, len(shards), maxDisjunctions/len(states))
	}
	op := pb.StructuredQuery_FieldFilter_EQUAL
	var sv *pb.Value = strVal(string(states[0]))
	if len(states) > 1 {
		op, sv = pb.StructuredQuery_FieldFilter_IN, statesVal(states)
	}
	sel := &pb.StructuredQuery_Projection{}
	for _, f := range append(append(slices.Clone(dueFields), dueExtra[d]...), string(d)) {
		sel.Fields = append(sel.Fields, fieldRef(f))
	}
	q := &pb.StructuredQuery{
		Select: sel,
		From:   []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where: and(shardFilter(shards), fieldFilter("state", op, sv),
			fieldFilter(string(d), pb.StructuredQuery_FieldFilter_LESS_THAN_OR_EQUAL, encodeValue(reflect.ValueOf(now.UTC())))),
		OrderBy: []*pb.StructuredQuery_Order{
			{Field: fieldRef(string(d)), Direction: pb.StructuredQuery_ASCENDING},
			{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
		},
		Limit: wrapInt(limit),
	}
	if after != nil {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{encodeValue(reflect.ValueOf(after.At)), refVal(s.taskName(after.ID))}, Before: false}
	}
	return q, nil
}

// DueTime is the time the duty d looks at on t (nil if unset).
func DueTime(d Due, t *task.Task) *time.Time {
	switch d {
	case DueLease:
		return t.LeaseExpiresAt
	case DueCancel:
		return t.CancelDeadline
	case DueDispatch:
		return t.DispatchCheckAt
	case DueDeadline:
		return t.Deadline
	case DueAdmit:
		return task.WaitRank(t)
	case DueAdmitOldest:
		return t.WaitingSince
	}
	return nil
}
