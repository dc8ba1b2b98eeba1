package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/task"
)

// createRuns submits one task per run, n runs a millisecond apart for
// each tenant in turn, and returns each tenant's run ids, oldest first.
func createRuns(t *testing.T, s *Store, n int, tenants ...string) map[string][]string {
	t.Helper()
	start := time.Now().UTC().Add(-time.Hour)
	var subs []task.Task
	for i := range n {
		at := start.Add(time.Duration(i) * time.Millisecond)
		for _, tenant := range tenants {
			subs = append(subs, task.Task{ID: task.NewTaskID(at), RunID: task.NewRunID(at), TenantID: tenant, WorkspaceID: "ws",
				TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}})
		}
	}
	runs := map[string][]string{}
	for _, r := range s.CreateMany(context.Background(), subs, start, false) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		runs[r.Task.TenantID] = append(runs[r.Task.TenantID], r.Task.RunID)
	}
	for _, ids := range runs {
		slices.Sort(ids)
	}
	return runs
}

// createOwnRuns submits n tasks for each tenant in turn, each in a run of
// its own that Servo named (task.Task.OwnRun), and returns each tenant's
// run ids.
func createOwnRuns(t *testing.T, s *Store, n int, tenants ...string) map[string][]string {
	t.Helper()
	start := time.Now().UTC().Add(-30 * time.Minute)
	runs := map[string][]string{}
	for i := range n {
		at := start.Add(time.Duration(i) * time.Millisecond)
		for _, tenant := range tenants {
			tk, _, err := s.Create(context.Background(), task.Task{ID: task.NewTaskID(at), RunID: task.NewRunID(at), OwnRun: true, TenantID: tenant, WorkspaceID: "ws",
				TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}}, at)
			if err != nil {
				t.Fatal(err)
			}
			runs[tenant] = append(runs[tenant], tk.RunID)
		}
	}
	return runs
}

