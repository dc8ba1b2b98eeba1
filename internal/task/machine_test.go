package task

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

var t0 = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)

func newTestTask() (Task, Attempt) {
	tk, a, _ := NewTask(Task{ID: NewTaskID(t0), RunID: NewRunID(t0), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w"}, t0)
	return tk, a
}

// taskIn returns a task in state s at t0 (attempt 1, lease and cancel
// deadline in the future) and its current attempt record.
func taskIn(s api.State) (Task, *Attempt) {
	tk, a := newTestTask()
	step := func(ev Event) {
		r := Apply(tk, &a, ev)
		tk = r.Task
		if r.Attempt != nil {
			a = *r.Attempt
		}
	}
	switch s {
	case api.Pending:
	case api.Queued:
		step(Event{Kind: EventEnqueued, Attempt: 1, Now: t0})
	case api.Running:
		step(Event{Kind: EventStarted, Attempt: 1, WorkerID: "w1", Now: t0})
	case api.Cancelling:
		step(Event{Kind: EventStarted, Attempt: 1, WorkerID: "w1", Now: t0})
		step(Event{Kind: EventCancel, Now: t0, Reason: "user_requested"})
	case api.Succeeded, api.Failed, api.Cancelled:
		o := map[api.State]api.Outcome{api.Succeeded: api.OutcomeSucceeded, api.Failed: api.OutcomeFailed, api.Cancelled: api.OutcomeCancelled}[s]
		step(Event{Kind: EventStarted, Attempt: 1, WorkerID: "w1", Now: t0})
		step(Event{Kind: EventCompleted, Attempt: 1, WorkerID: "w1", Now: t0, Completed: completion(o, api.CategoryDataQuality)})
	}
	if tk.State != s {
		panic(fmt.Sprintf("setup: want %s, got %s", s, tk.State))
	}
	return tk, &a
}

func completion(o api.Outcome, c api.Category) *api.CompletedRequest {
	r := &api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: o}
	if o == api.OutcomeFailed {
		r.Error = &api.ErrorInfo{Category: c, Message: "boom"}
	}
	return r
}

// eventFor builds an event of kind k for attempt 1 at time now.
func eventFor(k EventKind, now time.Time) Event {
	ev := Event{Kind: k, Attempt: 1, Now: now, WorkerID: "w1", MaxRedrives: 3}
	switch k {
	case EventHeartbeat:
		p := 50
		ev.Heartbeat = &api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: &p}
	case EventCompleted:
		ev.Completed = completion(api.OutcomeSucceeded, "")
	case EventCancel:
		ev.Attempt = 0
	}
	return ev
}

// TestEveryStateEventPair applies every event to every state, both before
// and after every timer is due, and checks the result against Edges.
func TestEveryStateEventPair(t *testing.T) {
	for _, s := range api.States {
		for _, k := range EventKinds {
			for _, late := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/late=%v", s, k, late)
				t.Run(name, func(t *testing.T) {
					tk, a := taskIn(s)
					now := t0.Add(time.Second)
					if late {
						now = t0.Add(48 * time.Hour)
						d := t0.Add(24 * time.Hour)
						tk.Deadline = &d
					}
					r := Apply(tk, a, eventFor(k, now))
					allowed := append([]api.State{s}, Edges[s][k]...)
					if !slices.Contains(allowed, r.Task.State) {
						t.Fatalf("%s --%s--> %s: not in Edges (allowed %v)", s, k, r.Task.State, allowed)
					}
					if s.Terminal() && (r.Write || r.Task.State != s) {
						t.Fatalf("terminal state %s changed by %s", s, k)
					}
					if r.Task.Attempt < tk.Attempt {
						t.Fatalf("attempt decreased")
					}
					if len(r.Transitions) == 0 && r.Task.State != s {
						t.Fatalf("state changed without a transition")
					}
					for _, tr := range r.Transitions {
						if tr.To != api.Pending && !slices.Contains(append(allEdgeTargets(tr.From), tr.From), tr.To) {
							t.Fatalf("transition %s→%s not in Edges", tr.From, tr.To)
						}
					}
				})
			}
		}
	}
}

