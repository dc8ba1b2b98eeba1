package store

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/task"
)

// asEarlierLayout rewrites a document as the layouts before schema 1 wrote
// it: the same document without the fields those layouts did not have.
func asEarlierLayout(t *testing.T, s *Store, name string, drop ...string) {
	t.Helper()
	rewriteDoc(t, s, name, nil, drop...)
}

// rewriteDoc rewrites a document with the fields of set changed and those
// of drop removed, the others as they are.
func rewriteDoc(t *testing.T, s *Store, name string, set map[string]*pb.Value, drop ...string) {
	t.Helper()
	docs, _, err := s.batchGet(context.Background(), []string{name}, nil)
	if err != nil || docs[name] == nil {
		t.Fatalf("read %s: %v", name, err)
	}
	f := docs[name].GetFields()
	maps.Copy(f, set)
	for _, k := range drop {
		delete(f, k)
	}
	w := &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: name, Fields: f}}}
	if _, err := s.client.Commit(context.Background(), &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}}); err != nil {
		t.Fatal(err)
	}
}

// asSchema1Name moves a task and its attempt records to the name schema 1
// and earlier gave them (tasks/{taskId}, what today's main writes), fields
// unchanged.
func asSchema1Name(t *testing.T, s *Store, id string) {
	t.Helper()
	ctx := context.Background()
	from, to := s.taskName(id), s.legacyTaskName(id)
	docs, _, err := s.batchGet(ctx, []string{from}, nil)
	if err != nil || docs[from] == nil {
		t.Fatalf("read %s: %v", from, err)
	}
	moved := []*pb.Document{docs[from]}
	err = s.runQuery(ctx, from, &pb.StructuredQuery{From: []*pb.StructuredQuery_CollectionSelector{{CollectionId: AttemptsCollection}}},
		func(a *pb.Document) error { moved = append(moved, a); return nil })
	if err != nil {
		t.Fatal(err)
	}
	var writes []*pb.Write
	for _, d := range moved {
		writes = append(writes, &pb.Write{Operation: &pb.Write_Update{Update: &pb.Document{Name: to + strings.TrimPrefix(d.GetName(), from), Fields: d.GetFields()}}},
			&pb.Write{Operation: &pb.Write_Delete{Delete: d.GetName()}})
	}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: writes}); err != nil {
		t.Fatal(err)
	}
}

func deleteDoc(t *testing.T, s *Store, name string) {
	t.Helper()
	w := &pb.Write{Operation: &pb.Write_Delete{Delete: name}}
	if _, err := s.client.Commit(context.Background(), &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{w}}); err != nil {
		t.Fatal(err)
	}
}

// dueEverywhere returns the ids of tasks due for d in any group of shards.
func dueEverywhere(t *testing.T, s *Store, d Due) []string {
	t.Helper()
	var ids []string
	for _, sh := range s.DueGroups(d) {
		ts, err := s.DueTasks(context.Background(), d, sh, time.Now().UTC(), 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			ids = append(ids, tk.ID)
		}
	}
	return ids
}

func undeliveredEverywhere(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	for _, sh := range s.OutboxGroups() {
		es, err := s.Undelivered(context.Background(), sh, time.Now().UTC(), 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			ids = append(ids, e.EventID)
		}
	}
	return ids
}