// countDocs counts the documents of a top-level collection.
func countDocs(t *testing.T, s *Store, coll string) int {
	t.Helper()
	n := 0
	q := &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: coll}}}
	if err := s.runQuery(context.Background(), s.docs, q, func(*pb.Document) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// listAllRuns pages through ListRuns with pages of size and returns the
// run ids in the order listed, and the queries each page cost.
func listAllRuns(t *testing.T, s *Store, rc *RPCCounter, f RunFilter, size int) (ids []string, perPage []int) {
	t.Helper()
	f.PageSize = size
	for page := 0; page < 100; page++ {
		rc.Reset()
		runs, next, err := s.ListRuns(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		perPage = append(perPage, rc.Counts()["RunQuery"])
		for _, r := range runs {
			ids = append(ids, r.RunID)
		}
		if next == "" {
			return ids, perPage
		}
		f.After = next
	}
	t.Fatal("more than 100 pages")
	return nil, nil
}

// TestListRunsShardedNewestFirst: runs are named with a hash prefix and
// listed, from the 384 default shards, newest first through one query
// per group of shards merged on read: every run once, in order, over
// pages, one query per group a page (13 groups of up to 30 shards for one
// tenant or all; 26 of up to 15 for two tenants, 30 disjunctions a query).
func TestListRunsShardedNewestFirst(t *testing.T) {
	rc := NewRPCCounter()
	s, err := New(context.Background(), emulatortest.ProjectID(t), WithRPCCounter(rc))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := createRuns(t, s, 40, "acme", "other")
	// Runs that are a task's own (a submit without a runId): no run
	// document; the listing reads them from their tasks, merged with the
	// others.
	own := createOwnRuns(t, s, 25, "acme", "other")
	if n := countDocs(t, s, RunsCollection); n != 80 {
		t.Fatalf("%d run documents, want 80: a task's own run has none", n)
	}
	for tenant, ids := range own {
		runs[tenant] = append(runs[tenant], ids...)
	}
	newest := func(ids ...[]string) []string {
		all := slices.Concat(ids...)
		slices.Sort(all)
		slices.Reverse(all)
		return all
	}
	for _, id := range runs["acme"][:3] {
		if name := runDocID("acme", id); strings.HasPrefix(name, id) || !strings.HasSuffix(name, legacyRunDocID("acme", id)) {
			t.Fatalf("run %s named %s: want a hash prefix before the id", id, name)
		}
	}
	tests := []struct {
		name    string
		f       RunFilter
		want    []string
		queries int
	}{
		{"one tenant", RunFilter{TenantID: "acme"}, newest(runs["acme"]), 26},
		{"two tenants", RunFilter{TenantIDs: []string{"acme", "other"}}, newest(runs["acme"], runs["other"]), 52},
		{"all tenants", RunFilter{}, newest(runs["acme"], runs["other"]), 26},
	}
	for _, tt := range tests {
		for _, size := range []int{7, 100} {
			t.Run(fmt.Sprintf("%s, pages of %d", tt.name, size), func(t *testing.T) {
				got, perPage := listAllRuns(t, s, rc, tt.f, size)
				if !slices.Equal(got, tt.want) {
					i := 0
					for i < min(len(got), len(tt.want)) && got[i] == tt.want[i] {
						i++
					}
					t.Fatalf("listed %d runs, want the %d newest first; they differ from position %d", len(got), len(tt.want), i)
				}
				for i, n := range perPage {
					if n != tt.queries {
						t.Fatalf("page %d cost %d queries, want %d", i, n, tt.queries)
					}
				}
			})
		}
	}
}

// TestMigrateRunsToHashedNames: runs stored under schema 3's sequential
// names (runs/{runId}.{tenantKey}, without a due shard) and under the
// older runs/{runId} are not listed by the sharded listing until schema
// 4's step moved them; one whose new name a submit already wrote loses
// only its old document. Afterwards every run is listed once, no legacy
// name is left, and a second run of Migrate does nothing.
func TestMigrateRunsToHashedNames(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := createRuns(t, s, 5, "acme")["acme"]
	legacy := func(id string) string { return s.docs + "/" + RunsCollection + "/" + legacyRunDocID("acme", id) }
	oldest := func(id string) string { return s.docs + "/" + RunsCollection + "/" + id }
	// ids[0], ids[1]: schema 3's name; ids[2]: runs/{runId}; ids[3]: both
	// schema 3's name and the new one (a submit after the deploy).
	olds := map[string]string{ids[0]: legacy(ids[0]), ids[1]: legacy(ids[1]), ids[2]: oldest(ids[2]), ids[3]: legacy(ids[3])}
	for id, to := range olds {
		from := s.tenantRunName("acme", id)
		docs, _, err := s.batchGet(ctx, []string{from}, nil)
		if err != nil || docs[from] == nil {
			t.Fatalf("read %s: %v", from, err)
		}
		f := docs[from].GetFields()
		delete(f, "dueShard")
		writes := []*pb.Write{{Operation: &pb.Write_Update{Update: &pb.Document{Name: to, Fields: f}}}}
		if id != ids[3] {
			writes = append(writes, &pb.Write{Operation: &pb.Write_Delete{Delete: from}})
		}
		if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), Schema{Version: SchemaVersion - 1}, false)}}); err != nil {
		t.Fatal(err)
	}
	listed := func() []string {
		runs, _, err := s.ListRuns(ctx, RunFilter{TenantID: "acme", PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.RunID)
		}
		slices.Sort(out)
		return out
	}
	if got := listed(); !slices.Equal(got, []string{ids[3], ids[4]}) {
		t.Fatalf("before the migration: listed %v, want only the runs of schema 4's names %v", got, ids[3:])
	}
	rep, err := s.Migrate(ctx, MigrateOptions{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 1 || rep.Steps[0].Step != "runs" || rep.Steps[0].Scanned != 4 || rep.Steps[0].Updated != 4 {
		t.Fatalf("migration %+v, want the runs step: 4 legacy documents read, 4 moved", rep)
	}
	if got := listed(); !slices.Equal(got, ids) {
		t.Fatalf("after the migration: listed %v, want %v", got, ids)
	}
	var names []string
	for _, name := range olds {
		names = append(names, name)
	}
	if docs, _, err := s.batchGet(ctx, names, nil); err != nil || len(docs) != 0 {
		t.Fatalf("%d run documents left under legacy names (%v)", len(docs), err)
	}
	for _, id := range ids {
		name := s.tenantRunName("acme", id)
		docs, _, err := s.batchGet(ctx, []string{name}, nil)
		if err != nil || docs[name] == nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if sh := docs[name].GetFields()["dueShard"].GetIntegerValue(); int(sh) != DueShardOf(id, s.shards) {
			t.Fatalf("run %s in shard %d, want %d", id, sh, DueShardOf(id, s.shards))
		}
	}
	if again, err := s.Migrate(ctx, MigrateOptions{}); err != nil || len(again.Steps) != 0 {
		t.Fatalf("rerun: %+v %v, want nothing to do", again, err)
	}
}

// TestRunCountsAndEventsAcrossShards: a run's counts (CountByState) and
// events (RunEvents) no longer filter on a task's or an entry's
// runId alone (both exempt from single-field indexing): the counts take
// one aggregation per state and group of the 384 due shards, the events
// are read by name through the run's tasks; both find every task of the
// run, in whichever shard, and only the tenants asked for.
func TestRunCountsAndEventsAcrossShards(t *testing.T) {
	ctx := context.Background()
	rc := NewRPCCounter()
	s, err := New(ctx, emulatortest.ProjectID(t), WithRPCCounter(rc))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC()
	run, otherRun := task.NewRunID(now), task.NewRunID(now.Add(time.Millisecond))
	var subs []task.Task
	add := func(n int, runID, tenant string) {
		for range n {
			subs = append(subs, task.Task{ID: task.NewTaskID(now), RunID: runID, TenantID: tenant, WorkspaceID: "ws",
				TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}})
		}
	}
	add(60, run, "acme")
	add(10, run, "other")
	add(20, otherRun, "acme")
	shards := map[int]bool{}
	queued := 0
	for _, r := range s.CreateMany(ctx, subs, now, false) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Task.RunID == run {
			shards[r.Task.DueShard] = true
		}
		if r.Task.RunID == run && r.Task.TenantID == "acme" && queued < 15 {
			queued++
			if _, err := s.Apply(ctx, r.Task.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(shards) < 30 {
		t.Fatalf("the run's tasks fell in %d shards only", len(shards))
	}
	tests := []struct {
		name                string
		f                   ListFilter
		pending, queued     int
		aggregations, total int // events: one per task created, one per enqueue
	}{
		{"one tenant", ListFilter{RunID: run, TenantID: "acme"}, 45, 15, 7 * 13, 75},
		{"two tenants", ListFilter{RunID: run, TenantIDs: []string{"acme", "other"}}, 55, 15, 7 * 26, 85},
		{"all tenants", ListFilter{RunID: run}, 55, 15, 7 * 13, 85},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc.Reset()
			counts, err := s.CountByState(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if counts[api.Pending] != tt.pending || counts[api.Queued] != tt.queued || counts[api.Running] != 0 {
				t.Fatalf("counts %v, want %d PENDING and %d QUEUED", counts, tt.pending, tt.queued)
			}
			if n := rc.Counts()["RunAggregationQuery"]; n != tt.aggregations {
				t.Fatalf("%d aggregations, want %d (a state and a group of shards each)", n, tt.aggregations)
			}
			tenants := tt.f.TenantIDs
			if tt.f.TenantID != "" {
				tenants = []string{tt.f.TenantID}
			}
			es, err := s.RunEvents(ctx, run, tenants)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != tt.total {
				t.Fatalf("%d events of the run, want %d", len(es), tt.total)
			}
			for i, e := range es {
				if e.RunID != run || (len(tenants) > 0 && !slices.Contains(tenants, e.TenantID)) {
					t.Fatalf("event %s of run %s, tenant %s", e.EventID, e.RunID, e.TenantID)
				}
				if i > 0 && (es[i-1].TaskID > e.TaskID || es[i-1].TaskID == e.TaskID && es[i-1].Seq >= e.Seq) {
					t.Fatalf("events out of order at %d", i)
				}
			}
		})
	}
}