func allEdgeTargets(s api.State) []api.State {
	var out []api.State
	for _, to := range Edges[s] {
		out = append(out, to...)
	}
	return out
}

func TestCallbackPrecedence(t *testing.T) {
	cases := []struct {
		name  string
		state api.State
		ev    func(Event) Event
		code  string
	}{
		{"terminal task", api.Cancelled, func(e Event) Event { e.Kind = EventStarted; return e }, api.CodeTaskAlreadyTerminal},
		{"older attempt", api.Running, func(e Event) Event { e.Kind = EventHeartbeat; e.Attempt = 0; return e }, api.CodeAttemptMismatch},
		{"other worker", api.Running, func(e Event) Event { e.Kind = EventStarted; e.WorkerID = "w2"; return e }, api.CodeAttemptAlreadyStarted},
		{"lease expired", api.Running, func(e Event) Event { e.Kind = EventHeartbeat; e.Now = t0.Add(time.Hour); return e }, api.CodeTaskExpired},
		{"other worker beats expiry", api.Running, func(e Event) Event {
			e.Kind = EventHeartbeat
			e.WorkerID = "w2"
			e.Now = t0.Add(time.Hour)
			return e
		}, api.CodeAttemptAlreadyStarted},
		{"another tenant's token", api.Running, func(e Event) Event {
			e.Kind = EventHeartbeat
			e.TenantID, e.WorkspaceID, e.RunID = "globex", "ws", "run_x"
			return e
		}, api.CodeTokenScopeMismatch},
		{"different completion", api.Succeeded, func(e Event) Event {
			e.Kind = EventCompleted
			e.Completed = completion(api.OutcomeFailed, api.CategoryUserCode)
			return e
		}, api.CodeCompletionConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(c.state)
			ev := c.ev(eventFor(EventHeartbeat, t0.Add(time.Second)))
			if ev.Attempt == 0 {
				tk.Attempt = 2 // the event is for an older attempt
			}
			r := Apply(tk, a, ev)
			if r.Rejection == nil || r.Rejection.Code != c.code {
				t.Fatalf("got %+v, want %s", r.Rejection, c.code)
			}
		})
	}
}

func TestIdenticalCompletionReplays(t *testing.T) {
	tk, a := taskIn(api.Succeeded)
	r := Apply(tk, a, Event{Kind: EventCompleted, Attempt: 1, WorkerID: "w1", Now: t0.Add(time.Minute), Completed: completion(api.OutcomeSucceeded, "")})
	if !r.Replay || r.Write || r.Rejection != nil || r.FinalState != api.Succeeded {
		t.Fatalf("want replay without write, got %+v", r)
	}
}

