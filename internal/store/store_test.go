package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }

func newStore(t *testing.T, opts ...store.Option) (*store.Store, *store.RPCCounter) {
	t.Helper()
	c := store.NewRPCCounter()
	s, err := store.New(context.Background(), emulatortest.ProjectID(t), append([]store.Option{store.WithRPCCounter(c)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

// sameProject opens a second, independent client on s's project.
func sameProject(t *testing.T, s *store.Store) *store.Store {
	t.Helper()
	o, err := store.New(context.Background(), s.Project())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func submitted(now time.Time, key string) task.Task {
	return task.Task{
		ID: task.NewTaskID(now), RunID: "run_x", TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
		Payload: json.RawMessage(`{"rows":10}`), IdempotencyKey: key,
		Timing: api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000},
	}
}

func mustCreate(t *testing.T, s *store.Store, tk task.Task, now time.Time) task.Task {
	t.Helper()
	created, _, err := s.Create(context.Background(), tk, now)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func mustApply(t *testing.T, s *store.Store, id string, ev task.Event) task.Result {
	t.Helper()
	r, err := s.Apply(context.Background(), id, ev)
	if err != nil {
		t.Fatalf("apply %s: %v", ev.Kind, err)
	}
	return r
}

func TestCreateGetAndOutbox(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, ""), now)
	got, err := s.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.Pending || got.Attempt != 1 || string(got.Payload) != `{"rows":10}` || len(got.Attempts) != 1 || got.Timing.StartTimeoutMs == 0 {
		t.Fatalf("unexpected task %+v", got)
	}
	if _, err := s.Get(ctx, "task_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	ob, err := s.OutboxEntries(ctx, tk.ID)
	if err != nil || len(ob) != 1 || ob[0].To != api.Pending || ob[0].Delivered {
		t.Fatalf("outbox after create: %+v %v", ob, err)
	}
	shard := store.DueShardOf(tk.ID, s.DueShards())
	und, err := s.Undelivered(ctx, []int{shard}, now.Add(time.Minute), 10)
	if err != nil || len(und) != 1 {
		t.Fatalf("undelivered: %+v %v", und, err)
	}
	if err := s.DeleteDelivered(ctx, []string{und[0].EventID}); err != nil {
		t.Fatal(err)
	}
	if und, _ = s.Undelivered(ctx, []int{shard}, now.Add(time.Minute), 10); len(und) != 0 {
		t.Fatalf("still undelivered: %+v", und)
	}
}

func TestIdempotentCreateUnderConcurrency(t *testing.T) {
	s, _ := newStore(t)
	now := time.Now().UTC()
	const n = 20
	ids := make([]string, n)
	var fresh int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			created, existed, err := s.Create(context.Background(), submitted(now, "same-key"), now)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = created.ID
			if !existed {
				mu.Lock()
				fresh++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if fresh != 1 {
		t.Fatalf("%d creates wrote a task, want exactly 1", fresh)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("same key returned different tasks: %v", ids)
		}
	}
	tasks, _, err := s.List(context.Background(), store.ListFilter{TenantID: "acme"})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("want 1 stored task, got %d (%v)", len(tasks), err)
	}
	// Another tenant with the same key gets its own task.
	other := submitted(now, "same-key")
	other.TenantID = "globex"
	if _, existed, err := s.Create(context.Background(), other, now); err != nil || existed {
		t.Fatalf("other tenant: existed=%v err=%v", existed, err)
	}
}

// TestRoundTripsPerOperation measures Firestore RPCs per store operation.
func TestRoundTripsPerOperation(t *testing.T) {
	s, c := newStore(t)
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, ""), now)
	p := 10
	steps := []struct {
		name string
		ev   task.Event
		want map[string]int
	}{
		{"enqueued", task.Event{Kind: task.EventEnqueued, Attempt: 1}, map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"started", task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"}, map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"duplicate started", task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1"}, map[string]int{"BatchGetDocuments": 1}},
		{"heartbeat", task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: "w1", Heartbeat: &api.HeartbeatRequest{ProgressPct: &p}}, map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"cancel", task.Event{Kind: task.EventCancel, Reason: "user_requested"}, map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
		{"completed", task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Completed: &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeCancelled}}, map[string]int{"BatchGetDocuments": 1, "Commit": 1}},
	}
	for _, st := range steps {
		c.Reset()
		st.ev.Now = time.Now().UTC()
		mustApply(t, s, tk.ID, st.ev)
		got := c.Counts()
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("%s: RPCs %v, want %v", st.name, got, st.want)
		}
	}
	c.Reset()
	mustCreate(t, s, submitted(now, ""), now)
	if got := c.Counts(); got["Commit"] != 1 || c.Total() != 1 {
		t.Errorf("create: RPCs %v, want one Commit", got)
	}
}

