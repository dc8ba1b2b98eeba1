package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestTaskEventsFromHistory: a task's and a run's events come from the
// task documents' histories, the same events (in the API's JSON, byte for
// byte) as the outbox entries the transitions wrote, and with no read
// beyond the task (or the run's listing); a task written before histories
// existed (no history field) has its entries read by name instead, and one
// that transitioned since answers its older events from its entries and
// the later ones from its history.
func TestTaskEventsFromHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		// legacy strips the history field after the first steps of the
		// lifecycle, as a task document written by an older version.
		legacy bool
		// after is how many steps follow the stripping.
		after int
		// reads is how many RPCs TaskEvents makes.
		reads int
	}{
		{name: "history", legacy: false, reads: 0},
		{name: "legacy task, no history", legacy: true, after: 0, reads: 1},
		{name: "legacy task transitioned since", legacy: true, after: 2, reads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rc := newStore(t)
			ctx := context.Background()
			fs, err := firestore.NewClient(ctx, s.Project())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fs.Close() })
			now := time.Now().UTC()
			tk := submitted(now, "")
			tk.RunID = task.NewRunID(now)
			mustCreate(t, s, tk, now)
			steps := []task.Event{
				{Kind: task.EventEnqueued, Attempt: 1},
				{Kind: task.EventStarted, Attempt: 1, WorkerID: "w"},
				{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w", Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w",
					Outcome: api.OutcomeFailed, Error: &api.ErrorInfo{Category: api.CategoryDataQuality, Message: "row 7"}}},
			}
			cut := len(steps) - tc.after
			for i, ev := range steps {
				if tc.legacy && i == cut {
					stripHistory(t, fs, tk.ID)
				}
				ev.Now = now.Add(time.Duration(i+1) * time.Millisecond)
				if r := mustApply(t, s, tk.ID, ev); r.Rejection != nil {
					t.Fatalf("%s rejected: %v", ev.Kind, r.Rejection)
				}
			}
			if tc.legacy && cut == len(steps) {
				stripHistory(t, fs, tk.ID)
			}
			// The outbox entries (none delivered: no publisher runs) are
			// what the transitions wrote.
			entries, err := s.OutboxEntries(ctx, tk.ID)
			if err != nil || len(entries) != len(steps)+1 {
				t.Fatalf("%d outbox entries, %v; want %d", len(entries), err, len(steps)+1)
			}
			got, err := s.GetTask(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := len(steps) + 1
			if tc.legacy {
				want = tc.after
			}
			if len(got.History) != want {
				t.Fatalf("history of %d transitions, want %d", len(got.History), want)
			}
			rc.Reset()
			trs, err := s.TaskEvents(ctx, got)
			if err != nil {
				t.Fatal(err)
			}
			if n := rc.Usage().RPCs; n != tc.reads {
				t.Errorf("TaskEvents: %d RPCs, want %d", n, tc.reads)
			}
			run, err := s.RunEvents(ctx, tk.RunID, nil)
			if err != nil {
				t.Fatal(err)
			}
			for name, evs := range map[string][]task.Transition{"task": trs, "run": run} {
				if len(evs) != len(entries) {
					t.Fatalf("%s events: %d, want %d", name, len(evs), len(entries))
				}
				for i, e := range entries {
					want, _ := json.Marshal(events.EventOf(e.Transition))
					b, _ := json.Marshal(events.EventOf(evs[i]))
					if string(b) != string(want) {
						t.Errorf("%s event %d:\n%s\nwant\n%s", name, i, b, want)
					}
				}
			}
		})
	}
}

// stripHistory removes a task document's history, as an older version
// wrote it.
func stripHistory(t *testing.T, fs *firestore.Client, id string) {
	t.Helper()
	_, err := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(id)).Update(context.Background(),
		[]firestore.Update{{Path: "history", Value: firestore.Delete}})
	if err != nil {
		t.Fatal(err)
	}
}