func TestRetryDecisions(t *testing.T) {
	deadlineSoon := t0.Add(2 * time.Second)
	no := false
	cases := []struct {
		name       string
		category   api.Category
		retryable  *bool
		attempt    int
		deadline   *time.Time
		wantState  api.State
		wantReason string
	}{
		{"user code retries", api.CategoryUserCode, nil, 1, nil, api.Queued, api.ReasonRetryScheduled},
		{"infrastructure retries", api.CategoryInfrastructure, nil, 2, nil, api.Queued, api.ReasonRetryScheduled},
		{"data quality never", api.CategoryDataQuality, nil, 1, nil, api.Failed, api.ReasonNonRetryable},
		{"configuration never", api.CategoryConfiguration, nil, 1, nil, api.Failed, api.ReasonNonRetryable},
		{"worker advises no", api.CategoryUserCode, &no, 1, nil, api.Failed, api.ReasonNonRetryable},
		{"attempts exhausted", api.CategoryUserCode, nil, 3, nil, api.Failed, api.ReasonRetriesExhausted},
		{"deadline before retry", api.CategoryTimeout, nil, 1, &deadlineSoon, api.Failed, api.ReasonDeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(api.Running)
			tk.Attempt, a.Attempt = c.attempt, c.attempt
			tk.Deadline = c.deadline
			tk.Retry = api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 30000, BackoffCoefficient: 2, MaxBackoffMs: 600000}
			a.Checkpoint = json.RawMessage(`{"partition":4}`)
			cr := completion(api.OutcomeFailed, c.category)
			cr.Attempt = c.attempt
			cr.Error.Retryable = c.retryable
			r := Apply(tk, a, Event{Kind: EventCompleted, Attempt: c.attempt, WorkerID: "w1", Now: t0.Add(time.Second), Completed: cr, Jitter: 0.999})
			if r.Task.State != c.wantState || r.Transitions[len(r.Transitions)-1].Reason != c.wantReason {
				t.Fatalf("got %s/%s, want %s/%s", r.Task.State, r.Transitions[len(r.Transitions)-1].Reason, c.wantState, c.wantReason)
			}
			if c.wantState == api.Queued {
				if r.Next == nil || r.Task.Attempt != c.attempt+1 || !r.Enqueue || !r.RetryScheduled || r.NextAttempt != c.attempt+1 {
					t.Fatalf("retry not scheduled: %+v", r)
				}
				if string(r.Task.ResumeFrom) != `{"partition":4}` {
					t.Fatalf("checkpoint not carried: %s", r.Task.ResumeFrom)
				}
				if r.Task.NotBefore == nil || !r.Task.NotBefore.After(t0) {
					t.Fatalf("no schedule time")
				}
			} else if !r.Transitions[len(r.Transitions)-1].DeadLetter {
				t.Fatalf("FAILED must be a dead letter")
			}
		})
	}
}

