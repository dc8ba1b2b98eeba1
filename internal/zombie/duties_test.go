package zombie_test

import (
	"fmt"
	"testing"
	"time"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// lastTransition returns the last outbox entry of a task.
func lastTransition(t *testing.T, e *env, id string) (last task.Transition, n int) {
	t.Helper()
	ob := e.outbox(id)
	if len(ob) == 0 {
		t.Fatalf("no outbox entries for %s", id)
	}
	return ob[len(ob)-1].Transition, len(ob)
}

// TestLeaseExpired: a RUNNING attempt whose lease ran out is a ZOMBIE; with
// attempts left the task is retried (attempt 2 enqueued to Cloud Tasks and
// delivered to the worker), otherwise it ends FAILED HEARTBEAT_TIMEOUT and
// is a dead letter.
func TestLeaseExpired(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		retry       bool
	}{
		{"retry", 2, true},
		{"no retry", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sw := e.sweeper(nil)
			// A start timeout no loaded pass outlasts: attempt 2 is not yet
			// due for a re-drive in the pass that schedules it.
			tm := shortTiming
			tm.StartTimeoutMs = 60000
			tk := e.running(spec{maxAttempts: tc.maxAttempts, timing: tm}, true)
			eventually(t, "attempt 1 delivered", func() bool { return len(e.worker.of(tk.ID)) == 1 })
			// Just before the lease runs out the sweeper leaves it alone.
			early := e.sweeper(func(c *zombie.Config) {
				c.Now = func() time.Time { return tk.LeaseExpiresAt.Add(-time.Millisecond) }
			})
			if st := e.sweep(early); st.Total().Due != 0 || st.Total().Applied != 0 {
				t.Fatalf("swept a live task: %+v", st)
			}
			waitPast(t, tk.LeaseExpiresAt)
			st := e.sweep(sw)
			if st.Lease.Due != 1 || st.Lease.Applied != 1 || st.Total().Applied != 1 {
				t.Fatalf("stats %+v", st)
			}
			got := e.get(tk.ID)
			a1 := got.Attempts[0]
			if a1.Outcome != api.OutcomeZombie || a1.Error == nil || a1.Error.Category != api.CategoryInfrastructure {
				t.Fatalf("attempt 1: %+v", a1)
			}
			tr, _ := lastTransition(t, e, tk.ID)
			if tc.retry {
				if got.State != api.Queued || got.Attempt != 2 || len(got.Attempts) != 2 || got.LeaseExpiresAt != nil || got.DispatchCheckAt == nil {
					t.Fatalf("after retry: %s attempt %d attempts %d", got.State, got.Attempt, len(got.Attempts))
				}
				if tr.From != api.Running || tr.To != api.Queued || tr.Reason != api.ReasonRetryScheduled || tr.Outcome != api.OutcomeZombie || tr.NextAttempt != 2 || tr.DeadLetter {
					t.Fatalf("retry transition %+v", tr)
				}
				if calls := e.rec.calls()[tk.ID]; len(calls) != 1 || !calls[0].Enqueue {
					t.Fatalf("follow-ups %+v", calls)
				}
				eventually(t, "attempt 2 delivered", func() bool { return len(e.worker.of(tk.ID)) == 2 })
				d := e.worker.of(tk.ID)[1]
				if d.Attempt != 2 || d.TaskName != task.DispatchName(tk.ID, 2) {
					t.Fatalf("attempt 2 delivery %+v", d)
				}
				return
			}
			if got.State != api.Failed || got.Reason != api.ReasonHeartbeatTimeout || got.Attempt != 1 || len(got.Attempts) != 1 || got.EndedAt == nil {
				t.Fatalf("after zombie: %s %s attempt %d", got.State, got.Reason, got.Attempt)
			}
			if tr.To != api.Failed || tr.Reason != api.ReasonHeartbeatTimeout || tr.Outcome != api.OutcomeZombie || !tr.DeadLetter {
				t.Fatalf("failure transition %+v", tr)
			}
			if n := len(e.rec.calls()[tk.ID]); n != 0 {
				t.Fatalf("%d follow-ups for a failed task", n)
			}
			if ct := e.cloudTask(tk.ID, 2); ct != nil {
				t.Fatalf("a Cloud Task exists for attempt 2: %s", ct.Name)
			}
			// A second pass finds nothing.
			if st := e.sweep(sw); st.Total().Due != 0 {
				t.Fatalf("second pass %+v", st)
			}
		})
	}
}

