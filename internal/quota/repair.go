package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Repair reports one counter shard that Counters.Repair found drifted and
// rewrote.
type Repair struct {
	Kind  Kind
	Name  string
	Shard int
	// Queued and Running are the stored counts; WantQueued and WantRunning
	// the recounted ones.
	Queued, Running         int
	WantQueued, WantRunning int
	// Skipped: the shard changed between its read and the rewrite; the
	// next pass recounts it.
	Skipped bool
}

// MaxRepairShards bounds the counter shards one Repair pass recounts: a
// deployment with scopes sized to their rate may have tens of thousands,
// and each costs two count aggregations. A pass takes the next
// MaxRepairShards in name order after the last one the previous pass of
// this process took, wrapping around, so every shard is recounted every
// ceil(shards / MaxRepairShards) passes.
const MaxRepairShards = 512

// Repair is the sweeper's quota repair: it recounts counter shards (at
// most MaxRepairShards a pass, taking turns) from the tasks that hold
// counts on them (two count aggregations per shard: no task is read) and
// rewrites the ones that differ. The rewrite is
// conditional on the shard's update time as read before the count, so a
// transition that committed meanwhile (its counts are then in neither, or
// in both) makes it skip the shard until the next pass instead of writing
// a stale value. A shard that failed is left for the next pass; the error
// joins every failure.
func (c *Counters) Repair(ctx context.Context, db DB) ([]Repair, error) {
	type shard struct {
		counter
		at *timestamppb.Timestamp
	}
	var shards []shard
	batch := c.repairBatch
	if batch <= 0 {
		batch = MaxRepairShards
	}
	c.repairMu.Lock()
	after := c.repairAfter
	c.repairMu.Unlock()
	q := &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: Collection}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: &pb.StructuredQuery_FieldReference{FieldPath: "__name__"},
			Direction: pb.StructuredQuery_ASCENDING}},
		Limit: wrapperspb.Int32(int32(batch))}
	if after != "" {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{{ValueType: &pb.Value_ReferenceValue{ReferenceValue: after}}}, Before: false}
	}
	last := ""
	err := db.Query(ctx, q,
		func(d *pb.Document) error {
			last = d.GetName()
			s, err := decodeCounter(d.GetFields())
			if err != nil {
				return err
			}
			shards = append(shards, shard{s, d.GetUpdateTime()})
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	if len(shards) < batch {
		last = "" // the end: the next pass starts again from the first shard
	}
	c.repairMu.Lock()
	c.repairAfter = last
	c.repairMu.Unlock()
	var out []Repair
	var errs []error
	for _, sh := range shards {
		nq, nr, err := recount(ctx, db, sh.counter)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if nq == sh.queued && nr == sh.running {
			continue
		}
		rep := Repair{Kind: Kind(sh.kind), Name: sh.name, Shard: sh.shard, Queued: sh.queued, Running: sh.running, WantQueued: nq, WantRunning: nr}
		err = db.Commit(ctx, []*pb.Write{{
			Operation: &pb.Write_Update{Update: &pb.Document{Name: c.shardName(rep.Kind, rep.Name, rep.Shard),
				Fields: map[string]*pb.Value{"queued": intVal(nq), "running": intVal(nr)}}},
			UpdateMask:      &pb.DocumentMask{FieldPaths: []string{"queued", "running"}},
			CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_UpdateTime{UpdateTime: sh.at}},
		}})
		switch status.Code(err) {
		case codes.OK:
		case codes.FailedPrecondition:
			rep.Skipped = true
		default:
			errs = append(errs, err)
			continue
		}
		out = append(out, rep)
	}
	return out, errors.Join(errs...)
}

// recount counts the tasks that hold counts on shard s: those queued on
// it (PENDING or QUEUED, admitted on it) and those holding a run slot on
// it (active, their slot taken on it).
func recount(ctx context.Context, db DB, s counter) (queued, running int, err error) {
	hold, shardField, slotField := "quota.tenant", "quota.tenantShard", "quota.tenantSlotShard"
	owner := []*pb.StructuredQuery_Filter{fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal(s.name))}
	switch Kind(s.kind) {
	case KindWorker:
		hold, shardField, slotField = "quota.worker", "quota.workerShard", "quota.workerSlotShard"
		owner = []*pb.StructuredQuery_Filter{fieldFilter("worker", pb.StructuredQuery_FieldFilter_EQUAL, strVal(s.name))}
	case KindShare:
		w, tn := splitShare(s.name)
		hold, shardField, slotField = "quota.share", "quota.shareShard", "quota.shareSlotShard"
		owner = []*pb.StructuredQuery_Filter{fieldFilter("worker", pb.StructuredQuery_FieldFilter_EQUAL, strVal(w)),
			fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_EQUAL, strVal(tn))}
	}
	base := func(f string) []*pb.StructuredQuery_Filter {
		return append(slices.Clone(owner),
			fieldFilter(hold, pb.StructuredQuery_FieldFilter_EQUAL, boolVal(true)),
			fieldFilter(f, pb.StructuredQuery_FieldFilter_EQUAL, intVal(s.shard)))
	}
	nq, err := db.CountTasks(ctx, and(append(base(shardField),
		fieldFilter("state", pb.StructuredQuery_FieldFilter_IN, statesVal([]api.State{api.Pending, api.Queued})))...))
	if err != nil {
		return 0, 0, err
	}
	nr, err := db.CountTasks(ctx, and(append(base(slotField), fieldFilter("quota.slot", pb.StructuredQuery_FieldFilter_EQUAL, boolVal(true)),
		fieldFilter("state", pb.StructuredQuery_FieldFilter_IN, statesVal(task.ActiveStates)))...))
	if err != nil {
		return 0, 0, err
	}
	return int(nq), int(nr), nil
}