func TestBackoffSchedule(t *testing.T) {
	p := api.CategoryRetry{MaxAttempts: 10, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 5000}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 5 * time.Second}, {60, 5 * time.Second}, {10000, 5 * time.Second}} {
		if got := BackoffCap(p, c.n); got != c.want {
			t.Errorf("BackoffCap(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	if got := Backoff(p, 3, 0); got != 0 {
		t.Errorf("jitter 0: %v", got)
	}
	if got := Backoff(p, 3, 1); got >= 4*time.Second || got < 3*time.Second {
		t.Errorf("jitter 1 clamps below cap: %v", got)
	}
	if got := Backoff(p, 3, 0.5); got != 2*time.Second {
		t.Errorf("jitter 0.5: %v", got)
	}
}

// TestRandomSequencesKeepInvariants drives tasks through long random event
// sequences, including stale attempts and late timers, and checks the
// invariants after every step.
func TestRandomSequencesKeepInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := 0; seq < 300; seq++ {
		tk, a0 := newTestTask()
		tk.Retry.InitialBackoffMs = 1000
		attempts := map[int]*Attempt{1: &a0}
		now := t0
		terminalSeen := api.State("")
		eventIDs := map[string]int64{}
		for step := 0; step < 200; step++ {
			now = now.Add(time.Duration(rng.IntN(120_000)) * time.Millisecond)
			k := EventKinds[rng.IntN(len(EventKinds))]
			ev := eventFor(k, now)
			ev.Attempt = max(1, tk.Attempt-rng.IntN(2))
			if k == EventCancel {
				ev.Attempt = 0
			}
			ev.WorkerID = []string{"w1", "w2"}[rng.IntN(2)]
			ev.Jitter = rng.Float64()
			if k == EventCompleted {
				o := []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeCancelled}[rng.IntN(3)]
				ev.Completed = completion(o, Categories[rng.IntN(len(Categories))])
				ev.Completed.Attempt, ev.Completed.WorkerID = ev.Attempt, ev.WorkerID
			}
			which := ev.Attempt
			if which == 0 {
				which = tk.Attempt
			}
			before := tk
			r := Apply(tk, attempts[which], ev)
			// Invariants.
			if before.State.Terminal() && (r.Write || r.Task.State != before.State) {
				t.Fatalf("seq %d step %d: terminal %s changed by %s", seq, step, before.State, k)
			}
			if r.Task.Attempt < before.Attempt || r.Task.Seq < before.Seq {
				t.Fatalf("seq %d step %d: attempt or seq decreased", seq, step)
			}
			if ev.Attempt != 0 && ev.Attempt < before.Attempt && (r.Write || r.Task.State != before.State) {
				t.Fatalf("seq %d step %d: older attempt %d changed the task (current %d) with %s", seq, step, ev.Attempt, before.Attempt, k)
			}
			if before.LeaseExpiresAt != nil && !now.Before(*before.LeaseExpiresAt) && r.Task.Attempt == before.Attempt &&
				r.Task.LeaseExpiresAt != nil && r.Task.LeaseExpiresAt.After(*before.LeaseExpiresAt) {
				t.Fatalf("seq %d step %d: an expired lease came back via %s", seq, step, k)
			}
			if !slices.Contains(append([]api.State{before.State}, Edges[before.State][k]...), r.Task.State) {
				t.Fatalf("seq %d step %d: %s --%s--> %s not in Edges", seq, step, before.State, k, r.Task.State)
			}
			for _, tr := range r.Transitions {
				if prev, dup := eventIDs[tr.EventID]; dup {
					t.Fatalf("seq %d step %d: transition seq %d (%s→%s) has the event id of transition seq %d: the outbox would keep one of them", seq, step, tr.Seq, tr.From, tr.To, prev)
				}
				eventIDs[tr.EventID] = tr.Seq
			}
			if r.Task.State.Terminal() {
				if terminalSeen != "" && terminalSeen != r.Task.State {
					t.Fatalf("two terminal outcomes")
				}
				terminalSeen = r.Task.State
			}
			tk = r.Task
			if r.Attempt != nil {
				c := *r.Attempt
				attempts[c.Attempt] = &c
			}
			if r.Next != nil {
				n := *r.Next
				attempts[n.Attempt] = &n
			}
		}
	}
}

func FuzzApply(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		rng := rand.New(rand.NewPCG(s1, s2))
		tk, a := taskIn(api.States[rng.IntN(len(api.States))])
		for i := 0; i < 20; i++ {
			ev := eventFor(EventKinds[rng.IntN(len(EventKinds))], t0.Add(time.Duration(rng.IntN(300))*time.Second))
			r := Apply(tk, a, ev)
			if tk.State.Terminal() && r.Write {
				t.Fatal("terminal changed")
			}
			if r.Task.Attempt < tk.Attempt {
				t.Fatal("attempt decreased")
			}
			tk = r.Task
			if r.Next != nil {
				a = r.Next
			} else if r.Attempt != nil {
				a = r.Attempt
			}
		}
	})
}

func TestTimingValidation(t *testing.T) {
	cases := []struct {
		name  string
		t     api.Timing
		min   time.Duration
		field string
	}{
		{"defaults", api.Timing{}.WithDefaults(), MinTimerProduction, ""},
		{"timeout below 2x", api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 1999, CancelGracePeriodMs: 1000, StartTimeoutMs: 1000}, MinTimerProduction, "heartbeatTimeoutMs"},
		{"100ms locally", api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 200, CancelGracePeriodMs: 100, StartTimeoutMs: 100}, MinTimerLocal, ""},
		{"100ms in production", api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 200, CancelGracePeriodMs: 100, StartTimeoutMs: 100}, MinTimerProduction, "heartbeatIntervalMs"},
		{"interval half the max token TTL", api.Timing{HeartbeatIntervalMs: MaxTokenTTL.Milliseconds() / 2, HeartbeatTimeoutMs: MaxTokenTTL.Milliseconds(), CancelGracePeriodMs: 1000, StartTimeoutMs: 1000}, MinTimerProduction, ""},
		{"interval beyond half the max token TTL", api.Timing{HeartbeatIntervalMs: MaxTokenTTL.Milliseconds()/2 + 1, HeartbeatTimeoutMs: MaxTokenTTL.Milliseconds() + 2, CancelGracePeriodMs: 1000, StartTimeoutMs: 1000}, MinTimerProduction, "heartbeatIntervalMs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateTiming(c.t, c.min)
			if (err == nil) != (c.field == "") || (err != nil && err.Field != c.field) {
				t.Fatalf("got %v, want field %q", err, c.field)
			}
		})
	}
}

