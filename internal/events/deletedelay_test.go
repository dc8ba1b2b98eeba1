package events_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// countingOutbox is the real store counting DeleteDelivered's calls and
// the ids each deletes.
type countingOutbox struct {
	*store.Store
	mu    sync.Mutex
	calls [][]string
}

func (c *countingOutbox) DeleteDelivered(ctx context.Context, ids []string) error {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(ids))
	c.mu.Unlock()
	return c.Store.DeleteDelivered(ctx, ids)
}

// deletes returns the ids of each DeleteDelivered call so far.
func (c *countingOutbox) deletes() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// undelivered counts the outbox entries left, in every group of shards.
func (e *env) undelivered(t *testing.T) int {
	t.Helper()
	n := 0
	for _, shards := range e.st.OutboxGroups() {
		und, err := e.st.Undelivered(context.Background(), shards, e.clock.Now().Add(time.Hour), 1000)
		if err != nil {
			t.Fatal(err)
		}
		n += len(und)
	}
	return n
}

// createSpread creates n tasks through the hook, one commit each, spaced
// apart, and returns their (submit) event ids.
func createSpread(t *testing.T, st *store.Store, n int, spacing time.Duration) []string {
	t.Helper()
	var ids []string
	for range n {
		tk := submitted(time.Now(), "run_del", api.RetryPolicy{})
		create(t, st, tk)
		ids = append(ids, task.EventID(tk.ID, 1))
		time.Sleep(spacing)
	}
	return ids
}

// TestHookCoalescesDeletes: 20 commits 10 ms apart, delivered by the
// hook's sender, cost one DeleteDelivered commit for all 20 documents
// when DeleteDelay spans them (none before Flush, which forces it out at
// once rather than wait out the delay), against one per batch with no
// delay; every event is published and the outbox is left empty.
func TestHookCoalescesDeletes(t *testing.T) {
	const commits = 20
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{"no delay", -1},
		{"5s delay", 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			sub := e.subscribe(t, "ev-coal")
			co := &countingOutbox{Store: e.st}
			p := e.publisher(t, events.Config{Store: co, EventsTopic: "ev-coal", DeadLetterTopic: "dl-coal", DeleteDelay: tc.delay})
			e.st.OnCommit(p.Hook())
			start := time.Now()
			ids := createSpread(t, e.st, commits, 10*time.Millisecond)
			sub.waitIDs(t, ids, 1)
			held := len(co.deletes())
			// Before the delay, nothing is deleted (unless this machine
			// took most of it to commit).
			if elapsed := time.Since(start); tc.delay > 0 && elapsed < tc.delay*3/4 {
				if held != 0 {
					t.Errorf("%d DeleteDelivered calls %v into a %v delay, want 0", held, elapsed, tc.delay)
				}
				if n := e.undelivered(t); n != commits {
					t.Errorf("%d outbox entries while the deletes are held, want %d", n, commits)
				}
			}

			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			flushed := time.Now()
			if err := p.Flush(fctx); err != nil {
				t.Fatalf("Flush after %v: %v (it must delete at once, not wait out the delay)", time.Since(flushed), err)
			}
			calls := co.deletes()
			var deleted []string
			for _, c := range calls {
				deleted = append(deleted, c...)
			}
			t.Logf("%d commits: %d DeleteDelivered calls (%d before Flush); Flush took %v", commits, len(calls), held, time.Since(flushed))
			slices.Sort(deleted)
			want := slices.Sorted(slices.Values(ids))
			if !slices.Equal(deleted, want) {
				t.Errorf("deleted %v, want each of %v once", deleted, want)
			}
			switch {
			case tc.delay > 0 && len(calls) > 2:
				t.Errorf("%d DeleteDelivered calls, want 1 (or 2 on a slow machine)", len(calls))
			case tc.delay < 0 && len(calls) < 2:
				t.Errorf("%d DeleteDelivered call with no delay, want one per batch", len(calls))
			}
			if n := e.undelivered(t); n != 0 {
				t.Errorf("%d outbox entries left after Flush", n)
			}
		})
	}
}

