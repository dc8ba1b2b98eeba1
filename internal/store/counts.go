package store

import (
	"context"
	"io"
	"sort"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/servo-dev/servo/api"
	"golang.org/x/sync/errgroup"
)

// States lists every task state in lifecycle order, as CountByState reports them.
var States = []api.State{api.Pending, api.Queued, api.Running, api.Cancelling, api.Succeeded, api.Failed, api.Cancelled}

// CountByState counts the tasks matching f (State, PageSize and PageToken
// are ignored) in each state, with one count aggregation per state run in
// parallel: no task document is read.
func (s *Store) CountByState(ctx context.Context, f ListFilter) (map[api.State]int, error) {
	counts := make([]int64, len(States))
	g, gctx := errgroup.WithContext(ctx)
	for i, st := range States {
		g.Go(func() error {
			ff := f
			ff.State = st
			n, err := s.count(gctx, ff.countQuery())
			counts[i] = n
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, wrap("count by state", err)
	}
	out := make(map[api.State]int, len(States))
	for i, st := range States {
		out[st] = int(counts[i])
	}
	return out, nil
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
	stream, err := s.client.RunAggregationQuery(ctx, &pb.RunAggregationQueryRequest{
		Parent: s.docs,
		QueryType: &pb.RunAggregationQueryRequest_StructuredAggregationQuery{StructuredAggregationQuery: &pb.StructuredAggregationQuery{
			QueryType:    &pb.StructuredAggregationQuery_StructuredQuery{StructuredQuery: q},
			Aggregations: []*pb.StructuredAggregationQuery_Aggregation{{Alias: "n", Operator: &pb.StructuredAggregationQuery_Aggregation_Count_{Count: &pb.StructuredAggregationQuery_Aggregation_Count{}}}},
		}},
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		res, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return n, nil
			}
			return 0, err
		}
		if r := res.GetResult(); r != nil {
			n = r.GetAggregateFields()["n"].GetIntegerValue()
		}
	}
}

// RunOutboxEntries returns every outbox entry of a run's tasks, delivered or
// not, ordered by task id and then seq (each task's transitions in order).
func (s *Store) RunOutboxEntries(ctx context.Context, runID string) ([]OutboxEntry, error) {
	out, err := s.queryOutbox(ctx, outboxQuery("runId", runID))
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TaskID != out[j].TaskID {
			return out[i].TaskID < out[j].TaskID
		}
		return out[i].Seq < out[j].Seq
	})
	return out, wrap("run outbox entries", err)
}
