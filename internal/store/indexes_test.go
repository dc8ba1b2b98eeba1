package store

import (
	"fmt"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

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
	qs["due schedules"] = s.dueScheduleQuery([]int{3, 4}, now, 10, &DueCursor{At: now, ID: "x"})
	qs["highest shard of the schedules"] = highestShardQuery(SchedulesCollection)
	qs["schedules"] = ScheduleFilter{}.query(10)
	qs["schedules of a tenant"] = ScheduleFilter{TenantID: "t"}.query(10)
	qs["schedules of tenants"] = ScheduleFilter{TenantIDs: []string{"a", "b"}}.query(10)
	return qs
}

// TestEveryQueryHasItsIndex: each query that needs a composite index finds
// exactly it in Indexes (strict mode's Rules.Serving, which also runs on
// every query of every test against the emulator), led by dueShard (but
// the runs listing's); the others use no field that FieldExemptions takes
// out of single-field indexing; and every index in Indexes serves some
// query.
func TestEveryQueryHasItsIndex(t *testing.T) {
	used := map[string]bool{}
	for _, ix := range Indexes {
		used[IndexName(ix)] = false
	}
	rules := DeclaredRules()
	for name, q := range everyQuery(t) {
		served, err := rules.Serving(q)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, ix := range served {
			used[ix] = true
		}
		// Due times grow steadily and are rewritten all the time; a
		// run's id is written once (runs are listed by it), a schedule's
		// tenant and id at its creation.
		if sh := ShapeOf(q); len(served) == 1 && sh.Equality[0] != "dueShard" && sh.Collection != RunsCollection && sh.Collection != SchedulesCollection {
			t.Errorf("%s: index %s does not lead with dueShard", name, served[0])
		}
	}
	for ix, ok := range used {
		if !ok {
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
		SchedulesCollection:   encodeFields(Schedule{}),
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
