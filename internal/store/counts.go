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
	return s.RunOutboxEntriesOf(ctx, runID, nil)
}

// RunOutboxEntriesOf is RunOutboxEntries restricted to the entries of
// tenants' tasks (all tenants when tenants is empty). It lists the run's
// tasks (List, the sharded listing) and reads their entries by name
// (task.EventID of each seq up to the task's), so that the outbox's runId
// needs no single-field index: a page of 500 tasks costs the listing's
// queries and one BatchGetDocuments per 300 entries.
func (s *Store) RunOutboxEntriesOf(ctx context.Context, runID string, tenants []string) ([]OutboxEntry, error) {
	var out []OutboxEntry
	f := ListFilter{RunID: runID, TenantIDs: tenants, PageSize: 500}
	for {
		tasks, next, err := s.List(ctx, f)
		if err != nil {
			return nil, wrap("run outbox entries", err)
		}
		var names []string
		for _, t := range tasks {
			for seq := int64(1); seq <= t.Seq; seq++ {
				names = append(names, s.outboxName(task.EventID(t.ID, seq)))
			}
		}
		for len(names) > 0 {
			chunk := names[:min(len(names), outboxReadChunk)]
			names = names[len(chunk):]
			docs, _, err := s.batchGet(ctx, chunk, nil)
			if err != nil {
				return nil, wrap("run outbox entries", err)
			}
			for _, name := range chunk {
				if d := docs[name]; d != nil {
					e, err := decodeOutbox(d)
					if err != nil {
						return nil, fmt.Errorf("store: run outbox entries: %w", err)
					}
					out = append(out, e)
				}
			}
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