// TestHookDeletesAfterTheDelay: with nothing more queued and no Flush, the
// sender deletes the delivered documents it holds once DeleteDelay has
// passed (it does not sleep until the next transition).
func TestHookDeletesAfterTheDelay(t *testing.T) {
	e := newEnv(t)
	sub := e.subscribe(t, "ev-later")
	co := &countingOutbox{Store: e.st}
	p := e.publisher(t, events.Config{Store: co, EventsTopic: "ev-later", DeadLetterTopic: "dl-later", DeleteDelay: 100 * time.Millisecond})
	e.st.OnCommit(p.Hook())
	ids := createSpread(t, e.st, 5, 10*time.Millisecond)
	sub.waitIDs(t, ids, 1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n := e.undelivered(t); n == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d outbox entries still there 10 s after delivery (DeleteDelivered calls: %v)", n, co.deletes())
		}
	}
	if calls := co.deletes(); len(calls) == 0 || len(calls) > len(ids) {
		t.Errorf("DeleteDelivered calls %v", calls)
	}
}

// TestCloseDeletesHeldDocuments: Close deletes the delivered documents the
// sender holds, at once rather than after DeleteDelay.
func TestCloseDeletesHeldDocuments(t *testing.T) {
	e := newEnv(t)
	sub := e.subscribe(t, "ev-close")
	co := &countingOutbox{Store: e.st}
	p := e.publisher(t, events.Config{Store: co, EventsTopic: "ev-close", DeadLetterTopic: "dl-close", DeleteDelay: time.Minute})
	e.st.OnCommit(p.Hook())
	ids := createSpread(t, e.st, 5, 10*time.Millisecond)
	sub.waitIDs(t, ids, 1)
	if calls := co.deletes(); len(calls) != 0 {
		t.Fatalf("DeleteDelivered calls %v within a minute's delay, want none", calls)
	}
	e.st.OnCommit(nil)
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s (waiting out the delay?)")
	}
	if calls := co.deletes(); len(calls) != 1 || len(calls[0]) != len(ids) {
		t.Errorf("DeleteDelivered calls %v, want one of the %d documents", calls, len(ids))
	}
	if n := e.undelivered(t); n != 0 {
		t.Errorf("%d outbox entries left after Close", n)
	}
}

// TestHookDeletesAFullCommitAtOnce: once the sender holds a commit's worth
// of delivered documents (500) it deletes them without waiting out
// DeleteDelay.
func TestHookDeletesAFullCommitAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	co := &countingOutbox{Store: e.st}
	p := e.publisher(t, events.Config{Store: co, EventsTopic: "ev-full", DeadLetterTopic: "dl-full", DeleteDelay: time.Minute})
	e.st.OnCommit(p.Hook())
	if err := events.EnsureTopics(ctx, e.ps, "ev-full"); err != nil {
		t.Fatal(err)
	}
	const perCommit, commits = 150, 4 // 600 documents
	for range commits {
		var many []task.Task
		for range perCommit {
			many = append(many, submitted(time.Now(), "run_full", api.RetryPolicy{}))
		}
		for _, r := range e.st.CreateMany(ctx, many, time.Now(), false) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(co.deletes()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no DeleteDelivered within 10 s with 600 delivered documents held")
		}
	}
	if first := co.deletes()[0]; len(first) != 500 {
		t.Errorf("first DeleteDelivered of %d documents, want a full commit (500)", len(first))
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range co.deletes() {
		total += len(c)
	}
	if total != perCommit*commits {
		t.Errorf("%d documents deleted, want %d", total, perCommit*commits)
	}
	if n := e.undelivered(t); n != 0 {
		t.Errorf("%d outbox entries left after Flush", n)
	}
}