// TestConcurrentConflictingEvents races goroutines applying conflicting
// events to one task against the real emulator and checks the invariants.
func TestConcurrentConflictingEvents(t *testing.T) {
	ctx := context.Background()
	running := func(t *testing.T, s *store.Store, maxAttempts int) task.Task {
		now := time.Now().UTC()
		sub := submitted(now, "")
		sub.Retry.MaxAttempts = maxAttempts
		tk := mustCreate(t, s, sub, now)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: now})
		return tk
	}
	done := func(o api.Outcome, c api.Category) *api.CompletedRequest {
		r := &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: o, Output: json.RawMessage(`{"ok":true}`)}
		if o == api.OutcomeFailed {
			r.Output, r.Error = nil, &api.ErrorInfo{Category: c, Message: "x"}
		}
		return r
	}
	// race applies the events at once from goroutines split across two
	// independent clients (two "instances"): within a client the store
	// serialises a task's transactions, across clients Firestore decides.
	race := func(evs []task.Event, id string, s *store.Store) []task.Result {
		other := sameProject(t, s)
		clients := []*store.Store{s, other}
		results := make([]task.Result, len(evs))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, ev := range evs {
			wg.Add(1)
			go func(i int, ev task.Event) {
				defer wg.Done()
				<-start
				r, err := clients[i%2].Apply(ctx, id, ev)
				if err != nil {
					t.Errorf("apply: %v", err)
					r.Rejection = &task.Rejection{Code: "error"}
				}
				results[i] = r
			}(i, ev)
		}
		close(start)
		wg.Wait()
		return results
	}
	// terminalEvents counts the outbox transitions into a terminal state.
	terminalEvents := func(t *testing.T, s *store.Store, id string) int {
		ob, err := s.OutboxEntries(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ob {
			if e.To.Terminal() || (e.From == api.Running && e.To == api.Queued) {
				n++
			}
		}
		return n
	}

	t.Run("identical completions", func(t *testing.T) {
		s, _ := newStore(t)
		tk := running(t, s, 3)
		var evs []task.Event
		for i := 0; i < 12; i++ {
			evs = append(evs, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(), Completed: done(api.OutcomeSucceeded, "")})
		}
		accepted, replays := 0, 0
		for _, r := range race(evs, tk.ID, s) {
			switch {
			case r.Rejection != nil:
				t.Errorf("identical completion refused: %v", r.Rejection)
			case r.Replay:
				replays++
			default:
				accepted++
			}
			if r.FinalState != api.Succeeded {
				t.Errorf("final state %s", r.FinalState)
			}
		}
		if accepted != 1 || replays != len(evs)-1 {
			t.Fatalf("accepted %d, replays %d", accepted, replays)
		}
		if n := terminalEvents(t, s, tk.ID); n != 1 {
			t.Fatalf("%d terminal events, want 1", n)
		}
	})

	t.Run("different outcomes", func(t *testing.T) {
		s, _ := newStore(t)
		tk := running(t, s, 3)
		evs := []task.Event{
			{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(), Completed: done(api.OutcomeSucceeded, "")},
			{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(), Completed: done(api.OutcomeFailed, api.CategoryDataQuality)},
		}
		res := race(evs, tk.ID, s)
		won, conflicts := 0, 0
		for _, r := range res {
			if r.Rejection == nil && !r.Replay {
				won++
			} else if r.Rejection != nil && r.Rejection.Code == api.CodeCompletionConflict {
				conflicts++
			}
		}
		if won != 1 || conflicts != 1 {
			t.Fatalf("won %d, conflicts %d: %+v", won, conflicts, res)
		}
		if n := terminalEvents(t, s, tk.ID); n != 1 {
			t.Fatalf("%d terminal events, want 1", n)
		}
	})

	t.Run("completion against zombie", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			s, _ := newStore(t)
			tk := running(t, s, 1)
			got, _ := s.GetTask(ctx, tk.ID)
			late := got.LeaseExpiresAt.Add(time.Millisecond)
			evs := []task.Event{
				{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(), Completed: done(api.OutcomeSucceeded, "")},
				{Kind: task.EventLeaseExpired, Attempt: 1, Now: late},
			}
			res := race(evs, tk.ID, s)
			final, _ := s.GetTask(ctx, tk.ID)
			completionWon := res[0].Rejection == nil
			zombieWon := len(res[1].Transitions) > 0
			if completionWon == zombieWon {
				t.Fatalf("exactly one must win: completion %v, zombie %v (%+v)", completionWon, zombieWon, res)
			}
			if completionWon && final.State != api.Succeeded || zombieWon && (final.State != api.Failed || final.Reason != api.ReasonHeartbeatTimeout) {
				t.Fatalf("final %s/%s does not match the winner", final.State, final.Reason)
			}
			if n := terminalEvents(t, s, tk.ID); n != 1 {
				t.Fatalf("%d terminal events, want 1", n)
			}
		}
	})

	t.Run("two attempts completing", func(t *testing.T) {
		s, _ := newStore(t)
		tk := running(t, s, 3)
		// Attempt 1's lease runs out (a zombie, no completion recorded):
		// attempt 2 is scheduled and started. Only the attempt guard stands
		// between attempt 1's late completions and the task.
		got, _ := s.GetTask(ctx, tk.ID)
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: got.LeaseExpiresAt.Add(time.Millisecond)})
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 2, WorkerID: "w2", Now: time.Now().UTC()})
		stale := done(api.OutcomeSucceeded, "")
		stale.Output = json.RawMessage(`{"stale":true}`)
		fresh := done(api.OutcomeSucceeded, "")
		fresh.Attempt, fresh.WorkerID = 2, "w2"
		var evs []task.Event
		for i := 0; i < 4; i++ {
			evs = append(evs,
				task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC(), Completed: stale},
				task.Event{Kind: task.EventCompleted, Attempt: 2, WorkerID: "w2", Now: time.Now().UTC(), Completed: fresh})
		}
		accepted := 0
		for i, r := range race(evs, tk.ID, s) {
			// attempt_mismatch while attempt 2 runs, task_already_terminal
			// once it has completed (docs/contract.md §4.5: terminal rows first).
			if i%2 == 0 && (r.Rejection == nil || r.Rejection.Code != api.CodeAttemptMismatch && r.Rejection.Code != api.CodeTaskAlreadyTerminal) {
				t.Errorf("stale attempt 1 must be refused, got %+v", r.Rejection)
			}
			if i%2 == 1 && r.Rejection == nil && !r.Replay {
				accepted++
			}
		}
		if accepted != 1 {
			t.Fatalf("attempt 2 accepted %d times, want 1", accepted)
		}
		final, _ := s.Get(ctx, tk.ID)
		if final.State != api.Succeeded || final.Attempt != 2 || string(final.Attempts[1].Output) != `{"ok":true}` {
			t.Fatalf("final %+v", final)
		}
	})
}

