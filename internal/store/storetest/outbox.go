package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

func testOutbox(t *testing.T, o Opener) {
	t.Run("Order", func(t *testing.T) { testOutboxOrder(t, o.New(t, Config{})) })
	t.Run("Delivery", func(t *testing.T) { testOutboxDelivery(t, o.New(t, Config{})) })
}

// A task's transitions, interleaved with another task's and with events
// that make none, are its outbox entries and its events in seq order,
// each once, undelivered until delivered.
func testOutboxOrder(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, "acme", ""), now)
	other := mustCreate(t, s, submitted(now, "acme", ""), now)
	step := func(i int) time.Time { return now.Add(time.Duration(i) * time.Second) }
	mustAccept(t, s, tk.ID, enqueued(1, step(1)))
	mustAccept(t, s, other.ID, enqueued(1, step(1)))
	mustAccept(t, s, tk.ID, started(1, "w1", step(2)))
	mustAccept(t, s, tk.ID, heartbeat(1, "w1", 10, step(3)))
	mustAccept(t, s, other.ID, cancel(step(3)))
	mustAccept(t, s, tk.ID, cancel(step(4)))
	if r := mustAccept(t, s, tk.ID, heartbeat(1, "w1", 20, step(5))); !r.ShouldCancel || len(r.Transitions) != 0 {
		t.Fatalf("heartbeat while cancelling: should cancel %v, %d transitions", r.ShouldCancel, len(r.Transitions))
	}
	mustAccept(t, s, tk.ID, cancel(step(5))) // already cancelling: nothing
	mustAccept(t, s, tk.ID, completed(1, "w1", api.OutcomeCancelled, "", step(6)))

	want := []api.State{api.Pending, api.Queued, api.Running, api.Cancelling, api.Cancelled}
	es := checkOutbox(t, s, tk.ID)
	if !slices.Equal(states(transitionsOf(es)), want) {
		t.Fatalf("outbox enters %v, want %v\n%s", states(transitionsOf(es)), want, describe(transitionsOf(es)))
	}
	for i, e := range es {
		if e.Delivered || e.Doc == "" || e.Attempt != 1 {
			t.Fatalf("entry %d: delivered %v doc %q attempt %d, want undelivered, in a document, attempt 1", i, e.Delivered, e.Doc, e.Attempt)
		}
		if i > 0 && e.OccurredAt.Before(es[i-1].OccurredAt) {
			t.Fatalf("entry %d occurred at %v, before entry %d at %v", i, e.OccurredAt, i-1, es[i-1].OccurredAt)
		}
	}
	final := mustGetTask(t, s, tk.ID)
	evs, err := s.TaskEvents(ctx, final)
	if err != nil {
		t.Fatal(err)
	}
	if err := chainErr(final, evs); err != nil {
		t.Fatalf("task events: %v\n%s", err, describe(evs))
	}
	for i := range evs {
		if evs[i].EventID != es[i].EventID || evs[i].To != es[i].To {
			t.Fatalf("task event %d is %s→%s (%s), outbox entry %s→%s (%s)", i, evs[i].From, evs[i].To, evs[i].EventID, es[i].From, es[i].To, es[i].EventID)
		}
	}
	if oes := checkOutbox(t, s, other.ID); !slices.Equal(states(transitionsOf(oes)), []api.State{api.Pending, api.Queued, api.Cancelled}) {
		t.Fatalf("the other task's outbox enters %v\n%s", states(transitionsOf(oes)), describe(transitionsOf(oes)))
	}
	if es, err := s.OutboxEntries(ctx, task.NewTaskID(now)); err != nil || len(es) != 0 {
		t.Fatalf("entries of a task that does not exist: %d, %v", len(es), err)
	}
}

// undelivered returns the task's entries among Undelivered's over every
// group of due shards, due by dueBy, as the re-drive reads them; and the
// group that held them (a task's entries all share its shard).
func undelivered(t *testing.T, s Store, taskID string, dueBy time.Time) (mine []store.OutboxEntry, group []store.OutboxEntry) {
	t.Helper()
	for _, g := range s.OutboxGroups() {
		es, err := s.Undelivered(t.Context(), g, dueBy, 100)
		if err != nil {
			t.Fatalf("undelivered %v: %v", g, err)
		}
		var in []store.OutboxEntry
		for _, e := range es {
			if e.Delivered {
				t.Fatalf("Undelivered returned a delivered entry %s", e.EventID)
			}
			if e.TaskID == taskID {
				in = append(in, e)
			}
		}
		if len(in) > 0 {
			if mine != nil {
				t.Fatalf("task %s's entries in two groups of shards", taskID)
			}
			mine, group = in, es
		}
	}
	return mine, group
}

func docsOf(es []store.OutboxEntry) []string {
	var out []string
	for _, e := range es {
		if !slices.Contains(out, e.Doc) {
			out = append(out, e.Doc)
		}
	}
	return out
}

