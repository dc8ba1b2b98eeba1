package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// shape is what a query asks of Firestore's indexes: its collection, the
// fields of its equality filters in order, then its inequality and order
// fields (without __name__).
type shape struct {
	collection string
	equality   []string
	ordered    []string
}

func shapeOf(q *pb.StructuredQuery) shape {
	sh := shape{collection: q.GetFrom()[0].GetCollectionId()}
	var walk func(f *pb.StructuredQuery_Filter)
	walk = func(f *pb.StructuredQuery_Filter) {
		if c := f.GetCompositeFilter(); c != nil {
			for _, sub := range c.GetFilters() {
				walk(sub)
			}
			return
		}
		ff := f.GetFieldFilter()
		switch ff.GetOp() {
		case pb.StructuredQuery_FieldFilter_EQUAL, pb.StructuredQuery_FieldFilter_IN:
			sh.equality = append(sh.equality, ff.GetField().GetFieldPath())
		default:
			sh.ordered = append(sh.ordered, ff.GetField().GetFieldPath())
		}
	}
	if q.GetWhere() != nil {
		walk(q.GetWhere())
	}
	for _, o := range q.GetOrderBy() {
		if p := o.GetField().GetFieldPath(); p != "__name__" && !slices.Contains(sh.ordered, p) {
			sh.ordered = append(sh.ordered, p)
		}
	}
	for i, p := range sh.ordered {
		for _, o := range q.GetOrderBy() {
			if o.GetField().GetFieldPath() == p && o.GetDirection() == pb.StructuredQuery_DESCENDING {
				sh.ordered[i] = p + " desc"
			}
		}
	}
	return sh
}

// merged are the indexes Firestore merges to serve sh when no one index
// does (index merging): for equality filters led by dueShard, one index
// (dueShard, filter, ordered…) per other filter.
func (sh shape) merged() []string {
	if len(sh.equality) < 3 || sh.equality[0] != "dueShard" {
		return nil
	}
	var out []string
	for _, e := range sh.equality[1:] {
		out = append(out, shape{collection: sh.collection, equality: []string{"dueShard", e}, ordered: sh.ordered}.index())
	}
	return out
}

// needsComposite: Firestore serves equality filters alone (merging
// single-field indexes, with __name__ order) and a single field's range or
// order; anything else needs a composite index.
func (sh shape) needsComposite() bool {
	return len(sh.ordered) > 1 || (len(sh.ordered) == 1 && len(sh.equality) > 0)
}

func (sh shape) index() string {
	return sh.collection + "(" + strings.Join(append(slices.Clone(sh.equality), sh.ordered...), ",") + ")"
}

// everyQuery builds every query the store runs, with representative
// arguments.
func everyQuery(t *testing.T) map[string]*pb.StructuredQuery {
	s := &Store{docs: "projects/p/databases/(default)/documents", shards: DefaultDueShards}
	now := time.Now()
	qs := map[string]*pb.StructuredQuery{}
	for d := range DueStates {
		q, err := s.dueQuery(d, []int{3}, now, 10, &DueCursor{At: now, ID: "task_x"})
		if err != nil {
			t.Fatal(err)
		}
		qs["due "+string(d)] = q
	}
	qs["undelivered"] = s.undeliveredQuery([]int{3}, now, 10)
	qs["undelivered count"] = s.undeliveredCountQuery([]int{3})
	qs["recent transitions"] = s.recentQuery([]int{3}, now, 10)
	qs["recent transitions group"] = s.recentQuery([]int{3, 4}, now, 10)
	qs["highest shard of the tasks"] = highestShardQuery(TasksCollection)
	qs["highest shard of the outbox"] = highestShardQuery(OutboxCollection)
	qs["attempts"] = attemptsQuery()
	full := ListFilter{TenantID: "t", RunID: "r", State: api.Running, Worker: "w"}
	for _, newest := range []bool{false, true} {
		f := full
		f.NewestFirst = newest
		qs[fmt.Sprintf("list newest=%v", newest)] = f.shardQuery(3, 10, "task_x")
		qs[fmt.Sprintf("list all newest=%v", newest)] = ListFilter{NewestFirst: newest}.shardQuery(3, 10, "task_x")
		for _, one := range []ListFilter{{TenantID: "t"}, {RunID: "r"}, {State: api.Queued}, {Worker: "w"}, {TenantIDs: []string{"a", "b"}}} {
			one.NewestFirst = newest
			qs[fmt.Sprintf("list %+v", one)] = one.shardQuery(0, 10, "")
		}
	}
	qs["count of a run"] = full.runCountQuery([]int{3, 4})
	qs["count of a tenant"] = ListFilter{TenantID: "t", State: api.Queued}.countQuery()
	qs["count of tenants"] = ListFilter{TenantIDs: []string{"a", "b"}, Worker: "w", State: api.Queued}.countQuery()
	qs["runs"] = RunFilter{After: "run_x"}.query([]int{3}, 10)
	qs["runs of a tenant"] = RunFilter{TenantID: "t", After: "run_x"}.query([]int{3}, 10)
	qs["runs of a group"] = RunFilter{After: "run_x"}.query([]int{3, 4}, 10)
	qs["runs of tenants"] = RunFilter{TenantIDs: []string{"a", "b"}, After: "run_x"}.query([]int{3, 4}, 10)
	qs["own runs"] = RunFilter{After: "run_x"}.ownRunQuery([]int{3}, 10)
	qs["own runs of a tenant"] = RunFilter{TenantID: "t", After: "run_x"}.ownRunQuery([]int{3}, 10)
	qs["own runs of a group"] = RunFilter{After: "run_x"}.ownRunQuery([]int{3, 4}, 10)
	qs["own runs of tenants"] = RunFilter{TenantIDs: []string{"a", "b"}, After: "run_x"}.ownRunQuery([]int{3, 4}, 10)
	qs["due group"], _ = s.dueQuery(DueLease, []int{3, 4}, now, 10, &DueCursor{At: now, ID: "task_x"})
	qs["undelivered group"] = s.undeliveredQuery([]int{3, 4}, now, 10)
	return qs
}

