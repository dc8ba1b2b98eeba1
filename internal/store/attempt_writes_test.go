package store_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestAttemptRecordWrittenOnlyForWhatLiveLacks walks one attempt through
// its lifecycle and checks, after each event, whether its record
// (tasks/{doc}/attempts/1) was written: not when every change is one the
// task document's live state mirrors (a `started`, a heartbeat), but when
// something Live does not hold changed (a job execution, the outcome).
// After each event, GET, Store.Attempts and the raw record show the
// attempt as the machine left it.
func TestAttemptRecordWrittenOnlyForWhatLiveLacks(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	fs, err := firestore.NewClient(ctx, s.Project())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond) // Firestore keeps microseconds
	tk := mustCreate(t, s, submitted(now, ""), now)
	record := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(tk.ID)).Collection(store.AttemptsCollection).Doc("1")
	updated := func() time.Time {
		t.Helper()
		snap, err := record.Get(ctx)
		if err != nil {
			return time.Time{} // absent
		}
		return snap.UpdateTime
	}
	const exec = "projects/p/locations/l/jobs/j/executions/e1"
	p40 := 40
	steps := []struct {
		name    string
		ev      task.Event
		written bool
		check   func(a api.Attempt) bool // on GET's attempt 1
	}{
		{"enqueued", task.Event{Kind: task.EventEnqueued}, false,
			func(a api.Attempt) bool { return a.WorkerID == "" && a.StartedAt == nil }},
		{"started", task.Event{Kind: task.EventStarted, WorkerID: "w1"}, false,
			func(a api.Attempt) bool {
				return a.WorkerID == "w1" && a.StartedAt != nil && a.StartedAt.Equal(now.Add(time.Second))
			}},
		{"heartbeat", task.Event{Kind: task.EventHeartbeat, WorkerID: "w1", Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: &p40, Message: "m"}}, false,
			func(a api.Attempt) bool {
				return a.WorkerID == "w1" && a.ProgressPct != nil && *a.ProgressPct == 40 && a.Message == "m" && a.LastHeartbeatAt != nil
			}},
		{"execution (not on Live)", task.Event{Kind: task.EventExecution, Execution: exec}, true,
			func(a api.Attempt) bool { return a.Execution == exec && a.WorkerID == "w1" && a.StartedAt != nil }},
		{"completed", task.Event{Kind: task.EventCompleted, WorkerID: "w1", Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}}, true,
			func(a api.Attempt) bool {
				return a.Outcome == api.OutcomeSucceeded && a.WorkerID == "w1" && a.StartedAt != nil && a.StartedAt.Equal(now.Add(time.Second)) &&
					a.ProgressPct != nil && *a.ProgressPct == 40 && a.Execution == exec
			}},
	}
	for i, st := range steps {
		before := updated()
		st.ev.Attempt, st.ev.Now = 1, now.Add(time.Duration(i)*time.Second)
		rc.Reset()
		r := mustApply(t, s, tk.ID, st.ev)
		if r.Rejection != nil || !r.Write {
			t.Fatalf("%s: rejection %+v, write %v", st.name, r.Rejection, r.Write)
		}
		if got := rc.Counts(); got["BatchGetDocuments"] != 1 || got["Commit"] != 1 || rc.Total() != 2 {
			t.Errorf("%s: RPCs %v, want a read and a commit", st.name, got)
		}
		if after := updated(); after.Equal(before) == st.written {
			t.Errorf("%s: attempt record written = %v, want %v", st.name, !after.Equal(before), st.written)
		}
		got, err := s.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Attempts) != 1 || !st.check(got.Attempts[0].View()) {
			t.Errorf("%s: GET attempts %+v", st.name, got.Attempts)
		}
		if got.State.Terminal() {
			// Store.Attempts (the dead letters) reads the records alone.
			as, err := s.Attempts(ctx, tk.ID)
			if err != nil || len(as) != 1 || !st.check(as[0].View()) {
				t.Errorf("%s: Store.Attempts %+v (%v)", st.name, as, err)
			}
		}
	}
}
