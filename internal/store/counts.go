package store

import (
	"context"
	"fmt"
	"io"
	"sort"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"golang.org/x/sync/errgroup"
)

// States lists every task state in lifecycle order, as CountByState reports them.
var States = []api.State{api.Pending, api.Queued, api.Running, api.Cancelling, api.Succeeded, api.Failed, api.Cancelled}

// CountByState counts the tasks matching f (State, PageSize and PageToken
// are ignored) in each state, with one count aggregation per state run in
// parallel: no task document is read. A run's counts (f.RunID) take one
// aggregation per state and group of due shards (runCountQuery): a task's
// runId has no single-field index (when every task is a run of its own,
// its values grow at the task rate).
func (s *Store) CountByState(ctx context.Context, f ListFilter) (map[api.State]int, error) {
	groups := [][]int{nil}
	if f.RunID != "" {
		groups = shardGroups(s.shards, maxDisjunctions/max(len(f.TenantIDs), 1), 1)
	}
	counts := make([]int64, len(States)*len(groups))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardParallelism)
	for i, st := range States {
		for j, shards := range groups {
			g.Go(func() error {
				ff := f
				ff.State = st
				q := ff.countQuery()
				if shards != nil {
					q = ff.runCountQuery(shards)
				}
				n, err := s.count(gctx, q)
				counts[i*len(groups)+j] = n
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, wrap("count by state", err)
	}
	out := make(map[api.State]int, len(States))
	for i, st := range States {
		for j := range groups {
			out[st] += int(counts[i*len(groups)+j])
		}
	}
	return out, nil
}

// runCountQuery is CountByState's query for one state of a run over a
// group of due shards: the listing's query without its limit, ordered by
// taskId so that Firestore merges the listing's indexes (dueShard, runId,
// taskId), (dueShard, state, taskId) and the others of f's filters.
func (f ListFilter) runCountQuery(shards []int) *pb.StructuredQuery {
	q := f.groupQuery(shards, 1, "")
	q.Limit = nil
	return q
}

// countQuery is CountByState's query for one state: f's equality filters.
func (f ListFilter) countQuery() *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From:  []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where: and(f.filters()...),
	}
}

// count runs a count aggregation over q.
func (s *Store) count(ctx context.Context, q *pb.StructuredQuery) (int64, error) {
	return s.aggregate(ctx, q, countAgg())
}

// countAgg is the count aggregation, aliased "v" (aggregate).
func countAgg() *pb.StructuredAggregationQuery_Aggregation {
	return &pb.StructuredAggregationQuery_Aggregation{Alias: "v", Operator: &pb.StructuredAggregationQuery_Aggregation_Count_{Count: &pb.StructuredAggregationQuery_Aggregation_Count{}}}
}

// sum counts the documents q selects and sums each of fields over them
// (integers; a sum Firestore returns as a double, which it does when a sum
// overflows, is truncated): one aggregation a figure, since an
// aggregation that sums a field leaves out the documents without it, for
// every figure of the same request (the emulator's count of a counter
// shard that never held a running task was 0).
func (s *Store) sum(ctx context.Context, q *pb.StructuredQuery, fields []string) (int64, []int64, error) {
	n, err := s.count(ctx, q)
	if err != nil {
		return 0, nil, err
	}
	sums := make([]int64, len(fields))
	for i, f := range fields {
		sum := &pb.StructuredAggregationQuery_Aggregation{Alias: "v", Operator: &pb.StructuredAggregationQuery_Aggregation_Sum_{Sum: &pb.StructuredAggregationQuery_Aggregation_Sum{Field: fieldRef(f)}}}
		if sums[i], err = s.aggregate(ctx, q, sum); err != nil {
			return 0, nil, err
		}
	}
	return n, sums, nil
}

// aggregate runs one aggregation (alias "v") over q.
func (s *Store) aggregate(ctx context.Context, q *pb.StructuredQuery, agg *pb.StructuredAggregationQuery_Aggregation) (int64, error) {
	stream, err := s.client.RunAggregationQuery(ctx, &pb.RunAggregationQueryRequest{
		Parent: s.docs,
		QueryType: &pb.RunAggregationQueryRequest_StructuredAggregationQuery{StructuredAggregationQuery: &pb.StructuredAggregationQuery{
			QueryType:    &pb.StructuredAggregationQuery_StructuredQuery{StructuredQuery: q},
			Aggregations: []*pb.StructuredAggregationQuery_Aggregation{agg},
		}},
	})
	if err != nil {
		return 0, err
	}
	var v int64
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return 0, err
		}
		switch x := res.GetResult().GetAggregateFields()["v"].GetValueType().(type) {
		case *pb.Value_IntegerValue:
			v = x.IntegerValue
		case *pb.Value_DoubleValue:
			v = int64(x.DoubleValue)
		}
	}
}

// RunEvents returns the transition events of a run's tasks of tenants
// (all tenants when tenants is empty), ordered by task id and then seq. It
// lists the run's tasks (List, the sharded listing) and takes each one's
// events from its history (TaskEvents), so that a run's events cost the
// listing's queries and no other read; a task written before histories
// existed has its outbox entries read by name (task.EventID of each seq),
// one BatchGetDocuments per 300, so that the outbox's runId needs no index.
func (s *Store) RunEvents(ctx context.Context, runID string, tenants []string) ([]task.Transition, error) {
	var out []task.Transition
	f := ListFilter{RunID: runID, TenantIDs: tenants, PageSize: 500}
	for {
		tasks, next, err := s.List(ctx, f)
		if err != nil {
			return nil, wrap("run events", err)
		}
		legacy, err := s.entriesOf(ctx, tasks, historyStart)
		if err != nil {
			return nil, fmt.Errorf("store: run events: %w", err)
		}
		for _, e := range legacy {
			out = append(out, e.Transition)
		}
		for _, t := range tasks {
			out = append(out, t.Events()...)
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TaskID != out[j].TaskID {
			return out[i].TaskID < out[j].TaskID
		}
		return out[i].Seq < out[j].Seq
	})
	return out, nil
}