// TestEveryQueryHasItsIndex: each query that needs a composite index finds
// exactly it in Indexes, led by dueShard (but the runs listing's); the others use no field that
// FieldExemptions takes out of single-field indexing; and every index in
// Indexes serves some query.
func TestEveryQueryHasItsIndex(t *testing.T) {
	declared := map[string]bool{}
	for _, ix := range Indexes {
		var fs []string
		for _, f := range ix.Fields {
			if f.Order == "DESCENDING" {
				fs = append(fs, f.Path+" desc")
			} else {
				fs = append(fs, f.Path)
			}
		}
		declared[ix.Collection+"("+strings.Join(fs, ",")+")"] = false
	}
	exempt := map[string]bool{}
	for _, e := range FieldExemptions {
		exempt[e.Collection+"."+e.Path] = true
	}
	for name, q := range everyQuery(t) {
		sh := shapeOf(q)
		// Equality filters alone on a field without its single-field
		// index need a composite index too.
		usesExempt := slices.ContainsFunc(sh.equality, func(f string) bool { return exempt[sh.collection+"."+f] })
		if sh.needsComposite() || usesExempt {
			if _, ok := declared[sh.index()]; !ok {
				merged := sh.merged()
				for _, ix := range merged {
					if _, ok := declared[ix]; !ok {
						merged = nil
					}
				}
				if len(merged) == 0 {
					t.Errorf("%s needs the index %s, which store.Indexes lacks", name, sh.index())
					continue
				}
				for _, ix := range merged {
					declared[ix] = true
				}
				continue
			}
			declared[sh.index()] = true
			// Due times grow steadily and are rewritten all the time; a
			// run's id is written once (runs are listed by it).
			if sh.equality[0] != "dueShard" && sh.collection != RunsCollection {
				t.Errorf("%s: index %s does not lead with dueShard", name, sh.index())
			}
			continue
		}
		for _, f := range append(sh.equality, sh.ordered...) {
			if exempt[sh.collection+"."+f] {
				t.Errorf("%s filters or orders on %s.%s alone, which FieldExemptions exempts from indexing", name, sh.collection, f)
			}
		}
	}
	for ix, used := range declared {
		if !used {
			t.Errorf("index %s serves no query", ix)
		}
	}
}

// TestFieldExemptionsAreStoredFields: every exemption names a field the
// store writes (a typo would exempt nothing).
func TestFieldExemptionsAreStoredFields(t *testing.T) {
	stored := map[string]map[string]*pb.Value{
		TasksCollection:       encodeFields(task.Task{}),
		AttemptsCollection:    encodeFields(task.Attempt{}),
		OutboxCollection:      flatten(encodeFields(outboxDoc{}), "Transition"),
		RunsCollection:        encodeFields(Run{}),
		IdempotencyCollection: encodeFields(idemDoc{}),
	}
	for _, e := range FieldExemptions {
		if _, ok := stored[e.Collection][e.Path]; !ok {
			t.Errorf("exemption %s.%s: no such stored field", e.Collection, e.Path)
		}
	}
}

// listGroups: every due shard in exactly one group, at most
// MaxListQueries groups unless another "in" filter needs smaller ones, and
// no query over Firestore's 30 disjunctions.
func TestListGroups(t *testing.T) {
	for _, tc := range []struct{ shards, tenants, want int }{
		{1, 0, 1}, {16, 0, 16}, {40, 0, 16}, {480, 0, 16}, {40, 30, 40}, {40, 10, 16}, {100, 5, 17},
	} {
		groups := listGroups(tc.shards, tc.tenants)
		seen := map[int]int{}
		for _, g := range groups {
			if len(g) == 0 || len(g)*max(tc.tenants, 1) > maxDisjunctions {
				t.Errorf("%d shards, %d tenants: group %v", tc.shards, tc.tenants, g)
			}
			for _, sh := range g {
				seen[sh]++
			}
		}
		if len(groups) != tc.want || len(seen) != tc.shards {
			t.Errorf("%d shards, %d tenants: %d groups covering %d shards, want %d groups covering all", tc.shards, tc.tenants, len(groups), len(seen), tc.want)
		}
		for sh, n := range seen {
			if n != 1 || sh < 0 || sh >= tc.shards {
				t.Errorf("%d shards: shard %d in %d groups", tc.shards, sh, n)
			}
		}
	}
}
