package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestAttemptRecordWrittenOnlyForWhatLiveLacks walks one attempt through
// its lifecycle and checks, for each event, that its commit wrote no
// attempt record (tasks/{doc}/attempts/1) and read none: every change is
// one the task document's live state mirrors (an enqueue, a `started`, a
// heartbeat, a job execution), and the outcome of the task's last attempt
// is kept on the task (task.Task.Ended). After each event, GET and
// Store.Attempts show the attempt as the machine left it.
func TestAttemptRecordWrittenOnlyForWhatLiveLacks(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond) // Firestore keeps microseconds
	tk := mustCreate(t, s, submitted(now, ""), now)
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
		{"execution", task.Event{Kind: task.EventExecution, Execution: exec}, false,
			func(a api.Attempt) bool { return a.Execution == exec && a.WorkerID == "w1" && a.StartedAt != nil }},
		{"completed", task.Event{Kind: task.EventCompleted, WorkerID: "w1", Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded}}, false,
			func(a api.Attempt) bool {
				return a.Outcome == api.OutcomeSucceeded && a.WorkerID == "w1" && a.StartedAt != nil && a.StartedAt.Equal(now.Add(time.Second)) &&
					a.ProgressPct != nil && *a.ProgressPct == 40 && a.Execution == exec
			}},
	}
	for i, st := range steps {
		st.ev.Attempt, st.ev.Now = 1, now.Add(time.Duration(i)*time.Second)
		rc.Reset()
		r := mustApply(t, s, tk.ID, st.ev)
		if r.Rejection != nil || !r.Write {
			t.Fatalf("%s: rejection %+v, write %v", st.name, r.Rejection, r.Write)
		}
		if got := rc.Counts(); got["BatchGetDocuments"] != 1 || got["Commit"] != 1 || rc.Total() != 2 {
			t.Errorf("%s: RPCs %v, want a read and a commit", st.name, got)
		}
		if n := rc.DocsWrittenIn(store.AttemptsCollection); (n > 0) != st.written || n > 1 {
			t.Errorf("%s: %d attempt records written, want written = %v", st.name, n, st.written)
		}
		if n := rc.DocsWrittenIn(store.TasksCollection); n != 1 {
			t.Errorf("%s: %d task documents written, want 1", st.name, n)
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

// TestFirstAttemptRecordGuard: a task's first attempt has no record until
// something the task document does not hold must be stored; the attempt
// guard answers stale, duplicate and forged callbacks exactly as it does
// against a stored record (one an earlier version wrote at submit, the
// "legacy" runs), and GET shows the attempt with the task's creation time.
func TestFirstAttemptRecordGuard(t *testing.T) {
	s, _ := newStore(t)
	fs := docClient(t, s)
	done := func(worker string, out api.Outcome) task.Event {
		return task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: worker, Completed: &api.CompletedRequest{Attempt: 1, WorkerID: worker, Outcome: out}}
	}
	started := func(attempt int, worker string) task.Event {
		return task.Event{Kind: task.EventStarted, Attempt: attempt, WorkerID: worker}
	}
	wrongAttempt := done("w1", api.OutcomeSucceeded)
	wrongAttempt.Attempt, wrongAttempt.Completed.Attempt = 2, 2
	cases := []guardCase{
		{"started", nil, started(1, "w1"), "", false, api.Running, false},
		{"started for attempt 2 while 1 is current", nil, started(2, "w1"), api.CodeAttemptMismatch, false, api.Queued, false},
		{"duplicate started", []task.Event{started(1, "w1")}, started(1, "w1"), "", false, api.Running, false},
		{"started by another worker", []task.Event{started(1, "w1")}, started(1, "w2"), api.CodeAttemptAlreadyStarted, false, api.Running, false},
		{"completed for an attempt that never existed", []task.Event{started(1, "w1")}, wrongAttempt, api.CodeAttemptMismatch, false, api.Running, false},
		{"completed by another worker", []task.Event{started(1, "w1")}, done("w2", api.OutcomeSucceeded), api.CodeAttemptAlreadyStarted, false, api.Running, false},
		{"completed", []task.Event{started(1, "w1")}, done("w1", api.OutcomeSucceeded), "", false, api.Succeeded, false},
		{"identical completed replays", []task.Event{started(1, "w1"), done("w1", api.OutcomeSucceeded)}, done("w1", api.OutcomeSucceeded), "", true, api.Succeeded, false},
		{"different completed conflicts", []task.Event{started(1, "w1"), done("w1", api.OutcomeSucceeded)}, done("w1", api.OutcomeFailed), api.CodeCompletionConflict, false, api.Succeeded, false},
	}
	for _, legacy := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/legacy=%v", c.name, legacy), func(t *testing.T) { c.run(t, s, fs, legacy) })
		}
	}
}