// TestCancellingTimesOut: a CANCELLING task is never retried; when its
// lease runs out first the attempt is a ZOMBIE, when its grace period runs
// out first the attempt's outcome is CANCEL_TIMEOUT; either way the task
// ends FAILED CANCEL_TIMEOUT.
func TestCancellingTimesOut(t *testing.T) {
	tests := []struct {
		name    string
		timing  api.Timing
		outcome api.Outcome
		lease   bool // the lease duty applies, else the cancel duty
	}{
		{"lease runs out first", api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 300, CancelGracePeriodMs: 60_000, StartTimeoutMs: 60_000}, api.OutcomeZombie, true},
		{"grace period runs out first", api.Timing{HeartbeatIntervalMs: 10_000, HeartbeatTimeoutMs: 60_000, CancelGracePeriodMs: 300, StartTimeoutMs: 60_000}, api.OutcomeCancelTimeout, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sw := e.sweeper(nil)
			tk := e.running(spec{maxAttempts: 3, timing: tc.timing}, false)
			c := e.apply(tk.ID, task.Event{Kind: task.EventCancel, Reason: "user_requested"}).Task
			if c.State != api.Cancelling {
				t.Fatalf("state %s", c.State)
			}
			if tc.lease {
				waitPast(t, c.LeaseExpiresAt)
			} else {
				waitPast(t, c.CancelDeadline)
			}
			st := e.sweep(sw)
			if (tc.lease && st.Lease.Applied != 1) || (!tc.lease && st.Cancel.Applied != 1) || st.Total().Applied != 1 {
				t.Fatalf("stats %+v", st)
			}
			got := e.get(tk.ID)
			if got.State != api.Failed || got.Reason != api.ReasonCancelTimeout || got.Attempt != 1 || len(got.Attempts) != 1 || got.Attempts[0].Outcome != tc.outcome {
				t.Fatalf("got %s %s attempt %d outcome %s", got.State, got.Reason, got.Attempt, got.Attempts[0].Outcome)
			}
			tr, _ := lastTransition(t, e, tk.ID)
			if tr.From != api.Cancelling || tr.To != api.Failed || tr.Reason != api.ReasonCancelTimeout || !tr.DeadLetter {
				t.Fatalf("transition %+v", tr)
			}
			if e.rec.count() != 0 {
				t.Fatalf("follow-ups for a cancelled task: %d", e.rec.count())
			}
		})
	}
}

// TestStuckDispatchRedriven: a task stuck PENDING (the dispatcher never
// enqueued it) or QUEUED without a `started` (the worker answered Cloud
// Tasks 2xx and never started) is re-driven after its start timeout, each
// time under a deterministic Cloud Tasks name of its own, so each re-drive
// is delivered again (the real enqueuer against the Cloud Tasks emulator,
// which refuses a name whose task ran); after MaxRedrives re-drives it
// ends FAILED DISPATCH_TIMEOUT.
func TestStuckDispatchRedriven(t *testing.T) {
	const maxRedrives = 2
	for _, start := range []api.State{api.Pending, api.Queued} {
		t.Run(string(start), func(t *testing.T) {
			e := newEnv(t)
			sw := e.sweeper(func(c *zombie.Config) { c.MaxRedrives = maxRedrives })
			tk := e.create(spec{maxAttempts: 3})
			if start == api.Queued {
				if err := e.enq.Enqueue(e.ctx, tk); err != nil {
					t.Fatal(err)
				}
			}
			var names []string // the deliveries expected so far
			if start == api.Queued {
				names = append(names, task.DispatchName(tk.ID, 1))
				eventually(t, "the first dispatch delivered", func() bool { return len(e.worker.of(tk.ID)) == 1 })
			}
			for i := 1; i <= maxRedrives; i++ {
				cur := e.get(tk.ID)
				waitPast(t, stuckAt(cur))
				st := e.sweep(sw)
				if st.Dispatch.Due != 1 || st.Dispatch.Applied != 1 || st.Dispatch.FollowUpErrors != 0 {
					t.Fatalf("re-drive %d: stats %+v", i, st)
				}
				got := e.get(tk.ID)
				if got.State != api.Queued || got.Redrives != i || got.Attempt != 1 {
					t.Fatalf("re-drive %d: %s redrives %d attempt %d", i, got.State, got.Redrives, got.Attempt)
				}
				names = append(names, task.RedriveName(tk.ID, 1, i))
				eventually(t, fmt.Sprintf("re-drive %d delivered", i), func() bool { return len(e.worker.of(tk.ID)) == len(names) })
			}
			calls := e.rec.calls()[tk.ID]
			if len(calls) != maxRedrives {
				t.Fatalf("follow-ups %d, want %d", len(calls), maxRedrives)
			}
			for _, c := range calls {
				if !c.Enqueue || c.Task.Attempt != 1 {
					t.Fatalf("follow-up %+v", c)
				}
			}
			waitPast(t, stuckAt(e.get(tk.ID)))
			if st := e.sweep(sw); st.Dispatch.Applied != 1 {
				t.Fatalf("final pass %+v", st)
			}
			got := e.get(tk.ID)
			if got.State != api.Failed || got.Reason != api.ReasonDispatchTimeout || got.Attempts[0].Outcome != api.OutcomeTimedOut || got.DispatchCheckAt != nil {
				t.Fatalf("final: %s %s outcome %s", got.State, got.Reason, got.Attempts[0].Outcome)
			}
			tr, _ := lastTransition(t, e, tk.ID)
			if tr.To != api.Failed || tr.Reason != api.ReasonDispatchTimeout || !tr.DeadLetter {
				t.Fatalf("transition %+v", tr)
			}
			// Each dispatch of attempt 1 was delivered once, under its name.
			ds := e.worker.of(tk.ID)
			if len(ds) != len(names) {
				t.Fatalf("deliveries %+v, want %v", ds, names)
			}
			for i, d := range ds {
				if d.TaskName != names[i] || d.Attempt != 1 {
					t.Fatalf("delivery %d %+v, want %s", i, d, names[i])
				}
			}
		})
	}
}

