package store

import (
	"context"
	"encoding/base64"
	"slices"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"golang.org/x/sync/errgroup"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func fieldRef(path string) *pb.StructuredQuery_FieldReference {
	return &pb.StructuredQuery_FieldReference{FieldPath: path}
}

func fieldFilter(path string, op pb.StructuredQuery_FieldFilter_Operator, v *pb.Value) *pb.StructuredQuery_Filter {
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_FieldFilter{FieldFilter: &pb.StructuredQuery_FieldFilter{Field: fieldRef(path), Op: op, Value: v}}}
}

func and(filters ...*pb.StructuredQuery_Filter) *pb.StructuredQuery_Filter {
	if len(filters) == 1 {
		return filters[0]
	}
	return &pb.StructuredQuery_Filter{FilterType: &pb.StructuredQuery_Filter_CompositeFilter{CompositeFilter: &pb.StructuredQuery_CompositeFilter{Op: pb.StructuredQuery_CompositeFilter_AND, Filters: filters}}}
}

func strVal(s string) *pb.Value { return &pb.Value{ValueType: &pb.Value_StringValue{StringValue: s}} }

func intVal(n int) *pb.Value {
	return &pb.Value{ValueType: &pb.Value_IntegerValue{IntegerValue: int64(n)}}
}

func statesVal(states []api.State) *pb.Value {
	vals := make([]*pb.Value, len(states))
	for i, st := range states {
		vals[i] = strVal(string(st))
	}
	return &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}}
}

func refVal(name string) *pb.Value {
	return &pb.Value{ValueType: &pb.Value_ReferenceValue{ReferenceValue: name}}
}

// ListFilter selects tasks for List; empty fields match everything.
type ListFilter struct {
	TenantID string
	RunID    string
	State    api.State
	// Worker is the task's worker name.
	Worker string
	// NewestFirst lists in reverse creation order.
	NewestFirst bool
	// PageSize defaults to 50 and is capped at 500.
	PageSize int
	// PageToken continues a previous listing.
	PageToken string
	// TenantIDs, when set, lists only tasks of these tenants (an "in"
	// filter of at most 30 values, in the query).
	TenantIDs []string
}

// filters are f's equality filters.
func (f ListFilter) filters() []*pb.StructuredQuery_Filter {
	var filters []*pb.StructuredQuery_Filter
	for _, c := range []struct{ field, v string }{{"tenantId", f.TenantID}, {"runId", f.RunID}, {"state", string(f.State)}, {"worker", f.Worker}} {
		if c.v != "" {
			filters = append(filters, fieldFilter(c.field, pb.StructuredQuery_FieldFilter_EQUAL, strVal(c.v)))
		}
	}
	if len(f.TenantIDs) > 0 {
		filters = append(filters, fieldFilter("tenantId", pb.StructuredQuery_FieldFilter_IN, stringsVal(f.TenantIDs)))
	}
	return filters
}

// shardQuery is List's query of one list shard (the due shard, fixed per
// task): f's equality filters and the shard, in task id order (creation
// order), after the task id after ("" from the start). It is served by the
// composite indexes (dueShard, [field,] taskId) of Indexes, merged by
// Firestore when f has several filters: each index range takes the new
// tasks of one shard, never all of them.
func (f ListFilter) shardQuery(shard, limit int, after string) *pb.StructuredQuery {
	return f.groupQuery([]int{shard}, limit, after)
}

// MaxListQueries is the most queries a List page starts with: with more
// due shards than this, each query takes a group of shards (an "in"
// filter, which Firestore serves from the same indexes and merges in
// order), so that more shards spread the indexes' writes further without
// making a listing dearer.
const MaxListQueries = 16

// maxDisjunctions is the most disjunctions Firestore takes in one query
// (the product of the sizes of its "in" filters).
const maxDisjunctions = 30

// listGroups splits the due shards [0, n) into at most MaxListQueries
// groups (shard i in group i mod the number of groups), or more when
// another "in" filter of ins values (ListFilter.TenantIDs) leaves room for
// fewer shards per query.
func listGroups(n, ins int) [][]int {
	return shardGroups(n, maxDisjunctions/max(ins, 1), min(n, MaxListQueries))
}

// shardGroups splits the due shards [0, n) into the fewest groups of at
// most per shards each, and at least least groups: shard i goes to group
// i mod the number of groups, so that the groups differ by one shard at
// most.
func shardGroups(n, per, least int) [][]int {
	per = max(per, 1)
	groups := make([][]int, max(least, (n+per-1)/per, 1))
	for i := range n {
		groups[i%len(groups)] = append(groups[i%len(groups)], i)
	}
	return groups
}

