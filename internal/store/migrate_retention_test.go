package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/task"
)

// TestMigrateRetention: tasks, attempts and runs written before retention
// get the expireAt the code would have stamped; a running task and its
// running attempt are left alone; a rerun changes nothing.
func TestMigrateRetention(t *testing.T) {
	ctx := context.Background()
	const retention = 40 * 24 * time.Hour
	s, err := New(ctx, emulatortest.ProjectID(t), WithRetention(retention))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	apply := func(id string, ev task.Event) {
		t.Helper()
		if _, err := s.Apply(ctx, id, ev); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	for range 2 {
		tk, _, err := s.Create(ctx, task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws",
			TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`), Retry: api.RetryPolicy{MaxAttempts: 1}}, now)
		if err != nil {
			t.Fatal(err)
		}
		apply(tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
		apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
		ids = append(ids, tk.ID)
	}
	ended, running := ids[0], ids[1]
	end := now.Add(time.Second)
	apply(ended, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: end,
		Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
	// The attempts' records as an earlier version wrote them (at submit,
	// at `started` and at the end; today's are on the task).
	for _, id := range ids {
		cur, err := s.Get(ctx, id)
		if err != nil || len(cur.Attempts) != 1 {
			t.Fatalf("task %s: %+v, %v", id, cur.Attempts, err)
		}
		if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(attemptName(s.taskName(id), 1), cur.Attempts[0], true)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		asEarlierLayout(t, s, s.taskName(id), "expireAt")
		asEarlierLayout(t, s, attemptName(s.taskName(id), 1), "expireAt")
	}
	runs, _, err := s.ListRuns(ctx, RunFilter{TenantID: "acme", PageSize: 10})
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %+v, %v", runs, err)
	}
	for _, r := range runs {
		asEarlierLayout(t, s, s.tenantRunName(r.TenantID, r.RunID), "expireAt")
	}
	// The database as it was before step 3: schema 2.
	if _, err := s.client.Commit(ctx, &pb.CommitRequest{Database: s.db, Writes: []*pb.Write{setWrite(s.schemaName(), Schema{Version: 2}, false)}}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Migrate(ctx, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated := map[string]int{}
	for _, p := range rep.Steps {
		updated[p.Step] = p.Updated
	}
	if updated["retention-tasks"] != 1 || updated["retention-attempts"] != 1 || updated["retention-runs"] != 2 {
		t.Errorf("updated %v; want 1 task, 1 attempt, 2 runs", updated)
	}
	got, err := s.Get(ctx, ended)
	if err != nil {
		t.Fatal(err)
	}
	want := end.Add(retention)
	if got.ExpireAt == nil || !got.ExpireAt.Equal(want) || got.Attempts[0].ExpireAt == nil || !got.Attempts[0].ExpireAt.Equal(want) {
		t.Errorf("ended task expires %v, its attempt %v; want %v", got.ExpireAt, got.Attempts[0].ExpireAt, want)
	}
	if got, err = s.Get(ctx, running); err != nil || got.ExpireAt != nil || got.Attempts[0].ExpireAt != nil {
		t.Errorf("running task expires %v, its attempt %v (%v)", got.ExpireAt, got.Attempts[0].ExpireAt, err)
	}
	runs, _, err = s.ListRuns(ctx, RunFilter{TenantID: "acme", PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.ExpireAt == nil || !r.ExpireAt.Equal(r.LastSubmitAt.Add(retention)) {
			t.Errorf("run %s expires %v, want %v", r.RunID, r.ExpireAt, r.LastSubmitAt.Add(retention))
		}
	}
	if again, err := s.Migrate(ctx, MigrateOptions{}); err != nil || len(again.Steps) != 0 {
		t.Errorf("rerun: %+v, %v", again, err)
	}
}
