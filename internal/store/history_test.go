package store_test

import (
	"context"
	"encoding/json"
	"slices"
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
			fs := docClient(t, s)
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

// TestOutboxEntriesAfterDelivery: a failed delivery recorded for entries
// one of which another instance delivered (deleted) meanwhile records the
// others and leaves the deleted one gone; an entry an older version marked
// delivered (delivered, expireAt: its TTL) is never returned for delivery
// again, and OutboxEntries shows every transition delivered or not.
func TestOutboxEntriesAfterDelivery(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	fs := docClient(t, s)
	now := time.Now().UTC().Truncate(time.Microsecond)
	tk := mustCreate(t, s, submitted(now, ""), now)
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now})
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w", Now: now})
	ids := []string{task.EventID(tk.ID, 1), task.EventID(tk.ID, 2), task.EventID(tk.ID, 3)}
	stored := func(id string) bool {
		_, err := fs.Collection(store.OutboxCollection).Doc(id).Get(ctx)
		return err == nil
	}

	// Entry 1 delivered by another instance; entry 2 by an older version.
	if err := s.DeleteDelivered(ctx, ids[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Collection(store.OutboxCollection).Doc(ids[1]).Update(ctx, []firestore.Update{
		{Path: "delivered", Value: true}, {Path: "expireAt", Value: now.Add(7 * 24 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	next := now.Add(time.Minute)
	fails := []store.OutboxFailure{{EventID: ids[0], Tries: 1, NextTryAt: next}, {EventID: ids[2], Tries: 1, NextTryAt: next}}
	if err := s.MarkFailed(ctx, fails); err != nil {
		t.Fatalf("MarkFailed with an entry deleted meanwhile: %v", err)
	}
	if stored(ids[0]) {
		t.Errorf("MarkFailed recreated the deleted entry %s", ids[0])
	}
	shard := []int{store.DueShardOf(tk.ID, s.DueShards())}
	und, err := s.Undelivered(ctx, shard, next.Add(time.Hour), 10)
	if err != nil || len(und) != 1 || und[0].EventID != ids[2] || und[0].Tries != 1 || !und[0].NextTryAt.Equal(next) {
		t.Fatalf("undelivered = %+v, %v; want only %s, tried once", und, err, ids[2])
	}
	es, err := s.OutboxEntries(ctx, tk.ID)
	if err != nil || len(es) != 3 {
		t.Fatalf("outbox entries %+v, %v", es, err)
	}
	for i, e := range es {
		if e.EventID != ids[i] || e.Delivered != (i < 2) {
			t.Errorf("entry %d: %s delivered %v, want %s delivered %v", i, e.EventID, e.Delivered, ids[i], i < 2)
		}
	}
}

// TestTaskEventsHistoryCutInsideACommit: a submit's two transitions share
// one outbox document, named by the second; when the task's history no
// longer holds the first (a long history drops its oldest steps), its
// event still comes from that document, read by name with the next
// seqs', in one RPC, and events after the history's start are not
// repeated.
func TestTaskEventsHistoryCutInsideACommit(t *testing.T) {
	s, rc := newStore(t)
	ctx := context.Background()
	fs := docClient(t, s)
	now := time.Now().UTC()
	tk := submitted(now, "")
	tk.RunID = task.NewRunID(now)
	if r := s.CreateMany(ctx, []task.Task{tk}, now, true)[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w", Now: now.Add(time.Millisecond)})
	entries, err := s.OutboxEntries(ctx, tk.ID)
	if err != nil || len(entries) != 3 || entries[0].Doc != entries[1].Doc || entries[0].Doc != task.EventID(tk.ID, 2) || entries[2].Doc != task.EventID(tk.ID, 3) {
		t.Fatalf("outbox %+v, %v: want seqs 1 and 2 in the document of 2, seq 3 in its own", entries, err)
	}

	// Drop the history's first step (seq 1).
	doc := fs.Collection(store.TasksCollection).Doc(store.TaskDocID(tk.ID))
	snap, err := doc.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := snap.Data()["history"].([]any)
	if len(h) != 3 {
		t.Fatalf("history of %d steps, want 3", len(h))
	}
	if _, err := doc.Update(ctx, []firestore.Update{{Path: "history", Value: h[1:]}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTask(ctx, tk.ID)
	if err != nil || len(got.History) != 2 {
		t.Fatalf("task %+v, %v: want a history of 2", got.History, err)
	}

	rc.Reset()
	trs, err := s.TaskEvents(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if n := rc.Usage().RPCs; n != 1 {
		t.Errorf("TaskEvents: %d RPCs, want 1", n)
	}
	run, err := s.RunEvents(ctx, tk.RunID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, evs := range map[string][]task.Transition{"task": trs, "run": run} {
		var seqs []int64
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		if !slices.Equal(seqs, []int64{1, 2, 3}) {
			t.Errorf("%s events of seqs %v, want [1 2 3]", name, seqs)
		}
	}
}

// docClient is a Firestore client of s's project, to read and write
// documents as they are stored (closed with the test).
func docClient(t *testing.T, s *store.Store) *firestore.Client {
	t.Helper()
	fs, err := firestore.NewClient(context.Background(), s.Project())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}