// TestRetryWhoseEnqueueFailedIsRedriven: the zombie's retry commits but its
// enqueue fails; the task waits QUEUED for attempt 2 and the dispatch duty
// enqueues it after the start timeout.
func TestRetryWhoseEnqueueFailedIsRedriven(t *testing.T) {
	e := newEnv(t)
	ff := &failingFollowUps{next: e.enq}
	ff.n.Store(1)
	e.rec.next = ff
	sw := e.sweeper(nil)
	tk := e.running(spec{maxAttempts: 2}, false)
	waitPast(t, tk.LeaseExpiresAt)
	st := e.sweep(sw)
	if st.Lease.Applied != 1 || st.Lease.FollowUpErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
	got := e.get(tk.ID)
	if got.State != api.Queued || got.Attempt != 2 || e.cloudTask(tk.ID, 2) != nil {
		t.Fatalf("after failed enqueue: %s attempt %d", got.State, got.Attempt)
	}
	waitPast(t, stuckAt(got))
	st = e.sweep(sw)
	if st.Dispatch.Applied != 1 || st.Dispatch.FollowUpErrors != 0 {
		t.Fatalf("re-drive stats %+v", st)
	}
	eventually(t, "attempt 2 delivered", func() bool { return len(e.worker.of(tk.ID)) == 1 })
	if d := e.worker.of(tk.ID)[0]; d.Attempt != 2 || d.TaskName != task.RedriveName(tk.ID, 2, 1) {
		t.Fatalf("delivery %+v", d)
	}
	if got := e.get(tk.ID); got.State != api.Queued || got.Redrives != 1 {
		t.Fatalf("after re-drive: %s redrives %d", got.State, got.Redrives)
	}
}

// TestDeadlineExceeded: past its deadline a task ends FAILED
// DEADLINE_EXCEEDED with the running attempt TIMED_OUT and no retry, even
// when its lease ran out too (the deadline duty runs first) and whatever its
// state.
func TestDeadlineExceeded(t *testing.T) {
	long := api.Timing{HeartbeatIntervalMs: 10_000, HeartbeatTimeoutMs: 60_000, CancelGracePeriodMs: 60_000, StartTimeoutMs: 60_000}
	tests := []struct {
		name   string
		timing api.Timing
		setup  func(e *env, s spec) task.Task
	}{
		{"running", long, func(e *env, s spec) task.Task { return e.running(s, false) }},
		{"running, lease expired too", shortTiming, func(e *env, s spec) task.Task { return e.running(s, false) }},
		{"queued", long, func(e *env, s spec) task.Task {
			tk := e.create(s)
			return e.apply(tk.ID, task.Event{Kind: task.EventEnqueued}).Task
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sw := e.sweeper(nil)
			tk := tc.setup(e, spec{maxAttempts: 3, timing: tc.timing, deadline: 400 * time.Millisecond})
			waitPast(t, tk.Deadline)
			if tk.LeaseExpiresAt != nil && tc.timing == shortTiming {
				waitPast(t, tk.LeaseExpiresAt)
			}
			st := e.sweep(sw)
			if st.Deadline.Applied != 1 || st.Total().Applied != 1 {
				t.Fatalf("stats %+v", st)
			}
			got := e.get(tk.ID)
			if got.State != api.Failed || got.Reason != api.ReasonDeadlineExceeded || got.Attempt != 1 || len(got.Attempts) != 1 || got.Attempts[0].Outcome != api.OutcomeTimedOut {
				t.Fatalf("got %s %s attempt %d attempts %d", got.State, got.Reason, got.Attempt, len(got.Attempts))
			}
			tr, _ := lastTransition(t, e, tk.ID)
			if tr.To != api.Failed || tr.Reason != api.ReasonDeadlineExceeded || tr.Outcome != api.OutcomeTimedOut || !tr.DeadLetter {
				t.Fatalf("transition %+v", tr)
			}
			if e.rec.count() != 0 {
				t.Fatalf("follow-ups after a deadline: %d", e.rec.count())
			}
		})
	}
}