func seqsOf(es []store.OutboxEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// Undelivered returns a task's entries, a document's together; a failed
// delivery (MarkFailed) keeps a document back until its next try, then
// returns it after the others; a delivered one (DeleteDelivered) leaves
// Undelivered for good while OutboxEntries still lists its transitions,
// delivered. Both are no-ops on a document already gone.
func testOutboxDelivery(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now().UTC()
	// Stored QUEUED (two transitions in one commit), then started and
	// heartbeated (a commit of one transition, one of none).
	res := s.CreateMany(ctx, []task.Task{submitted(now, "acme", "")}, now, true)
	if len(res) != 1 || res[0].Err != nil || res[0].Task.State != api.Queued {
		t.Fatalf("create queued: %+v", res)
	}
	id := res[0].Task.ID
	mustAccept(t, s, id, started(1, "w1", now.Add(time.Second)))
	mustAccept(t, s, id, heartbeat(1, "w1", 5, now.Add(2*time.Second)))
	soon := time.Now().UTC().Add(time.Minute)

	mine, _ := undelivered(t, s, id, soon)
	if !slices.Equal(seqsOf(mine), []int64{1, 2, 3}) {
		t.Fatalf("undelivered seqs %v, want [1 2 3]", seqsOf(mine))
	}
	docs := docsOf(mine)
	if len(docs) < 2 {
		t.Fatalf("entries of two commits in %d outbox documents %v", len(docs), docs)
	}
	for _, e := range mine {
		if e.Doc == "" || e.Tries != 0 || e.NextTryAt.After(soon) {
			t.Fatalf("fresh entry %+v: want a document, no tries, due now", e)
		}
	}
	// The started transition's document fails delivery: it waits an hour.
	failed := mine[2].Doc
	later := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	if err := s.MarkFailed(ctx, []store.OutboxFailure{{EventID: failed, Tries: 1, NextTryAt: later}}); err != nil {
		t.Fatal(err)
	}
	mine, _ = undelivered(t, s, id, soon)
	if !slices.Equal(seqsOf(mine), []int64{1, 2}) || slices.Contains(docsOf(mine), failed) {
		t.Fatalf("after a failed delivery, undelivered seqs %v (documents %v), want [1 2] without %s", seqsOf(mine), docsOf(mine), failed)
	}
	mine, group := undelivered(t, s, id, later.Add(time.Minute))
	if !slices.Equal(seqsOf(mine), []int64{1, 2, 3}) {
		t.Fatalf("past the next try, undelivered seqs %v, want [1 2 3]", seqsOf(mine))
	}
	if e := mine[2]; e.Doc != failed || e.Tries != 1 || !e.NextTryAt.Equal(later) {
		t.Fatalf("failed entry: doc %s tries %d next %v, want %s, 1, %v", e.Doc, e.Tries, e.NextTryAt, failed, later)
	}
	// Earliest next try first: the failed document after every other.
	last := slices.IndexFunc(group, func(e store.OutboxEntry) bool { return e.Doc == failed })
	for _, e := range group[last:] {
		if e.Doc != failed {
			t.Fatalf("entry %s (next try %v) comes after the failed document (next try %v)", e.EventID, e.NextTryAt, later)
		}
	}

	// The other documents are delivered.
	delivered := slices.DeleteFunc(slices.Clone(docs), func(d string) bool { return d == failed })
	if err := s.DeleteDelivered(ctx, delivered); err != nil {
		t.Fatal(err)
	}
	mine, _ = undelivered(t, s, id, later.Add(time.Minute))
	if !slices.Equal(seqsOf(mine), []int64{3}) {
		t.Fatalf("after delivery, undelivered seqs %v, want [3]", seqsOf(mine))
	}
	es := checkOutbox(t, s, id)
	for _, e := range es {
		if want := e.Seq != 3; e.Delivered != want {
			t.Fatalf("entry seq %d delivered %v, want %v", e.Seq, e.Delivered, want)
		}
	}
	// Again, and a failure of a delivered document: nothing to do.
	if err := s.DeleteDelivered(ctx, delivered); err != nil {
		t.Fatalf("delete a delivered document again: %v", err)
	}
	if err := s.MarkFailed(ctx, []store.OutboxFailure{{EventID: delivered[0], Tries: 2, NextTryAt: later}}); err != nil {
		t.Fatalf("mark failed a delivered document: %v", err)
	}
	if err := s.DeleteDelivered(ctx, []string{failed}); err != nil {
		t.Fatal(err)
	}
	if mine, _ = undelivered(t, s, id, later.Add(time.Hour)); len(mine) != 0 {
		t.Fatalf("after every delivery, undelivered seqs %v", seqsOf(mine))
	}
	es = checkOutbox(t, s, id)
	for _, e := range es {
		if !e.Delivered {
			t.Fatalf("entry seq %d undelivered after its delivery", e.Seq)
		}
	}
	if len(es) != 3 {
		t.Fatalf("%d transitions after delivery, want 3", len(es))
	}
}
