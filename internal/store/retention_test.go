package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestRetentionStampsEndedTasks: the commit that ends a task stamps
// expireAt (its end plus the tenant's retention) on the task and on the
// attempt it ends, with no write of its own; an attempt retried earlier
// expires the retention after the task's deadline; a running task has
// none; a tenant's retentionDays overrides the default; the run's
// document expires the retention after its last submit.
func TestRetentionStampsEndedTasks(t *testing.T) {
	const day = 24 * time.Hour
	policy, err := quota.Parse([]byte(`{"tenants":{"keep":{"retentionDays":90}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rc := store.NewRPCCounter()
	s, err := store.New(context.Background(), emulatortest.ProjectID(t), store.WithRPCCounter(rc),
		store.WithRetention(45*day), store.WithQuotas(policy))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		tenant    string
		retention time.Duration
	}{
		{"acme", 45 * day},
		{"keep", 90 * day},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			tk := submitted(now, "")
			tk.TenantID, tk.RunID = tc.tenant, task.NewRunID(now)
			deadline := now.Add(time.Hour)
			tk.Deadline = &deadline
			tk.Retry = api.RetryPolicy{MaxAttempts: 2, InitialBackoffMs: 100, MaxBackoffMs: 100}
			tk = mustCreate(t, s, tk, now)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
			failed := &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeFailed,
				Error: &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "try again"}}
			retried := now.Add(time.Second)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: retried, Completed: failed})
			got, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != api.Queued || got.ExpireAt != nil || len(got.Attempts) != 2 {
				t.Fatalf("after the retry: %s, expireAt %v, %d attempts", got.State, got.ExpireAt, len(got.Attempts))
			}
			if a := got.Attempts[0]; a.ExpireAt == nil || !a.ExpireAt.Equal(deadline.Add(tc.retention)) {
				t.Errorf("retried attempt expires %v, want the deadline plus %v", a.ExpireAt, tc.retention)
			}
			if a := got.Attempts[1]; a.ExpireAt != nil {
				t.Errorf("the new attempt expires %v", a.ExpireAt)
			}
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 2, WorkerID: "w1", Now: retried})
			end := now.Add(2 * time.Second)
			rc.Reset()
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 2, WorkerID: "w1", Now: end,
				Completed: &api.CompletedRequest{Attempt: 2, WorkerID: "w1", Outcome: api.OutcomeSucceeded}})
			// The task (which keeps the ended attempt) and the transition:
			// nothing more.
			if u := rc.Usage(); u.RPCs != 2 || u.DocsWritten != 2 {
				t.Errorf("the ending commit: %d RPCs, %d documents written; want 2 and 2", u.RPCs, u.DocsWritten)
			}
			got, err = s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := end.Add(tc.retention)
			if got.ExpireAt == nil || !got.ExpireAt.Equal(want) {
				t.Errorf("task expires %v, want %v", got.ExpireAt, want)
			}
			if a := got.Attempts[1]; a.ExpireAt == nil || !a.ExpireAt.Equal(want) {
				t.Errorf("last attempt expires %v, want %v", a.ExpireAt, want)
			}
			runs, _, err := s.ListRuns(ctx, store.RunFilter{TenantID: tc.tenant})
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 || runs[0].ExpireAt == nil || !runs[0].ExpireAt.Equal(runs[0].LastSubmitAt.Add(tc.retention)) {
				t.Errorf("runs %+v: want one expiring %v after its last submit", runs, tc.retention)
			}
		})
	}
}
