package store

import (
	"context"
	"fmt"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// reshardKeys are the collections that carry a due shard, each with the
// key its shard is the hash of (DueShardOf), as they are created.
var reshardKeys = []struct {
	coll string
	key  func(f map[string]*pb.Value) string
}{
	{TasksCollection, func(f map[string]*pb.Value) string { return f["taskId"].GetStringValue() }},
	{OutboxCollection, func(f map[string]*pb.Value) string { return f["taskId"].GetStringValue() }},
	{SchedulesCollection, func(f map[string]*pb.Value) string {
		return f["tenantId"].GetStringValue() + "\x00" + f["scheduleId"].GetStringValue()
	}},
	{RunsCollection, func(f map[string]*pb.Value) string { return f["runId"].GetStringValue() }},
}

// Reshard moves every task, outbox entry, schedule and run document in a
// due shard at or above the store's count (WithDueShards) into the shard
// its key hashes to among that count: what lowering due_shards needs,
// since the functions refuse to start while data sits in a shard they
// would not query (DueShardsInUse). Each update is conditional on the
// version of the document it read (one changed meanwhile is read again);
// a document moved is out of the query's range, so an interrupted run
// resumes by running again. Safe while Servo runs with the higher count
// (it queries both shards); a deployment already at the lower count
// refuses to start until it has run, then starts on its next try.
// Reads and writes only the documents it moves (plus one query of at most
// PageSize per page); DryRun counts them.
func (s *Store) Reshard(ctx context.Context, o MigrateOptions) (MigrateReport, error) {
	ctx = WithCause(ctx, "migration")
	if o.PageSize <= 0 {
		o.PageSize = 300
	}
	var rep MigrateReport
	for _, c := range reshardKeys {
		st := migrateStep{name: "reshard-" + c.coll, coll: c.coll, fix: func(s *Store, d *pb.Document, _ map[string]Run) map[string]*pb.Value {
			f := d.GetFields()
			sh, ok := f["dueShard"]
			key := c.key(f)
			if !ok || key == "" || int(sh.GetIntegerValue()) < s.shards {
				return nil // moved meanwhile, or not one to move
			}
			return map[string]*pb.Value{"dueShard": intVal(DueShardOf(key, s.shards))}
		}}
		p := MigrateProgress{Step: st.name}
		var after *pb.Document
		for {
			q := &pb.StructuredQuery{
				From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: c.coll}},
				Where: &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_FieldFilter{FieldFilter: &pb.StructuredQuery_FieldFilter{
					Field: fieldRef("dueShard"), Op: pb.StructuredQuery_FieldFilter_GREATER_THAN_OR_EQUAL, Value: intVal(s.shards),
				}}},
				OrderBy: []*pb.StructuredQuery_Order{
					{Field: fieldRef("dueShard"), Direction: pb.StructuredQuery_ASCENDING},
					{Field: fieldRef("__name__"), Direction: pb.StructuredQuery_ASCENDING},
				},
				Limit: wrapInt(o.PageSize),
			}
			if after != nil {
				// Past the page before (what it moved left the range;
				// what it could not move, or a dry run, stays behind).
				q.StartAt = &pb.Cursor{Values: []*pb.Value{after.GetFields()["dueShard"], refVal(after.GetName())}, Before: false}
			}
			var page []*pb.Document
			if err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error { page = append(page, d); return nil }); err != nil {
				rep.Steps = append(rep.Steps, p)
				return rep, fmt.Errorf("store: reshard %s: %w", c.coll, err)
			}
			for _, d := range page {
				p.Scanned++
				n, err := s.migrateDoc(ctx, st, d, nil, o.DryRun)
				if err != nil {
					rep.Steps = append(rep.Steps, p)
					return rep, fmt.Errorf("store: reshard %s: %w", c.coll, err)
				}
				p.Updated += n
			}
			if len(page) < o.PageSize {
				break
			}
			after = page[len(page)-1]
			if o.Progress != nil {
				o.Progress(p)
			}
		}
		p.Done = true
		if o.Progress != nil {
			o.Progress(p)
		}
		rep.Steps = append(rep.Steps, p)
	}
	return rep, nil
}
