package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/task"
)

// Tasks stored as today's main stores them (schema 1: tasks/{taskId}) are
// moved to their hash-prefixed names while another process, started
// before the migration, heartbeats and completes them: every callback
// lands (no heartbeat or completion lost to a move), every task is listed,
// swept and completed at its new name, its events are there to deliver,
// and a rerun does nothing.
func TestMigrateNamesWhileCallbacksRace(t *testing.T) {
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	mig, err := New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	cb, err := New(ctx, project) // the functions: running before the migration
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	v1 := Schema{Version: 1, UpdatedAt: time.Now().UTC()}
	if _, err := mig.client.Commit(ctx, &pb.CommitRequest{Database: mig.db, Writes: []*pb.Write{setWrite(mig.schemaName(), v1, false)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}

	const live, beats = 24, 3
	started := func(at time.Time, timeout time.Duration) task.Task {
		tk := task.Task{ID: task.NewTaskID(at), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: json.RawMessage(`{}`), Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: timeout.Milliseconds()},
			Retry: api.RetryPolicy{MaxAttempts: 1}}
		tk, _, err := cb.Create(ctx, tk, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range []task.Event{{Kind: task.EventEnqueued, Attempt: 1, Now: at}, {Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: at}} {
			if _, err := cb.Apply(ctx, tk.ID, ev); err != nil {
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

	// The callbacks race the migration.
	errs := make(chan error, live*(beats+1))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			for i := range beats {
				_, err := cb.Apply(ctx, id, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
					Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", Message: fmt.Sprint("beat ", i)}})
				if err != nil {
					errs <- fmt.Errorf("heartbeat %d of %s: %w", i, id, err)
				}
			}
			r, err := cb.Apply(ctx, id, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(),
				Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
			if err != nil || r.Rejection != nil {
				errs <- fmt.Errorf("complete %s: %v %v", id, r.Rejection, err)
			}
		})
	}
	rep, err := mig.Migrate(ctx, MigrateOptions{PageSize: 4})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
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
	// A process started after the migration reads only the new names.
	after, err := New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, err := after.CheckSchema(ctx); err != nil || after.legacyNames.Load() {
		t.Fatalf("schema 2 read: %v, still reading legacy names: %v", err, after.legacyNames.Load())
	}
	for _, id := range ids {
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

// The sweeper pages through tasks due at the same instant, still under
// their schema 1 names, one at a time: each is returned once (a cursor
// naming the task's new name would return the first page again).
func TestDueTasksPagesOverSchema1Names(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, emulatortest.ProjectID(t), WithDueShards(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now().Add(-time.Hour).UTC()
	var want []string
	for range 3 {
		tk, _, err := s.Create(ctx, task.Task{ID: task.NewTaskID(at), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
			Payload: json.RawMessage(`{}`), Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000},
			Retry: api.RetryPolicy{MaxAttempts: 1}}, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range []task.Event{{Kind: task.EventEnqueued, Attempt: 1, Now: at}, {Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: at}} {
			if _, err := s.Apply(ctx, tk.ID, ev); err != nil {
				t.Fatal(err)
			}
		}
		asSchema1Name(t, s, tk.ID)
		want = append(want, tk.ID)
	}
	var got []string
	var cursor *DueCursor
	for page := 0; page < 10; page++ {
		ts, err := s.DueTasks(ctx, DueLease, []int{0}, time.Now().UTC(), 1, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) == 0 {
			break
		}
		got = append(got, ts[0].ID)
		cursor = &DueCursor{At: *ts[0].LeaseExpiresAt, ID: ts[0].ID}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("paged %v, want each of %v once", got, want)
	}
}
