package quota

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
)

// shardsDB serves counter shards in name order, honouring the query's
// start cursor (after a name) and limit, as Firestore does; it counts no
// task, so every shard with a count is drifted.
type shardsDB struct {
	docs    []*pb.Document
	rewrote []string
}

func (f *shardsDB) Query(_ context.Context, q *pb.StructuredQuery, each func(*pb.Document) error) error {
	after := ""
	if c := q.GetStartAt(); c != nil {
		if c.GetBefore() {
			return fmt.Errorf("want a start-after cursor")
		}
		after = c.GetValues()[0].GetReferenceValue()
	}
	n := 0
	for _, d := range f.docs {
		if d.GetName() <= after || (q.GetLimit() != nil && n >= int(q.GetLimit().GetValue())) {
			continue
		}
		n++
		if err := each(d); err != nil {
			return err
		}
	}
	return nil
}

func (f *shardsDB) CountTasks(context.Context, *pb.StructuredQuery_Filter) (int64, error) {
	return 0, nil
}

// Sum adds up the shards' fields as Firestore's sum aggregation does
// (every shard: the fake does not filter).
func (f *shardsDB) Sum(_ context.Context, _ *pb.StructuredQuery, fields []string) (int64, []int64, error) {
	sums := make([]int64, len(fields))
	for _, d := range f.docs {
		for i, name := range fields {
			sums[i] += d.GetFields()[name].GetIntegerValue()
		}
	}
	return int64(len(f.docs)), sums, nil
}

func (f *shardsDB) Commit(_ context.Context, writes []*pb.Write) error {
	for _, w := range writes {
		name := w.GetUpdate().GetName()
		f.rewrote = append(f.rewrote, name[strings.LastIndex(name, "-")+1:])
	}
	return nil
}

// A Repair pass recounts at most its batch of shards, the next ones in
// name order after the previous pass's, wrapping around at the end.
func TestRepairTakesTurns(t *testing.T) {
	c, err := NewCounters(&Policy{Tenants: map[string]Limits{"hot": {MaxRunning: 10}}}, "projects/p/databases/d/documents")
	if err != nil {
		t.Fatal(err)
	}
	c.repairBatch = 2
	db := &shardsDB{}
	for k := range 5 {
		db.docs = append(db.docs, &pb.Document{Name: c.shardName(KindTenant, "hot", k), Fields: map[string]*pb.Value{
			"kind": strVal("tenant"), "name": strVal("hot"), "shard": intVal(k), "running": intVal(1)}})
	}
	for pass, want := range [][]string{{"0", "1"}, {"2", "3"}, {"4"}, {"0", "1"}} {
		db.rewrote = nil
		reps, err := c.Repair(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(db.rewrote, want) || len(reps) != len(want) {
			t.Errorf("pass %d rewrote shards %v (%d repairs), want %v", pass, db.rewrote, len(reps), want)
		}
	}
}