// guardCase is a case of TestFirstAttemptRecordGuard.
type guardCase struct {
	name   string
	before []task.Event // applied first, each accepted
	ev     task.Event
	code   string // the rejection, "" when accepted
	replay bool
	state  api.State
	record bool // attempt 1's record document exists afterwards (always when legacy; an ended last attempt is kept on the task)
}

// run plays c on a new task; with legacy, attempt 1's record is first
// written as an earlier version's Create wrote it.
func (c guardCase) run(t *testing.T, s *store.Store, fs *firestore.Client, legacy bool) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	tk := mustCreate(t, s, submitted(now, ""), now)
	record := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(tk.ID)).Collection(store.AttemptsCollection).Doc("1")
	exists := func() bool {
		_, err := record.Get(ctx)
		return err == nil
	}
	if exists() {
		t.Fatal("Create wrote the first attempt's record")
	}
	if legacy {
		if _, err := record.Create(ctx, map[string]any{"attempt": 1, "createdAt": now}); err != nil {
			t.Fatal(err)
		}
		// An earlier version's task document does not say whether the
		// attempt has a record.
		if _, err := record.Parent.Parent.Update(ctx, []firestore.Update{{Path: "recorded", Value: firestore.Delete}}); err != nil {
			t.Fatal(err)
		}
	}
	at := now
	for _, ev := range append([]task.Event{{Kind: task.EventEnqueued, Attempt: 1}}, c.before...) {
		at = at.Add(time.Second)
		ev.Now = at
		if r := mustApply(t, s, tk.ID, ev); r.Rejection != nil {
			t.Fatalf("%s: %+v", ev.Kind, r.Rejection)
		}
	}
	c.ev.Now = at.Add(time.Second)
	r := mustApply(t, s, tk.ID, c.ev)
	code := ""
	if r.Rejection != nil {
		code = r.Rejection.Code
	}
	if code != c.code || r.Replay != c.replay {
		t.Errorf("rejection %q, replay %v; want %q, %v", code, r.Replay, c.code, c.replay)
	}
	if got := exists(); got != (c.record || legacy) {
		t.Errorf("attempt record exists = %v, want %v", got, c.record || legacy)
	}
	got, err := s.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != c.state || len(got.Attempts) != 1 || got.Attempts[0].Attempt != 1 || !got.Attempts[0].CreatedAt.Equal(now) {
		t.Fatalf("task %s with attempts %+v, want %s with attempt 1 created at %v", got.State, got.Attempts, c.state, now)
	}
	if a := got.Attempts[0]; c.state != api.Queued && a.WorkerID != "w1" {
		t.Errorf("attempt worker %q, want w1", a.WorkerID)
	}
}