// TestBacklogIsNotRedriven: a queue whose backlog outlasts the start
// timeout (here: paused, so it never drains) is not a stuck dispatch.
// While Cloud Tasks still holds an attempt's dispatch, the sweeper neither
// re-drives it (which would move it to the back of the backlog, a storm
// that makes the backlog worse) nor fails it DISPATCH_TIMEOUT: it stretches
// the start timeout. Once the queue moves, every task is delivered exactly
// once, under its first name. Cancelling a waiting task deletes its Cloud
// Task.
func TestBacklogIsNotRedriven(t *testing.T) {
	e := newEnv(t)
	if _, err := e.ct.PauseQueue(e.ctx, &ctpb.PauseQueueRequest{Name: e.queue}); err != nil {
		t.Fatal(err)
	}
	exists := func(name string) bool {
		_, err := e.ct.GetTask(e.ctx, &ctpb.GetTaskRequest{Name: e.queue + "/tasks/" + name})
		return err == nil
	}
	sw := e.sweeper(nil)
	const n = 20
	var tks []task.Task
	for range n {
		tk := e.create(spec{maxAttempts: 1})
		if err := e.enq.Enqueue(e.ctx, tk); err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	// Past the start timeout many times over: more than MaxRedrives (2)
	// re-drives each, and a DISPATCH_TIMEOUT, had they been lost.
	stretched := 0
	for pass := range 6 {
		waitPast(t, e.get(tks[n-1].ID).DispatchCheckAt)
		st := e.sweep(sw)
		if pass == 0 && st.Dispatch.Due != n {
			t.Fatalf("pass 0: %d due, want %d", st.Dispatch.Due, n)
		}
		stretched += st.Dispatch.Applied
	}
	if stretched < 6*n-n { // every pass found (nearly) all of them due
		t.Fatalf("%d start timeouts stretched over 6 passes of %d tasks", stretched, n)
	}
	for _, tk := range tks {
		got := e.get(tk.ID)
		if got.State != api.Queued || got.Redrives != 0 {
			t.Fatalf("%s: %s %s redrives %d, want QUEUED with none", tk.ID, got.State, got.Reason, got.Redrives)
		}
		if !exists(task.DispatchName(tk.ID, 1)) {
			t.Fatalf("%s: the first dispatch is no longer queued", tk.ID)
		}
	}
	if calls := e.rec.calls(); len(calls) != 0 {
		t.Fatalf("follow-ups %v, want none", calls)
	}

	r := e.apply(tks[0].ID, task.Event{Kind: task.EventCancel})
	if err := e.enq.FollowUp(e.ctx, r); err != nil {
		t.Fatal(err)
	}
	if exists(task.DispatchName(tks[0].ID, 1)) {
		t.Fatal("the cancelled task's Cloud Task is still queued")
	}
	if _, err := e.ct.ResumeQueue(e.ctx, &ctpb.ResumeQueueRequest{Name: e.queue}); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tks[1:] {
		eventually(t, "delivered", func() bool { return len(e.worker.of(tk.ID)) == 1 })
		if d := e.worker.of(tk.ID)[0]; d.TaskName != task.DispatchName(tk.ID, 1) {
			t.Fatalf("delivered as %s", d.TaskName)
		}
	}
	if len(e.worker.of(tks[0].ID)) != 0 {
		t.Fatal("the cancelled task was delivered")
	}
}