// shardFilter selects the tasks (or outbox entries) of a group of due
// shards: an equality for one shard, else an "in" filter, which Firestore
// serves from the same indexes as one disjunction per shard, merged in
// the query's order.
func shardFilter(shards []int) *pb.StructuredQuery_Filter {
	if len(shards) == 1 {
		return fieldFilter("dueShard", pb.StructuredQuery_FieldFilter_EQUAL, intVal(shards[0]))
	}
	vals := make([]*pb.Value, len(shards))
	for i, sh := range shards {
		vals[i] = intVal(sh)
	}
	return fieldFilter("dueShard", pb.StructuredQuery_FieldFilter_IN, &pb.Value{ValueType: &pb.Value_ArrayValue{ArrayValue: &pb.ArrayValue{Values: vals}}})
}

// groupQuery is shardQuery over a group of shards.
func (f ListFilter) groupQuery(shards []int, limit int, after string) *pb.StructuredQuery {
	shard := shardFilter(shards)
	dir := pb.StructuredQuery_ASCENDING
	if f.NewestFirst {
		dir = pb.StructuredQuery_DESCENDING
	}
	q := &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: TasksCollection}},
		Where:   and(append([]*pb.StructuredQuery_Filter{shard}, f.filters()...)...),
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("taskId"), Direction: dir}},
		Limit:   wrapInt(limit),
	}
	if after != "" {
		q.StartAt = &pb.Cursor{Values: []*pb.Value{strVal(after)}, Before: false}
	}
	return q
}

// listShard is one shard's part of a List page.
type listShard struct {
	tasks []task.Task
	done  bool // the shard has no task after the last of tasks
}

// List returns tasks matching f in id order (creation order; newest first
// with f.NewestFirst), and the token of the next page ("" on the last
// page). Pages are stable: a task created during an oldest-first listing
// appears after the ones already returned. The page token is the last
// task id returned, opaque to callers.
//
// Each due shard is queried on its own and the answers are merged: a first
// round asks every shard for a little more than its share of the page
// (listFirst); while the page is not yet certain (a shard stopped before
// the page's end could still hold earlier tasks), the shard that stopped
// first is asked for more. A page of n tasks costs G = min(DueShards(),
// MaxListQueries) queries plus a few (listGroups), and reads at most
// n + 1 + 3×G documents.
func (s *Store) List(ctx context.Context, f ListFilter) ([]task.Task, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 50
	}
	size = min(size, 500)
	after := ""
	if f.PageToken != "" {
		raw, err := base64.RawURLEncoding.DecodeString(f.PageToken)
		if err != nil || !task.ValidID(string(raw), task.TaskIDPrefix) {
			return nil, "", ErrInvalidPageToken
		}
		after = string(raw)
	}
	// before reports whether task id a comes before b in the listing.
	before := func(a, b string) bool {
		if f.NewestFirst {
			return a > b
		}
		return a < b
	}
	groups := listGroups(s.shards, len(f.TenantIDs))
	shards := make([]listShard, len(groups))
	fetch := func(which []int, limit int) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(shardParallelism)
		for _, i := range which {
			from := after
			if n := len(shards[i].tasks); n > 0 {
				from = shards[i].tasks[n-1].ID
			}
			g.Go(func() error {
				got, err := s.queryTasks(gctx, f.groupQuery(groups[i], limit, from))
				shards[i].tasks = append(shards[i].tasks, got...)
				shards[i].done = len(got) < limit
				return err
			})
		}
		return g.Wait()
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	if err := fetch(all, listFirst(size, len(groups))); err != nil {
		return nil, "", wrap("list", err)
	}
	var page []task.Task
	for {
		// frontier: the shard whose last task comes first among the
		// shards not done; every task up to that one is certain.
		frontier := -1
		for i, sh := range shards {
			if !sh.done && (frontier < 0 || before(sh.tasks[len(sh.tasks)-1].ID, shards[frontier].tasks[len(shards[frontier].tasks)-1].ID)) {
				frontier = i
			}
		}
		page = page[:0]
		for _, sh := range shards {
			for _, t := range sh.tasks {
				if frontier < 0 || !before(shards[frontier].tasks[len(shards[frontier].tasks)-1].ID, t.ID) {
					page = append(page, t)
				}
			}
		}
		if frontier < 0 || len(page) > size {
			break
		}
		if err := fetch([]int{frontier}, size+1-len(page)+2); err != nil {
			return nil, "", wrap("list", err)
		}
	}
	slices.SortFunc(page, func(a, b task.Task) int {
		if before(a.ID, b.ID) {
			return -1
		}
		return 1
	})
	next := ""
	if len(page) > size {
		page = page[:size]
		next = base64.RawURLEncoding.EncodeToString([]byte(page[size-1].ID))
	}
	return page, next, nil
}

// listFirst is how many tasks List's first round asks of each of n shards
// for a page of size: the shard's share of size+1, and 2 more, so that
// the page is usually certain after one round.
func listFirst(size, n int) int { return (size+1+n-1)/n + 2 }