// Data written by the earlier layouts (issue 38: tasks without dueShard
// were never swept, old undelivered outbox entries never re-sent, runs
// without their document never listed) is, after Migrate, listed, swept,
// completable and its events re-driven; a rerun changes nothing, a dry run
// writes nothing, and a build older than the schema refuses it.
func TestMigrateEarlierLayouts(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := task.NewRunID(time.Now())
	timing := api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000}
	started := func(at time.Time) task.Task {
		tk := task.Task{ID: task.NewTaskID(at), RunID: run, TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: json.RawMessage(`{}`), Timing: timing, Retry: api.RetryPolicy{MaxAttempts: 1}}
		tk, _, err := s.Create(ctx, tk, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range []task.Event{{Kind: task.EventEnqueued, Attempt: 1, Now: at}, {Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: at}} {
			if _, err := s.Apply(ctx, tk.ID, ev); err != nil {
				t.Fatal(err)
			}
		}
		return tk
	}
	zombie := started(time.Now().Add(-time.Hour).UTC()) // its lease ran out long ago
	live := started(time.Now().UTC())
	var entries []OutboxEntry
	for _, tk := range []task.Task{zombie, live} {
		es, err := s.OutboxEntries(ctx, tk.ID)
		if err != nil || len(es) == 0 {
			t.Fatalf("outbox: %v %v", es, err)
		}
		entries = append(entries, es...)
	}
	for _, tk := range []task.Task{zombie, live} {
		asSchema1Name(t, s, tk.ID)
		asEarlierLayout(t, s, s.legacyTaskName(tk.ID), "dueShard")
	}
	for _, e := range entries {
		asEarlierLayout(t, s, s.outboxName(e.EventID), "dueShard", "nextTryAt", "tries")
	}
	deleteDoc(t, s, s.tenantRunName("acme", run))

	listed := func() bool {
		runs, _, err := s.ListRuns(ctx, RunFilter{TenantID: "acme", PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(runs, func(r Run) bool { return r.RunID == run })
	}
	// What the earlier layouts' data looks like to this build.
	if slices.Contains(dueEverywhere(t, s, DueLease), zombie.ID) || listed() || len(undeliveredEverywhere(t, s)) != 0 {
		t.Fatal("the fixture does not reproduce the earlier layouts' gaps")
	}

	dry, err := s.Migrate(ctx, MigrateOptions{DryRun: true, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if dry.From != 0 || dry.To != SchemaVersion || dry.Steps[0].Updated != 3 || dry.Steps[1].Updated != len(entries) || dry.Steps[2].Updated != 2 {
		t.Fatalf("dry run %+v, want 2 tasks + 1 run, %d outbox entries and 2 tasks renamed", dry, len(entries))
	}
	if sc, _ := s.ReadSchema(ctx); sc.Version != 0 || sc.Step != "" || listed() {
		t.Fatalf("the dry run wrote: schema %+v", sc)
	}

	var progress []MigrateProgress
	rep, err := s.Migrate(ctx, MigrateOptions{PageSize: 1, Progress: func(p MigrateProgress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps[0].Updated != 3 || rep.Steps[1].Updated != len(entries) || rep.Steps[2].Updated != 2 || len(progress) < 3 {
		t.Fatalf("migrate %+v, progress %+v", rep, progress)
	}
	if sc, _ := s.ReadSchema(ctx); sc.Version != SchemaVersion || sc.Step != "" {
		t.Fatalf("schema %+v after the migration", sc)
	}

	// Listed, swept, completable, its events re-driven.
	if !listed() {
		t.Error("the run is not listed")
	}
	if !slices.Contains(dueEverywhere(t, s, DueLease), zombie.ID) {
		t.Fatal("the zombie is not found by the sweeper's lease query")
	}
	r, err := s.Apply(ctx, zombie.ID, task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: time.Now().UTC()})
	if err != nil || r.Task.State != api.Failed || r.Task.Reason != api.ReasonHeartbeatTimeout {
		t.Fatalf("sweep: %s %s %v", r.Task.State, r.Task.Reason, err)
	}
	r, err = s.Apply(ctx, live.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
		Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
	if err != nil || r.Task.State != api.Succeeded {
		t.Fatalf("complete: %s %v", r.Task.State, err)
	}
	got := undeliveredEverywhere(t, s)
	for _, e := range entries {
		if !slices.Contains(got, e.EventID) {
			t.Fatalf("old undelivered entry %s not re-driven (found %v)", e.EventID, got)
		}
	}

	again, err := s.Migrate(ctx, MigrateOptions{})
	if err != nil || len(again.Steps) != 0 {
		t.Fatalf("rerun: %+v %v, want nothing to do", again, err)
	}
	newer := Schema{Version: SchemaVersion + 1}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), newer, false)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckSchema(ctx); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("CheckSchema of a newer schema: %v", err)
	}
}

// An interrupted migration resumes after the last document it finished.
func TestMigrateResumes(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []string
	for range 4 {
		now := time.Now().UTC()
		tk, _, err := s.Create(ctx, task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws",
			TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}}, now)
		if err != nil {
			t.Fatal(err)
		}
		asSchema1Name(t, s, tk.ID)
		asEarlierLayout(t, s, s.legacyTaskName(tk.ID), "dueShard")
		ids = append(ids, tk.ID)
	}
	// As if a run stopped after the second task.
	mark := Schema{Step: "tasks", After: s.legacyTaskName(ids[1])}
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), mark, false)}}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Migrate(ctx, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps[0].Scanned != 2 {
		t.Fatalf("resumed scan read %d tasks, want the 2 after the mark", rep.Steps[0].Scanned)
	}
}