func TestTokenTTLCoversDeadline(t *testing.T) {
	d1 := t0.Add(90 * time.Minute)
	d2 := t0.Add(5 * time.Hour)
	cases := []struct {
		name     string
		deadline *time.Time
		interval time.Duration
		want     time.Duration
	}{
		{"no deadline", nil, 30 * time.Second, DefaultTokenTTL},
		{"deadline in 90m", &d1, 30 * time.Second, 91 * time.Minute},
		{"deadline beyond max", &d2, 30 * time.Second, MaxTokenTTL},
		{"two 50m intervals", nil, 50 * time.Minute, 100 * time.Minute},
		{"two intervals beyond max", nil, 90 * time.Minute, MaxTokenTTL},
		{"deadline beyond two intervals", &d1, 40 * time.Minute, 91 * time.Minute},
	}
	for _, c := range cases {
		if got := TokenTTL(t0, c.deadline, c.interval); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIDs(t *testing.T) {
	a, b := NewTaskID(t0), NewTaskID(t0)
	if a == b || a > b || !ValidID(a, TaskIDPrefix) || ValidID(a, RunIDPrefix) || ValidID("task_nope", TaskIDPrefix) {
		t.Fatalf("ids: %s %s", a, b)
	}
	if DispatchName(a, 1) != DispatchName(a, 1) || DispatchName(a, 1) == DispatchName(a, 2) {
		t.Fatal("dispatch names must be deterministic per attempt")
	}
	if EventID(a, 2) != EventID(a, 2) || EventID(a, 2) == EventID(a, 3) || EventID(a, 2) == EventID(b, 2) {
		t.Fatal("event ids must be deterministic per transition and differ between transitions")
	}
}

// history is a task driven through evs from PENDING at t0, with every
// attempt record it got on the way.
type history struct {
	tk       Task
	attempts map[int]*Attempt
}

func replayHistory(t *testing.T, evs ...Event) history {
	t.Helper()
	tk, a := newTestTask()
	h := history{tk: tk, attempts: map[int]*Attempt{1: &a}}
	for _, ev := range evs {
		which := ev.Attempt
		if which == 0 {
			which = h.tk.Attempt
		}
		r := Apply(h.tk, h.attempts[which], ev)
		if r.Rejection != nil {
			t.Fatalf("setup %s: %v", ev.Kind, r.Rejection)
		}
		h.tk = r.Task
		if r.Attempt != nil {
			c := *r.Attempt
			h.attempts[c.Attempt] = &c
		}
		if r.Next != nil {
			n := *r.Next
			h.attempts[n.Attempt] = &n
		}
	}
	return h
}

func started(attempt int, worker string, at time.Time) Event {
	return Event{Kind: EventStarted, Attempt: attempt, WorkerID: worker, Now: at}
}

func completed(attempt int, worker string, at time.Time, o api.Outcome, c api.Category) Event {
	cr := completion(o, c)
	cr.Attempt, cr.WorkerID = attempt, worker
	return Event{Kind: EventCompleted, Attempt: attempt, WorkerID: worker, Now: at, Completed: cr}
}

func heartbeat(attempt int, worker string, at time.Time) Event {
	return Event{Kind: EventHeartbeat, Attempt: attempt, WorkerID: worker, Now: at, Heartbeat: &api.HeartbeatRequest{Attempt: attempt, WorkerID: worker}}
}

// TestCallbackGuard checks the order of docs/contract.md §4.5 among the
// 409/410 rows and the cancel grace at the callback: each case is a
// history, one callback, and the answer and task it must leave.
func TestCallbackGuard(t *testing.T) {
	grace := api.DefaultCancelGracePeriod
	cancel := Event{Kind: EventCancel, Now: t0, Reason: "user_requested"}
	// retried: attempt 1 reported a retryable FAILED; the task is QUEUED
	// for attempt 2 (then started by w2 when running).
	retried := []Event{started(1, "w1", t0), completed(1, "w1", t0, api.OutcomeFailed, api.CategoryUserCode)}
	running2 := append(slices.Clone(retried), started(2, "w2", t0.Add(time.Minute)))
	succeeded2 := append(slices.Clone(running2), completed(2, "w2", t0.Add(2*time.Minute), api.OutcomeSucceeded, ""))
	// zombie: attempt 1 went silent and was expired; attempt 2 succeeded.
	zombie := []Event{started(1, "w1", t0), {Kind: EventLeaseExpired, Attempt: 1, Now: t0.Add(time.Hour)},
		started(2, "w2", t0.Add(time.Hour+time.Minute)), completed(2, "w2", t0.Add(time.Hour+2*time.Minute), api.OutcomeSucceeded, "")}
	cancelling := []Event{started(1, "w1", t0), cancel}
	later := t0.Add(3 * time.Hour)

	cases := []struct {
		name    string
		history []Event
		ev      Event
		code    string // "" accepted
		replay  bool
		state   api.State // the task after the callback
		reason  string    // the task's reason after the callback, when it ended
		outcome api.Outcome
		trs     int // transitions written
	}{
		// Terminal rows come first.
		{"identical repeat on the ended task replays", succeeded2, completed(2, "w2", later, api.OutcomeSucceeded, ""), "", true, api.Succeeded, api.ReasonSucceeded, "", 0},
		{"different completed of the ending attempt conflicts", succeeded2, completed(2, "w2", later, api.OutcomeFailed, api.CategoryDataQuality), api.CodeCompletionConflict, false, api.Succeeded, api.ReasonSucceeded, "", 0},
		{"older attempt's heartbeat on an ended task", succeeded2, heartbeat(1, "w1", later), api.CodeTaskAlreadyTerminal, false, api.Succeeded, api.ReasonSucceeded, "", 0},
		{"zombie attempt's late completed on an ended task", zombie, completed(1, "w1", later, api.OutcomeSucceeded, ""), api.CodeTaskAlreadyTerminal, false, api.Succeeded, api.ReasonSucceeded, "", 0},
		{"older attempt's different completed on an ended task", succeeded2, completed(1, "w1", later, api.OutcomeSucceeded, ""), api.CodeTaskAlreadyTerminal, false, api.Succeeded, api.ReasonSucceeded, "", 0},
		{"older attempt's identical completed on an ended task replays", succeeded2, completed(1, "w1", later, api.OutcomeFailed, api.CategoryUserCode), "", true, api.Succeeded, api.ReasonSucceeded, "", 0},
		// Then the attempt guard.
		{"older attempt's heartbeat", running2, heartbeat(1, "w1", t0.Add(90*time.Second)), api.CodeAttemptMismatch, false, api.Running, "", "", 0},
		{"older attempt's different completed", running2, completed(1, "w1", t0.Add(90*time.Second), api.OutcomeSucceeded, ""), api.CodeAttemptMismatch, false, api.Running, "", "", 0},
		{"older attempt's identical completed replays", running2, completed(1, "w1", t0.Add(90*time.Second), api.OutcomeFailed, api.CategoryUserCode), "", true, api.Running, "", "", 0},
		// Then another worker, before any expiry.
		{"another worker past the grace", cancelling, heartbeat(1, "w2", t0.Add(grace)), api.CodeAttemptAlreadyStarted, false, api.Cancelling, "user_requested", "", 0},
		// The cancel grace: [cancel, CancelDeadline).
		{"heartbeat within the grace", cancelling, heartbeat(1, "w1", t0.Add(grace-time.Millisecond)), "", false, api.Cancelling, "user_requested", "", 0},
		{"completed SUCCEEDED within the grace", cancelling, completed(1, "w1", t0.Add(grace-time.Millisecond), api.OutcomeSucceeded, ""), "", false, api.Succeeded, api.ReasonSucceeded, api.OutcomeSucceeded, 1},
		{"heartbeat at the cancel deadline", cancelling, heartbeat(1, "w1", t0.Add(grace)), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
		{"heartbeat past the grace", cancelling, heartbeat(1, "w1", t0.Add(grace+time.Second)), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
		{"completed SUCCEEDED past the grace", cancelling, completed(1, "w1", t0.Add(grace+30*time.Second), api.OutcomeSucceeded, ""), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
		{"completed CANCELLED past the grace", cancelling, completed(1, "w1", t0.Add(grace+time.Second), api.OutcomeCancelled, ""), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
		{"started repeated past the grace", cancelling, started(1, "w1", t0.Add(grace)), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
		{"grace and lease both run out: the grace first, as the sweeper", cancelling, heartbeat(1, "w1", t0.Add(time.Hour)), api.CodeTaskExpired, false, api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := replayHistory(t, c.history...)
			before := h.tk
			r := Apply(h.tk, h.attempts[c.ev.Attempt], c.ev)
			code := ""
			if r.Rejection != nil {
				code = r.Rejection.Code
			}
			if code != c.code || r.Replay != c.replay {
				t.Fatalf("got %q replay %v, want %q replay %v", code, r.Replay, c.code, c.replay)
			}
			if r.Task.State != c.state || len(r.Transitions) != c.trs {
				t.Fatalf("task %s with %d transitions, want %s with %d", r.Task.State, len(r.Transitions), c.state, c.trs)
			}
			if c.code != "" && c.code != api.CodeTaskExpired || c.replay {
				if r.Write || !reflectEqualTask(r.Task, before) {
					t.Fatalf("a refusal or replay wrote: %+v", r.Task)
				}
			}
			if c.state.Terminal() && r.Task.Reason != c.reason {
				t.Fatalf("task reason %q, want %q", r.Task.Reason, c.reason)
			}
			if c.trs > 0 && (r.Attempt == nil || r.Attempt.Attempt != r.Task.Attempt || r.Attempt.Outcome != c.outcome || r.Transitions[0].Outcome != c.outcome) {
				t.Fatalf("attempt %+v, transitions %+v; want outcome %s", r.Attempt, r.Transitions, c.outcome)
			}
			if c.code == api.CodeTaskExpired && (r.Task.LeaseExpiresAt != nil || r.Enqueue || r.Next != nil) {
				t.Fatalf("a cancel timeout must not extend the lease nor retry: %+v", r)
			}
			if c.code == api.CodeTaskAlreadyTerminal && r.Rejection.State != c.state {
				t.Fatalf("rejection state %s", r.Rejection.State)
			}
			if c.code == api.CodeAttemptMismatch && (r.Rejection.Expected != 2 || r.Rejection.Received != 1) {
				t.Fatalf("mismatch %+v", r.Rejection)
			}
			if c.replay && c.ev.Attempt == 1 && (r.FinalState != api.Queued || !r.RetryScheduled || r.NextAttempt != 2) {
				t.Fatalf("the replay of a retried attempt must repeat its answer: %+v", r)
			}
		})
	}
}

func reflectEqualTask(a, b Task) bool { return reflect.DeepEqual(a, b) }
