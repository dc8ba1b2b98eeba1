package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// entryOf returns the outbox entry of a task's transition to `to`.
func entryOf(t *testing.T, st *store.Store, tk task.Task, to api.State) store.OutboxEntry {
	t.Helper()
	entries, err := st.OutboxEntries(context.Background(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.To == to {
			return e
		}
	}
	t.Fatalf("task %s: no outbox entry to %s", tk.ID, to)
	return store.OutboxEntry{}
}

// TestRedriveIsolatesFailingEntries: the dead-letter topic does not exist
// (deleted, or never created), so the dead letters of three failed tasks
// cannot be published, with the real Pub/Sub emulator. One Redrive pass,
// reading 4 entries at a time, still delivers every other entry (the
// failing ones are spread over the batches); each failing entry gets a
// next try after the backoff, is not retried by the next pass, and once the
// topic exists and the backoff has passed, the next pass delivers its dead
// letter without republishing its event.
func TestRedriveIsolatesFailingEntries(t *testing.T) {
	e := newEnv(t)
	evSub := e.subscribe(t, events.DefaultEventsTopic)
	// No hook: every transition waits in the outbox for Redrive.
	p := e.publisher(t, events.Config{RedriveBatch: 4, RedriveMaxBatches: 50})

	now := time.Now()
	var tasks, ok, bad []task.Task
	var steps [][]step
	for i := range 9 {
		tk := submitted(now, "run_iso", api.RetryPolicy{MaxAttempts: 1})
		tasks = append(tasks, tk)
		if i%3 == 1 {
			bad, steps = append(bad, tk), append(steps, failHard)
		} else {
			ok, steps = append(ok, tk), append(steps, succeed)
		}
	}
	run(t, e.st, tasks, steps)
	e.clock.Advance(events.DefaultGrace + time.Second)

	beforeFirst := e.clock.Now()
	err := p.Redrive(context.Background())
	if !errors.Is(err, events.ErrUndelivered) {
		t.Fatalf("first pass: %v, want ErrUndelivered for the dead letters", err)
	}
	// Every entry of the good tasks, and every entry but the last of the
	// failed ones, was delivered in that one pass.
	outboxIDs(t, e.st, true, ok...)
	afterFirst := e.clock.Now()
	for _, tk := range bad {
		entries, err := e.st.OutboxEntries(context.Background(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if en.To != api.Failed {
				if !en.Delivered {
					t.Errorf("task %s: %s → %s not delivered", tk.ID, en.From, en.To)
				}
				continue
			}
			if en.Delivered || en.Tries != 1 || !en.EventPublished || en.NextTryAt.Before(beforeFirst.Add(events.RedriveMinBackoff)) {
				t.Errorf("task %s dead-letter entry: delivered %v tries %d eventPublished %v nextTryAt %v (pass at %v)",
					tk.ID, en.Delivered, en.Tries, en.EventPublished, en.NextTryAt, afterFirst)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	var allIDs []string
	for _, tk := range tasks {
		entries, _ := e.st.OutboxEntries(context.Background(), tk.ID)
		for _, en := range entries {
			allIDs = append(allIDs, en.EventID)
		}
	}
	evSub.waitIDs(t, allIDs, 1)

	// The next passes, before the backoff has passed, leave them alone.
	e.clock.Advance(events.RedriveMinBackoff / 2)
	if err := p.Redrive(context.Background()); err != nil {
		t.Fatalf("pass within the backoff: %v", err)
	}
	for _, tk := range bad {
		if en := entryOf(t, e.st, tk, api.Failed); en.Tries != 1 || en.Delivered {
			t.Fatalf("task %s retried within the backoff: tries %d delivered %v", tk.ID, en.Tries, en.Delivered)
		}
	}

	// The topic is back; after the backoff the dead letters go out.
	dlSub := e.subscribe(t, events.DefaultDeadLetterTopic)
	e.clock.Advance(events.RedriveMinBackoff)
	if err := p.Redrive(context.Background()); err != nil {
		t.Fatalf("pass after the backoff: %v", err)
	}
	var dlIDs []string
	for _, tk := range bad {
		en := entryOf(t, e.st, tk, api.Failed)
		if !en.Delivered {
			t.Fatalf("task %s: dead-letter entry not delivered after the backoff (tries %d)", tk.ID, en.Tries)
		}
		dlIDs = append(dlIDs, en.EventID)
	}
	dlSub.waitIDs(t, dlIDs, 1)
	// The retry published only the dead letters: each event went out once.
	for id, n := range countByID(evSub.snapshot()) {
		if n != 1 {
			t.Errorf("event %s published %d times, want 1", id, n)
		}
	}
}

// TestDeadLetterCapped: a task failed after 20 attempts, each with a
// 256 KiB output and a 16 KiB stack trace (5.4 MB of attempt records),
// publishes through the real Pub/Sub emulator a dead letter of at most
// MaxDeadLetterBytes that says it was truncated, keeps every attempt's
// record with its large fields cut to a marker, and keeps the identity.
func TestDeadLetterCapped(t *testing.T) {
	e := newEnv(t)
	dlSub := e.subscribe(t, events.DefaultDeadLetterTopic)
	p := e.publisher(t, events.Config{})
	e.st.OnCommit(p.Hook())

	const attempts = 20
	output := json.RawMessage(`{"rows":"` + strings.Repeat("r", api.MaxOutputBytes-20) + `"}`)
	stack := strings.Repeat("at frame\n", api.MaxStackTraceBytes/9)
	fail := func(n int) step {
		return apply(task.Event{Kind: task.EventCompleted, Attempt: n, WorkerID: "w-1",
			Completed: &api.CompletedRequest{Attempt: n, WorkerID: "w-1", Outcome: api.OutcomeFailed, Output: output,
				Error: &api.ErrorInfo{Category: api.CategoryUserCode, Message: "division by zero", StackTrace: stack}}})
	}
	tk := submitted(time.Now(), "run_big", api.RetryPolicy{MaxAttempts: attempts})
	steps := []step{create, enqueued(1)}
	for n := 1; n <= attempts; n++ {
		steps = append(steps, started(n), fail(n))
	}
	run(t, e.st, []task.Task{tk}, [][]step{steps})
	got, err := e.st.GetTask(context.Background(), tk.ID)
	if err != nil || got.State != api.Failed || got.Attempt != attempts {
		t.Fatalf("task %s attempt %d, %v", got.State, got.Attempt, err)
	}

	id := task.EventID(tk.ID, got.Seq)
	msgs := dlSub.waitIDs(t, []string{id}, 1)
	m := msgs[0]
	if len(m.data) > events.MaxDeadLetterBytes {
		t.Fatalf("dead letter of %d bytes, cap %d", len(m.data), events.MaxDeadLetterBytes)
	}
	d, err := events.DecodeDeadLetter(m.data)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Truncated || d.TaskID != tk.ID || d.Reason != api.ReasonRetriesExhausted || d.Attempt != attempts {
		t.Fatalf("dead letter: truncated %v task %s reason %s attempt %d", d.Truncated, d.TaskID, d.Reason, d.Attempt)
	}
	if len(d.Attempts)+d.OmittedAttempts != attempts || len(d.Attempts) == 0 || d.Attempts[len(d.Attempts)-1].Attempt != attempts {
		t.Fatalf("%d attempts + %d omitted, want %d ending with the last", len(d.Attempts), d.OmittedAttempts, attempts)
	}
	for _, a := range d.Attempts {
		var marker struct {
			Truncated bool `json:"truncated"`
			Bytes     int  `json:"bytes"`
		}
		if err := json.Unmarshal(a.Output, &marker); err != nil || !marker.Truncated || marker.Bytes != len(output) {
			t.Fatalf("attempt %d output %.80s: want a truncation marker of %d bytes", a.Attempt, a.Output, len(output))
		}
		if a.Error == nil || !strings.Contains(a.Error.StackTrace, events.TruncatedMarker) || a.Error.Message != "division by zero" {
			t.Fatalf("attempt %d error %+v", a.Attempt, a.Error)
		}
	}
	t.Logf("dead letter: %d bytes for %d attempts of %d KiB output", len(m.data), attempts, len(output)>>10)
}