// TestRetryAttemptRecord: a retry writes the ended attempt's record and not
// the next one's, whose creation and schedule the task document carries;
// GET shows attempt 2 as its record would, the attempt guard answers a
// stale, forged or replayed callback as against a stored record, and the
// record written when attempt 2 ends keeps its creation and schedule.
func TestRetryAttemptRecord(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	failed := func(attempt int, digest string) task.Event {
		return task.Event{Kind: task.EventCompleted, Attempt: attempt, WorkerID: "w1", Completed: &api.CompletedRequest{Attempt: attempt, WorkerID: "w1",
			Outcome: api.OutcomeFailed, Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: digest}}}
	}
	cases := []struct {
		name    string
		ev      task.Event
		code    string
		replay  bool
		written int // attempt records the event's commit wrote
		state   api.State
	}{
		{"started for attempt 2", task.Event{Kind: task.EventStarted, Attempt: 2, WorkerID: "w1"}, "", false, 0, api.Running},
		{"started for attempt 3", task.Event{Kind: task.EventStarted, Attempt: 3, WorkerID: "w1"}, api.CodeAttemptMismatch, false, 0, api.Queued},
		{"started for attempt 1", task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"}, api.CodeAttemptMismatch, false, 0, api.Queued},
		{"identical completed of attempt 1 replays", failed(1, "boom"), "", true, 0, api.Queued},
		{"different completed of attempt 1", failed(1, "other"), api.CodeAttemptMismatch, false, 0, api.Queued},
		{"completed for attempt 2", failed(2, "again"), "", false, 1, api.Queued},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			tk := mustCreate(t, s, submitted(now, ""), now)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now.Add(time.Second)})
			retryAt := now.Add(2 * time.Second)
			ev := failed(1, "boom")
			ev.Now = retryAt
			rc.Reset()
			if r := mustApply(t, s, tk.ID, ev); !r.RetryScheduled || r.Task.Attempt != 2 {
				t.Fatalf("retry not scheduled: %+v", r.Task)
			}
			if n := rc.DocsWrittenIn(store.AttemptsCollection); n != 1 {
				t.Errorf("the retry wrote %d attempt records, want 1 (the ended one)", n)
			}
			got, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Attempts) != 2 || got.NotBefore == nil {
				t.Fatalf("after the retry: attempts %+v, notBefore %v", got.Attempts, got.NotBefore)
			}
			second := got.Attempts[1]
			if second.Attempt != 2 || !second.CreatedAt.Equal(retryAt) || second.ScheduledAt == nil || !second.ScheduledAt.Equal(*got.NotBefore) || second.Outcome != "" {
				t.Fatalf("attempt 2 %+v, want created at %v, scheduled at %v", second, retryAt, got.NotBefore)
			}
			c.ev.Now = got.NotBefore.Add(time.Second)
			rc.Reset()
			r := mustApply(t, s, tk.ID, c.ev)
			code := ""
			if r.Rejection != nil {
				code = r.Rejection.Code
			}
			if code != c.code || r.Replay != c.replay {
				t.Errorf("rejection %q, replay %v; want %q, %v", code, r.Replay, c.code, c.replay)
			}
			if n := rc.DocsWrittenIn(store.AttemptsCollection); n != c.written {
				t.Errorf("%d attempt records written, want %d", n, c.written)
			}
			after, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if after.State != c.state || len(after.Attempts) < 2 {
				t.Fatalf("task %s, attempts %+v; want %s", after.State, after.Attempts, c.state)
			}
			if a := after.Attempts[1]; !a.CreatedAt.Equal(second.CreatedAt) || !a.ScheduledAt.Equal(*second.ScheduledAt) {
				t.Errorf("attempt 2 afterwards %+v, want created %v scheduled %v", a, second.CreatedAt, second.ScheduledAt)
			}
			if c.written > 0 {
				// What the record holds (attempt 3, the next retry, is on
				// the task: GET shows it).
				if len(after.Attempts) != 3 || after.Attempts[2].Attempt != 3 {
					t.Errorf("GET attempts %+v, want 3", after.Attempts)
				}
				var rec task.Attempt
				d, err := docClient(t, s).Collection(store.TasksCollection).Doc(store.TaskDocID(tk.ID)).Collection(store.AttemptsCollection).Doc("2").Get(ctx)
				if err == nil {
					err = d.DataTo(&rec)
				}
				if err != nil || !rec.CreatedAt.Equal(second.CreatedAt) || rec.ScheduledAt == nil || rec.WorkerID != "w1" || rec.Outcome != api.OutcomeFailed {
					t.Errorf("record %+v (%v)", rec, err)
				}
			}
		})
	}
}

