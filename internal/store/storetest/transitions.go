package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func testTransitions(t *testing.T, o Opener) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, o.New(t, Config{})) })
	t.Run("AttemptGuard", func(t *testing.T) { testAttemptGuard(t, o.New(t, Config{})) })
	t.Run("Terminal", func(t *testing.T) { testTerminal(t, o.New(t, Config{})) })
	t.Run("IdempotentCreate", func(t *testing.T) { testIdempotentCreate(t, o.New(t, Config{})) })
}

// A task goes create → enqueue → start → heartbeat → complete through
// Apply; every step's result is what is stored, and each transition is
// recorded once.
func testLifecycle(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, "acme", ""), now)
	if tk.State != api.Pending || tk.Attempt != 1 || tk.Seq != 1 {
		t.Fatalf("created %s attempt %d seq %d, want PENDING attempt 1 seq 1", tk.State, tk.Attempt, tk.Seq)
	}
	if got := mustGetTask(t, s, tk.ID); got.State != api.Pending || string(got.Payload) != `{"rows":10}` || got.TenantID != "acme" {
		t.Fatalf("stored %s payload %s tenant %s", got.State, got.Payload, got.TenantID)
	}
	steps := []struct {
		name        string
		ev          task.Event
		state       api.State
		transitions int
	}{
		{"enqueue", enqueued(1, now), api.Queued, 1},
		{"start", started(1, "w1", now.Add(time.Second)), api.Running, 1},
		{"heartbeat", heartbeat(1, "w1", 40, now.Add(2*time.Second)), api.Running, 0},
		{"complete", completed(1, "w1", api.OutcomeSucceeded, "", now.Add(3*time.Second)), api.Succeeded, 1},
	}
	seq := tk.Seq
	for _, st := range steps {
		r := mustApply(t, s, tk.ID, st.ev)
		if r.Rejection != nil {
			t.Fatalf("%s refused: %v", st.name, r.Rejection)
		}
		if len(r.Transitions) != st.transitions || r.Task.State != st.state {
			t.Fatalf("%s: %d transitions to %s, want %d to %s", st.name, len(r.Transitions), r.Task.State, st.transitions, st.state)
		}
		seq += int64(st.transitions)
		for _, tr := range r.Transitions {
			if tr.To != st.state || tr.Attempt != 1 {
				t.Fatalf("%s: transition %+v, want to %s of attempt 1", st.name, tr, st.state)
			}
		}
		got := mustGetTask(t, s, tk.ID)
		if got.State != st.state || got.Seq != seq || got.Seq != r.Task.Seq {
			t.Fatalf("%s: stored %s seq %d, result seq %d, want %s seq %d", st.name, got.State, got.Seq, r.Task.Seq, st.state, seq)
		}
		switch st.name {
		case "start":
			if got.LeaseExpiresAt == nil || !got.LeaseExpiresAt.After(now) {
				t.Fatalf("started: lease %v, want one after %v", got.LeaseExpiresAt, now)
			}
		case "heartbeat":
			full, err := s.Get(ctx, tk.ID)
			if err != nil || len(full.Attempts) != 1 {
				t.Fatalf("get after heartbeat: %d attempts, %v", len(full.Attempts), err)
			}
			a := full.Attempts[0]
			if a.WorkerID != "w1" || a.ProgressPct == nil || *a.ProgressPct != 40 || a.LastHeartbeatAt == nil || a.StartedAt == nil {
				t.Fatalf("attempt after heartbeat: %+v", a)
			}
			if !got.LeaseExpiresAt.After(now.Add(2*time.Second + heartbeatTimeout - time.Second)) {
				t.Fatalf("heartbeat did not renew the lease: %v", got.LeaseExpiresAt)
			}
		case "complete":
			if r.FinalState != api.Succeeded || got.EndedAt == nil || got.LeaseExpiresAt != nil || got.DispatchCheckAt != nil {
				t.Fatalf("completed: final %s ended %v lease %v check %v", r.FinalState, got.EndedAt, got.LeaseExpiresAt, got.DispatchCheckAt)
			}
		}
	}
	ended := mustGetTask(t, s, tk.ID)
	byID, err := s.Attempts(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	of, err := s.AttemptsOf(ctx, &ended)
	if err != nil {
		t.Fatal(err)
	}
	for name, as := range map[string][]task.Attempt{"Attempts": byID, "AttemptsOf": of} {
		if len(as) != 1 || as[0].Attempt != 1 || as[0].Outcome != api.OutcomeSucceeded || as[0].WorkerID != "w1" || string(as[0].Output) != `{"ok":true}` {
			t.Fatalf("%s after completion: %+v", name, as)
		}
	}
	es := checkOutbox(t, s, tk.ID)
	if want := []api.State{api.Pending, api.Queued, api.Running, api.Succeeded}; !slices.Equal(states(transitionsOf(es)), want) {
		t.Fatalf("outbox enters %v, want %v", states(transitionsOf(es)), want)
	}
}