func TestListPagination(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		sub := submitted(now.Add(time.Duration(i)*time.Millisecond), "")
		if i%2 == 0 {
			sub.RunID = "run_even"
		}
		want[mustCreate(t, s, sub, now).ID] = true
	}
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		page, next, err := s.List(ctx, store.ListFilter{TenantID: "acme", PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tk := range page {
			if seen[tk.ID] {
				t.Fatalf("%s listed twice", tk.ID)
			}
			seen[tk.ID] = true
		}
		if next == "" {
			break
		}
		token = next
	}
	if pages != 3 || len(seen) != len(want) {
		t.Fatalf("pages %d, seen %d of %d", pages, len(seen), len(want))
	}
	even, _, err := s.List(ctx, store.ListFilter{RunID: "run_even", State: api.Pending})
	if err != nil || len(even) != 4 {
		t.Fatalf("run filter: %d %v", len(even), err)
	}
	if _, _, err := s.List(ctx, store.ListFilter{PageToken: "garbage!"}); !errors.Is(err, store.ErrInvalidPageToken) {
		t.Fatalf("bad token: %v", err)
	}
}

func TestDueTasksReturnsOnlyDue(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	var due []string
	for i := 0; i < 5; i++ {
		tk := mustCreate(t, s, submitted(now, ""), now)
		// Start i seconds ago with a 3 s timeout: leases end at now-i+3.
		mustApply(t, s, tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w", Now: now.Add(-time.Duration(i) * time.Second)})
		if 3-i <= 0 {
			due = append(due, tk.ID)
		}
	}
	var got []string
	for _, group := range s.DueGroups(store.DueLease) {
		var cursor *store.DueCursor
		for {
			page, err := s.DueTasks(ctx, store.DueLease, group, now, 1, cursor)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, tk := range page {
				if !slices.Contains(group, tk.DueShard) {
					t.Fatalf("group %v's query returned %s of shard %d", group, tk.ID, tk.DueShard)
				}
				got = append(got, tk.ID)
			}
			last := page[len(page)-1]
			cursor = &store.DueCursor{At: *store.DueTime(store.DueLease, &last), ID: last.ID}
		}
	}
	if fmt.Sprint(len(got)) != fmt.Sprint(len(due)) {
		t.Fatalf("due %v, want %v", got, due)
	}
	for _, id := range due {
		found := false
		for _, g := range got {
			found = found || g == id
		}
		if !found {
			t.Fatalf("%s missing from due %v", id, got)
		}
	}
}

// List merges one query per due shard (or group of due shards, past
// store.MaxListQueries): every task once, in order, oldest or newest first,
// over pages, at a cost bounded by the page size and the number of queries
// G (not by the tasks matched): at most G+4 queries a page, reading at
// most size+1 + 3×G documents (each query's share of the page and 2
// more, then the few a query that stopped early still owes).
func TestListShardedMerge(t *testing.T) {
	for _, shards := range []int{store.DefaultDueShards, 40} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) { testListShardedMerge(t, shards) })
	}
}