// TestEndedAttemptKeptOnTask: the attempt that ends a task is kept on the
// task document when it fits, so a task that ran one attempt has no
// attempt document: each callback reads one document (no lookup of a
// record that is not there) and the ending commit writes the task and its
// outbox entry; GET (one RPC: no attempts query), Store.Attempts and a
// repeated `completed` see the ended attempt. An ended attempt too large to
// share the task document gets its record document, as before.
func TestEndedAttemptKeptOnTask(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	// A migrated database: a task is looked up by its one name.
	if _, err := s.Migrate(ctx, store.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	fs := docClient(t, s)
	for _, c := range []struct {
		name   string
		output string
		record bool // the ended attempt has a record document
	}{
		{"small output", `{"rows":10}`, false},
		{"output past 64 KiB", `"` + strings.Repeat("x", 100<<10) + `"`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			tk := mustCreate(t, s, submitted(now, ""), now)
			done := task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1",
				Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded, Output: json.RawMessage(c.output)}}
			for i, ev := range []task.Event{
				{Kind: task.EventEnqueued, Attempt: 1},
				{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"},
				done,
			} {
				ev.Now = now.Add(time.Duration(i) * time.Second)
				rc.Reset()
				if r := mustApply(t, s, tk.ID, ev); r.Rejection != nil || !r.Write {
					t.Fatalf("%s: %+v", ev.Kind, r.Rejection)
				}
				u := rc.Usage()
				if u.RPCs != 2 || u.DocsRead != 1 || u.DocsMissing != 0 {
					t.Errorf("%s: %d RPCs, %d documents read, %d looked up and missing; want 2, 1, 0", ev.Kind, u.RPCs, u.DocsRead, u.DocsMissing)
				}
				wantWritten := 0
				if c.record && ev.Kind == task.EventCompleted {
					wantWritten = 1
				}
				if n := rc.DocsWrittenIn(store.AttemptsCollection); n != wantWritten {
					t.Errorf("%s: %d attempt records written, want %d", ev.Kind, n, wantWritten)
				}
			}
			records, err := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(tk.ID)).Collection(store.AttemptsCollection).Documents(ctx).GetAll()
			if err != nil || (len(records) == 1) != c.record || len(records) > 1 {
				t.Fatalf("%d attempt documents (%v), want record = %v", len(records), err, c.record)
			}
			rc.Reset()
			got, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if wantRPCs := map[bool]int{false: 1, true: 2}[c.record]; rc.Total() != wantRPCs {
				t.Errorf("GET: %d RPCs, want %d", rc.Total(), wantRPCs)
			}
			viaAttempts, err := s.Attempts(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			for name, as := range map[string][]task.Attempt{"GET": got.Attempts, "Store.Attempts": viaAttempts} {
				if len(as) != 1 || as[0].Outcome != api.OutcomeSucceeded || as[0].WorkerID != "w1" || as[0].StartedAt == nil ||
					!as[0].CreatedAt.Equal(now) || string(as[0].Output) != c.output {
					t.Errorf("%s: attempts %d, first %+v", name, len(as), as[0].View().Outcome)
				}
			}
			// A repeated report replays; a different one conflicts: the
			// kept attempt guards as its record did.
			again := done
			again.Now = now.Add(time.Minute)
			if r := mustApply(t, s, tk.ID, again); !r.Replay || r.Write {
				t.Errorf("repeated completed: replay %v, write %v", r.Replay, r.Write)
			}
			other := again
			other.Completed = &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeFailed, Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: "no"}}
			if r := mustApply(t, s, tk.ID, other); r.Rejection == nil || r.Rejection.Code != api.CodeCompletionConflict {
				t.Errorf("different completed: %+v", r.Rejection)
			}
		})
	}
}

// TestEndedAttemptFitsBesideLargestPayload: the attempt kept on the task
// takes the room the running attempt's checkpoint had, so a task with the
// largest payload a submit accepts still commits its end in one commit:
// its ended attempt on the task when that fits the inline bound, in a
// document of its own when not.
func TestEndedAttemptFitsBesideLargestPayload(t *testing.T) {
	s, rc := newStore(t)
	for _, c := range []struct {
		name               string
		checkpoint, output int
		record             bool
	}{
		{"kept on the task", 30 << 10, 30 << 10, false},
		{"past the inline bound", api.MaxCheckpointBytes - 2, 60 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			tk := submitted(now, "")
			// The largest envelope a submit makes (dispatcher: Cloud Tasks'
			// 1 MiB less two checkpoints and 8 KiB) is mostly payload.
			tk.Payload = json.RawMessage(`"` + strings.Repeat("p", (1<<20)-2*api.MaxCheckpointBytes-(8<<10)-2) + `"`)
			tk = mustCreate(t, s, tk, now)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
			cp := json.RawMessage(`"` + strings.Repeat("c", c.checkpoint) + `"`)
			mustApply(t, s, tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Now: now.Add(time.Second),
				Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", Checkpoint: cp}})
			out := json.RawMessage(`"` + strings.Repeat("o", c.output) + `"`)
			rc.Reset()
			r := mustApply(t, s, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: now.Add(2 * time.Second),
				Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeSucceeded, Output: out}})
			if r.Rejection != nil || !r.Write {
				t.Fatalf("completed: %+v", r.Rejection)
			}
			if n := rc.DocsWrittenIn(store.AttemptsCollection); (n == 1) != c.record || n > 1 {
				t.Errorf("%d attempt records written, want record = %v", n, c.record)
			}
			got, err := s.Get(context.Background(), tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Attempts) != 1 || string(got.Attempts[0].Output) != string(out) || string(got.Attempts[0].Checkpoint) != string(cp) || got.State != api.Succeeded {
				t.Fatalf("task %s, %d attempts", got.State, len(got.Attempts))
			}
		})
	}
}