// snapshot is what a refused event must leave as it was.
type snapshot struct {
	state    api.State
	attempt  int
	seq      int64
	updated  time.Time
	lease    time.Time
	workers  []string
	outcomes []api.Outcome
	entries  int
}

func snap(t *testing.T, s Store, id string) snapshot {
	t.Helper()
	tk, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	sn := snapshot{state: tk.State, attempt: tk.Attempt, seq: tk.Seq, updated: tk.UpdatedAt, entries: len(checkOutbox(t, s, id))}
	if tk.LeaseExpiresAt != nil {
		sn.lease = *tk.LeaseExpiresAt
	}
	for _, a := range tk.Attempts {
		sn.workers = append(sn.workers, a.WorkerID)
		sn.outcomes = append(sn.outcomes, a.Outcome)
	}
	return sn
}

func (a snapshot) equal(b snapshot) bool {
	return a.state == b.state && a.attempt == b.attempt && a.seq == b.seq && a.updated.Equal(b.updated) && a.lease.Equal(b.lease) &&
		slices.Equal(a.workers, b.workers) && slices.Equal(a.outcomes, b.outcomes) && a.entries == b.entries
}

// refusals applies each event to task id and checks it is refused with
// its code (or, for "", accepted as a no-op) and changes nothing.
func refusals(t *testing.T, s Store, id string, cases []refusal) {
	t.Helper()
	before := snap(t, s, id)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustApply(t, s, id, c.ev)
			switch {
			case c.code == "" && r.Rejection != nil:
				t.Errorf("refused %v, want a no-op", r.Rejection)
			case c.code != "" && (r.Rejection == nil || r.Rejection.Code != c.code):
				t.Errorf("rejection %v, want %s", r.Rejection, c.code)
			}
			if c.replay != r.Replay {
				t.Errorf("replay %v, want %v", r.Replay, c.replay)
			}
			if r.Write || len(r.Transitions) > 0 {
				t.Errorf("wrote %v with %d transitions, want nothing written", r.Write, len(r.Transitions))
			}
			if after := snap(t, s, id); !after.equal(before) {
				t.Errorf("the task changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

type refusal struct {
	name   string
	ev     task.Event
	code   string // the rejection's code; "": accepted, changing nothing
	replay bool
}

// Attempt 1 failed and was retried; attempt 2 runs on w2. A callback of
// attempt 1, or of attempt 2 from another worker, is refused and changes
// nothing.
func testAttemptGuard(t *testing.T, s Store) {
	now := time.Now().UTC()
	tk := runningTask(t, s, now, "w1")
	r := mustAccept(t, s, tk.ID, completed(1, "w1", api.OutcomeFailed, api.CategoryUserCode, now.Add(time.Second)))
	if !r.RetryScheduled || r.NextAttempt != 2 || r.Task.State != api.Queued || r.Task.Attempt != 2 {
		t.Fatalf("retryable failure: retry %v next %d state %s attempt %d, want attempt 2 QUEUED", r.RetryScheduled, r.NextAttempt, r.Task.State, r.Task.Attempt)
	}
	mustAccept(t, s, tk.ID, started(2, "w2", now.Add(2*time.Second)))
	at := now.Add(3 * time.Second)
	refusals(t, s, tk.ID, []refusal{
		{"stale started", started(1, "w1", at), api.CodeAttemptMismatch, false},
		{"stale heartbeat", heartbeat(1, "w1", 90, at), api.CodeAttemptMismatch, false},
		{"stale completed", completed(1, "w1", api.OutcomeSucceeded, "", at), api.CodeAttemptMismatch, false},
		{"future attempt", completed(3, "w2", api.OutcomeSucceeded, "", at), api.CodeAttemptMismatch, false},
		{"wrong worker started", started(2, "w3", at), api.CodeAttemptAlreadyStarted, false},
		{"wrong worker heartbeat", heartbeat(2, "w3", 90, at), api.CodeAttemptAlreadyStarted, false},
		{"wrong worker completed", completed(2, "w3", api.OutcomeSucceeded, "", at), api.CodeAttemptAlreadyStarted, false},
		{"claim of a started attempt", claimed(2, "w2", at), api.CodeAttemptAlreadyStarted, false},
		{"repeated started", started(2, "w2", at), "", false},
	})
	// The right worker's completion still goes through.
	done := mustAccept(t, s, tk.ID, completed(2, "w2", api.OutcomeSucceeded, "", now.Add(4*time.Second)))
	if done.FinalState != api.Succeeded {
		t.Fatalf("attempt 2's completion: final %s", done.FinalState)
	}
	got, err := s.Get(t.Context(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Attempts) != 2 || got.Attempts[0].Outcome != api.OutcomeFailed || got.Attempts[1].Outcome != api.OutcomeSucceeded || got.Attempts[1].WorkerID != "w2" {
		t.Fatalf("attempts %+v, want 1 FAILED, 2 SUCCEEDED by w2", got.Attempts)
	}
	checkOutbox(t, s, tk.ID)
}

// A terminal task refuses every further event (task_already_terminal, or
// completion_conflict for another report of the attempt that ended it),
// replays an identical completion, and changes nothing.
func testTerminal(t *testing.T, s Store) {
	now := time.Now().UTC()
	tk := runningTask(t, s, now, "w1")
	done := completed(1, "w1", api.OutcomeSucceeded, "", now.Add(time.Second))
	mustAccept(t, s, tk.ID, done)
	at := now.Add(2 * time.Second)
	lease := task.Event{Kind: task.EventLeaseExpired, Attempt: 1, Now: now.Add(time.Hour)}
	refusals(t, s, tk.ID, []refusal{
		{"started", started(1, "w1", at), api.CodeTaskAlreadyTerminal, false},
		{"heartbeat", heartbeat(1, "w1", 50, at), api.CodeTaskAlreadyTerminal, false},
		{"cancel", cancel(at), api.CodeTaskAlreadyTerminal, false},
		{"claimed", claimed(1, "w9", at), api.CodeTaskAlreadyTerminal, false},
		{"another report", completed(1, "w1", api.OutcomeFailed, api.CategoryDataQuality, at), api.CodeCompletionConflict, false},
		{"identical report", done, "", true},
		{"lease expired", lease, "", false},
		{"enqueued", enqueued(1, at), "", false},
	})
	// A task cancelled before it started is as terminal.
	q := queuedTask(t, s, now)
	if r := mustAccept(t, s, q.ID, cancel(now)); r.Task.State != api.Cancelled || !r.Dequeue {
		t.Fatalf("cancel of a queued task: %s dequeue %v, want CANCELLED and a dequeue", r.Task.State, r.Dequeue)
	}
	refusals(t, s, q.ID, []refusal{
		{"started after cancel", started(1, "w1", at), api.CodeTaskAlreadyTerminal, false},
		{"completed after cancel", completed(1, "w1", api.OutcomeSucceeded, "", at), api.CodeTaskAlreadyTerminal, false},
	})
}

// The same idempotency key returns the task it first created (existed),
// whether through Create or CreateMany; another tenant's key is its own.
func testIdempotentCreate(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now().UTC()
	first, existed, err := s.Create(ctx, submitted(now, "acme", "key-1"), now)
	if err != nil || existed {
		t.Fatalf("first create: existed %v, %v", existed, err)
	}
	again := submitted(now.Add(time.Millisecond), "acme", "key-1")
	again.Payload = []byte(`{"rows":99}`)
	got, existed, err := s.Create(ctx, again, now)
	if err != nil || !existed {
		t.Fatalf("repeated key: existed %v, %v; want the existing task", existed, err)
	}
	if got.ID != first.ID || string(got.Payload) != `{"rows":10}` || got.State != api.Pending {
		t.Fatalf("repeated key returned %s %s %s, want the first task %s", got.ID, got.Payload, got.State, first.ID)
	}
	if _, err := s.GetTask(ctx, again.ID); !isNotFound(err) {
		t.Fatalf("the repeat's own id %s: %v, want store.ErrNotFound", again.ID, err)
	}
	res := s.CreateMany(ctx, []task.Task{submitted(now, "acme", "key-1"), submitted(now, "acme", "key-2")}, now, false)
	if len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("create many: %+v", res)
	}
	if !res[0].Existed || res[0].Task.ID != first.ID || res[1].Existed || res[1].Task.ID == first.ID {
		t.Fatalf("create many: [%s existed %v] [%s existed %v], want the first task then a new one", res[0].Task.ID, res[0].Existed, res[1].Task.ID, res[1].Existed)
	}
	other, existed, err := s.Create(ctx, submitted(now, "globex", "key-1"), now)
	if err != nil || existed || other.ID == first.ID {
		t.Fatalf("another tenant's key: %s existed %v, %v; want a task of its own", other.ID, existed, err)
	}
	// The repeats wrote no transition.
	if es := checkOutbox(t, s, first.ID); len(es) != 1 {
		t.Fatalf("the first task has %d transitions after repeats, want 1", len(es))
	}
}
