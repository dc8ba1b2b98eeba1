package store

import (
	"context"
	"slices"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"github.com/oklog/ulid/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"golang.org/x/sync/errgroup"
)

// Duties lists the sweeper's duties in the order the dashboard shows them.
var Duties = []Due{DueDeadline, DueCancel, DueLease, DueDispatch}

// shardParallelism bounds the concurrent per-shard queries of the backlog
// reads below.
const shardParallelism = 16

// DueBacklog counts, for each duty, the tasks due at now (what the next
// sweeper pass has to handle), with one count aggregation per duty and
// group of shards (DueGroups) served by the duty's index: no task
// document is read. It costs one aggregation per duty and group.
func (s *Store) DueBacklog(ctx context.Context, now time.Time) (map[Due]int64, error) {
	counts := make([][]int64, len(Duties))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardParallelism)
	for i, d := range Duties {
		groups := s.DueGroups(d)
		counts[i] = make([]int64, len(groups))
		for j, shards := range groups {
			g.Go(func() error {
				q, err := s.dueQuery(d, shards, now, 1, nil)
				if err != nil {
					return err
				}
				q.Select, q.Limit, q.OrderBy = nil, nil, nil
				n, err := s.count(gctx, q)
				counts[i][j] = n
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, wrap("due backlog", err)
	}
	out := make(map[Due]int64, len(Duties))
	for i, d := range Duties {
		for _, n := range counts[i] {
			out[d] += n
		}
	}
	return out, nil
}

// OutboxBacklog counts the outbox documents not yet delivered (one per
// commit and task: a submit's two events are one) and returns
// the creation time of the oldest among those due first in each group of
// shards (nil when there is none): one count aggregation and one
// single-entry query per group (OutboxGroups), served by the re-drive's
// index.
func (s *Store) OutboxBacklog(ctx context.Context) (n int64, oldest *time.Time, err error) {
	groups := s.OutboxGroups()
	counts := make([]int64, len(groups))
	firsts := make([]*time.Time, len(groups))
	far := time.Now().Add(100 * 365 * 24 * time.Hour)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardParallelism)
	for i, shards := range groups {
		g.Go(func() error {
			c, err := s.count(gctx, s.undeliveredCountQuery(shards))
			counts[i] = c
			return err
		})
		g.Go(func() error {
			es, err := s.queryOutbox(gctx, s.undeliveredQuery(shards, far, 1))
			if len(es) > 0 {
				firsts[i] = &es[0].CreatedAt
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, wrap("outbox backlog", err)
	}
	for i := range groups {
		n += counts[i]
		if f := firsts[i]; f != nil && (oldest == nil || f.Before(*oldest)) {
			oldest = f
		}
	}
	return n, oldest, nil
}

// TransitionStamp is when a transition happened and to which state.
type TransitionStamp struct {
	To         api.State `firestore:"to"`
	OccurredAt time.Time `firestore:"occurredAt"`
}

// RecentTransitions returns the transitions that occurred at or after
// since, as far as the histories of the tasks created from RecentLookback
// before since keep them (task.Task.History), in no particular order. It
// reads at most limit tasks, newest first, spread over the listing's
// groups of shards (index dueShard, taskId descending: a task id is a
// ULID, so the ids from a time on are the tasks created since), projected
// to their history; truncated reports that a group held more.
// Transitions of older tasks (a task running for hours) are not counted.
func (s *Store) RecentTransitions(ctx context.Context, since time.Time, limit int) (out []TransitionStamp, truncated bool, err error) {
	groups := listGroups(s.shards, 0)
	per := max(1, limit/len(groups))
	parts := make([][]TransitionStamp, len(groups))
	full := make([]bool, len(groups))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shardParallelism)
	for i := range parts {
		g.Go(func() error {
			n := 0
			err := s.runQuery(gctx, s.docs, s.recentQuery(groups[i], since.Add(-RecentLookback), per), func(d *pb.Document) error {
				n++
				var h struct {
					History []stepDoc `firestore:"history"`
				}
				if err := decodeFields(d.GetFields(), &h); err != nil {
					return err
				}
				for _, st := range h.History {
					if !st.OccurredAt.Before(since) {
						parts[i] = append(parts[i], TransitionStamp{To: st.To, OccurredAt: st.OccurredAt})
					}
				}
				return nil
			})
			full[i] = n >= per
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, wrap("recent transitions", err)
	}
	return slices.Concat(parts...), slices.Contains(full, true), nil
}

// RecentLookback is how long before RecentTransitions' since a task may
// have been created and still be counted.
const RecentLookback = time.Hour

// recentQuery is RecentTransitions' query of a group of shards' tasks
// created at or after from, newest first, projected to their history.
func (s *Store) recentQuery(shards []int, from time.Time, limit int) *pb.StructuredQuery {
	var first ulid.ULID
	if err := first.SetTime(ulid.Timestamp(from)); err != nil {
		first = ulid.ULID{}
	}
	return &pb.StructuredQuery{
		Select: &pb.StructuredQuery_Projection{Fields: []*pb.StructuredQuery_FieldReference{fieldRef("history")}},
		From:   []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where: and(shardFilter(shards),
			fieldFilter("taskId", pb.StructuredQuery_FieldFilter_GREATER_THAN_OR_EQUAL, strVal(task.TaskIDPrefix+first.String()))),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("taskId"), Direction: pb.StructuredQuery_DESCENDING}},
		Limit:   wrapInt(limit),
	}
}

// undeliveredCountQuery selects a group of shards' undelivered outbox entries
// (OutboxBacklog's count).
func (s *Store) undeliveredCountQuery(shards []int) *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: OutboxCollection}},
		Where: and(shardFilter(shards),
			fieldFilter("delivered", pb.StructuredQuery_FieldFilter_EQUAL, &pb.Value{ValueType: &pb.Value_BooleanValue{BooleanValue: false}})),
	}
}
