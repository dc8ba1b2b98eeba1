package store

import (
	"context"
	"encoding/json"
	"errors"
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

// Tasks stored as schema 1 stored them (tasks/{taskId}): this build
// refuses the database, naming the command to run, and reads no legacy
// name; `servo migrate` moves every task to its hash-prefixed name; then
// every task takes its callbacks, is listed, swept and completed at its
// new name, its events are there to deliver, and a rerun does nothing.
func TestMigrateNames(t *testing.T) {
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	mig, err := New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	v1 := Schema{Version: 1, UpdatedAt: time.Now().UTC()}
	if _, err := mig.client.Commit(ctx, &pb.CommitRequest{Database: mig.db, Writes: []*pb.Write{setWrite(mig.schemaName(), v1, false)}}); err != nil {
		t.Fatal(err)
	}

	const live, beats = 24, 3
	started := func(at time.Time, timeout time.Duration) task.Task {
		tk := task.Task{ID: task.NewTaskID(at), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: json.RawMessage(`{}`), Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: timeout.Milliseconds()},
			Retry: api.RetryPolicy{MaxAttempts: 1}}
		tk, _, err := mig.Create(ctx, tk, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range []task.Event{{Kind: task.EventEnqueued, Attempt: 1, Now: at}, {Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: at}} {
			if _, err := mig.Apply(ctx, tk.ID, ev); err != nil {
				t.Fatal(err)
			}
		}
		asSchema1Name(t, mig, tk.ID)
		return tk
	}
	zombie := started(time.Now().Add(-time.Hour).UTC(), 3*time.Second)
	var ids []string
	for range live {
		ids = append(ids, started(time.Now().UTC(), time.Hour).ID)
	}

	// This build refuses the database and names the command; it reads
	// no legacy name.
	if _, err := mig.CheckSchema(ctx); !errors.Is(err, ErrSchemaTooOld) || !strings.Contains(err.Error(), "servo migrate --project "+project) {
		t.Fatalf("CheckSchema of schema 1: %v, want ErrSchemaTooOld naming `servo migrate --project %s`", err, project)
	}
	if _, err := mig.Get(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a schema 1 task read before the migration: %v, want not found (no legacy read)", err)
	}

	rep, err := mig.Migrate(ctx, MigrateOptions{PageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The names step moves every task; the later steps (retention) find
	// nothing of theirs to do on tasks that have not ended.
	for i, st := range rep.Steps {
		if (i == 0) != (st.Step == "names") || (st.Step == "names" && st.Updated != live+1) || (st.Step != "names" && st.Updated != 0) {
			t.Fatalf("migration %+v, want the names step first with %d tasks moved, and no other update", rep, live+1)
		}
	}

	all := append([]string{zombie.ID}, ids...)
	var legacy []string
	for _, id := range all {
		legacy = append(legacy, mig.legacyTaskName(id))
	}
	if docs, _, err := mig.batchGet(ctx, legacy, nil); err != nil || len(docs) != 0 {
		t.Fatalf("%d tasks left under their schema 1 names (%v)", len(docs), err)
	}
	// A process started after the migration accepts the database and
	// finds every task at its new name.
	after, err := New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, err := after.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after the migration: %v", err)
	}
	for _, id := range ids {
		for i := range beats {
			if _, err := after.Apply(ctx, id, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
				Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", Message: fmt.Sprint("beat ", i)}}); err != nil {
				t.Fatalf("heartbeat %d of %s: %v", i, id, err)
			}
		}
		r, err := after.Apply(ctx, id, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
			Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
		if err != nil || r.Rejection != nil {
			t.Fatalf("complete %s: %v %v", id, r.Rejection, err)
		}
		tk, err := after.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != api.Succeeded || len(tk.Attempts) != 1 || tk.Attempts[0].Heartbeats != beats {
			t.Errorf("%s: %s, attempts %d, heartbeats %v: a callback's write was lost", id, tk.State, len(tk.Attempts), tk.Attempts)
		}
		es, err := after.OutboxEntries(ctx, id)
		if err != nil || !slices.ContainsFunc(es, func(e OutboxEntry) bool { return e.To == api.Succeeded && !e.Delivered }) {
			t.Errorf("%s: no SUCCEEDED event to deliver in %d entries (%v)", id, len(es), err)
		}
	}

	// Listed: every task, oldest first, over pages.
	var listed []string
	for tok := ""; ; {
		page, next, err := after.List(ctx, ListFilter{TenantID: "acme", PageSize: 7, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			listed = append(listed, tk.ID)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if want := slices.Sorted(slices.Values(all)); !slices.Equal(listed, want) {
		t.Errorf("listed %d tasks %v, want %v", len(listed), listed, want)
	}

	// Swept: the zombie's lease ran out.
	if !slices.Contains(dueEverywhere(t, after, DueLease), zombie.ID) {
		t.Fatal("the zombie is not found by the sweeper's lease query")
	}
	r, err := after.Apply(ctx, zombie.ID, task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: time.Now().UTC()})
	if err != nil || r.Task.State != api.Failed {
		t.Fatalf("sweep: %s %v", r.Task.State, err)
	}

	again, err := mig.Migrate(ctx, MigrateOptions{})
	if err != nil || len(again.Steps) != 0 {
		t.Fatalf("rerun: %+v %v, want nothing to do", again, err)
	}
}

// A database without meta/schema and without data (a new deployment, a
// test's project) is recorded at SchemaVersion by the first CheckSchema;
// one with data but no meta/schema (a layout from before versions were
// kept) is refused like any older schema.
func TestCheckSchemaRecordsAFreshDatabase(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc, err := s.CheckSchema(ctx)
	if err != nil || sc.Version != SchemaVersion {
		t.Fatalf("fresh database: %+v %v, want version %d", sc, err, SchemaVersion)
	}
	if read, err := s.ReadSchema(ctx); err != nil || read.Version != SchemaVersion {
		t.Fatalf("meta/schema after: %+v %v", read, err)
	}

	old, err := New(ctx, emulatortest.ProjectID(t)+"-old")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	tk := task.Task{ID: task.NewTaskID(time.Now()), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`)}
	if _, _, err := old.Create(ctx, tk, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	if _, err := old.CheckSchema(ctx); !errors.Is(err, ErrSchemaTooOld) {
		t.Fatalf("data without meta/schema: %v, want ErrSchemaTooOld", err)
	}
}