func testListShardedMerge(t *testing.T, shards int) {
	c := store.NewRPCCounter()
	s, err := store.New(context.Background(), emulatortest.ProjectID(t), store.WithRPCCounter(c), store.WithDueShards(shards))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	now := time.Now().UTC()
	var subs []task.Task
	for i := range 100 {
		sub := submitted(now.Add(time.Duration(i)*time.Millisecond), "")
		if i%5 == 0 {
			sub.TenantID = "other"
		}
		subs = append(subs, sub)
	}
	var acme []string
	for _, r := range s.CreateMany(ctx, subs, now, false) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Task.TenantID == "acme" {
			acme = append(acme, r.Task.ID)
		}
	}
	slices.Sort(acme)
	// More shards than the default spread the index writes further; they
	// must not make a page dearer than with the default.
	queries := min(shards, store.MaxListQueries)
	tests := []struct {
		name   string
		newest bool
		size   int
	}{
		{"oldest first, pages of 10", false, 10},
		{"newest first, pages of 10", true, 10},
		{"oldest first, pages of 25", false, 25},
		{"newest first, one page", true, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := slices.Clone(acme)
			if tc.newest {
				slices.Reverse(want)
			}
			var got []string
			for tok := ""; ; {
				c.Reset()
				page, next, err := s.List(ctx, store.ListFilter{TenantID: "acme", NewestFirst: tc.newest, PageSize: tc.size, PageToken: tok})
				if err != nil {
					t.Fatal(err)
				}
				ran, read := c.Counts()["RunQuery"], c.Usage().DocsRead
				t.Logf("page of %d: %d queries, %d documents read", len(page), ran, read)
				if ran < queries || ran > queries+4 || c.Usage().RPCs != ran {
					t.Errorf("page of %d: %d queries (%d RPCs), want %d to %d", len(page), ran, c.Usage().RPCs, queries, queries+4)
				}
				if read > tc.size+1+3*queries {
					t.Errorf("page of %d: %d documents read, want at most %d", len(page), read, tc.size+1+3*queries)
				}
				for _, tk := range page {
					got = append(got, tk.ID)
				}
				if tok = next; tok == "" {
					break
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("listed %d tasks\n%v\nwant %d\n%v", len(got), got, len(want), want)
			}
		})
	}
}
