package callbacks_test

import (
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// cost is what a callback may cost in Firestore RPCs.
type cost int

const (
	// noRPC: refused before the transaction (steps 1–7 of the package doc).
	noRPC cost = iota
	// readOnly: the transaction read, refused or changed nothing (no lock
	// was taken, so there is nothing to roll back).
	readOnly
	// readCommit: the transaction read and committed.
	readCommit
	// readRecord: the task, then the record of the earlier attempt the
	// report names (its accepted report decides between a replay and a
	// refusal), refused or replayed: a stale report's rare path. The
	// current attempt's record is read only when it has one, and it has
	// none until it is retried (store/live.go).
	readRecord
	// heartbeatTransition: a heartbeat that changes the task's state (the
	// first heartbeat of an attempt that never said started, one that finds
	// the lease or the cancel grace run out). A heartbeat reads a masked
	// task document and, when it makes a transition, reads the whole task
	// and attempt again before it commits: one more read
	// on this rare path keeps every ordinary heartbeat small (store/live.go).
	heartbeatTransition
)

func (c cost) want() map[string]int {
	switch c {
	case readOnly:
		return map[string]int{"BatchGetDocuments": 1}
	case readCommit:
		return map[string]int{"BatchGetDocuments": 1, "Commit": 1}
	case readRecord:
		return map[string]int{"BatchGetDocuments": 2}
	case heartbeatTransition:
		return map[string]int{"BatchGetDocuments": 2, "Commit": 1}
	}
	return map[string]int{}
}

type contractCase struct {
	name   string
	prep   func(e *env) request
	status int
	code   string
	disp   api.Disposition
	cost   cost
	check  func(t *testing.T, e *env, rq request, rp reply)
}

// zombieThenSucceeded is a task whose attempt 1 went silent (the sweeper
// expired its lease) and whose attempt 2 succeeded.
func (e *env) zombieThenSucceeded() task.Task {
	tk := e.expired("w1")
	if r := e.apply(tk.ID, task.Event{Kind: task.EventLeaseExpired, Attempt: 1}); r.Task.Attempt != 2 {
		e.t.Fatalf("zombie: task %s attempt %d", r.Task.State, r.Task.Attempt)
	}
	c := completedReq(2, "w2", api.OutcomeSucceeded)
	return e.apply(tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 2, WorkerID: "w2", Completed: &c}).Task
}

// retriedThenSucceeded is a task whose attempt 1 reported a retryable
// FAILED and whose attempt 2 succeeded.
func (e *env) retriedThenSucceeded() task.Task {
	tk := e.retriedRunning()
	c := completedReq(2, "w2", api.OutcomeSucceeded)
	return e.apply(tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 2, WorkerID: "w2", Completed: &c}).Task
}

// retriedRunning is a task whose attempt 1 reported a retryable FAILED and
// whose attempt 2 is RUNNING on w2.
func (e *env) retriedRunning() task.Task {
	tk := e.retried("w1")
	return e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 2, WorkerID: "w2"}).Task
}

// cancellingSince is a CANCELLING task (reason "operator said so") whose
// attempt started and whose cancel was requested ago before the clock.
func (e *env) cancellingSince(worker string, ago time.Duration) task.Task {
	now := e.clock.Now()
	e.clock.Set(now.Add(-ago))
	tk := e.cancelling(worker, "operator said so")
	e.clock.Set(now)
	return tk
}

// wantCancelTimeout checks that the callback applied the cancel timeout:
// attempt 1 CANCEL_TIMEOUT, the task FAILED CANCEL_TIMEOUT, one transition.
func wantCancelTimeout(t *testing.T, e *env, rq request, rp reply) {
	t.Helper()
	got := e.get(rq.taskID)
	if got.State != api.Failed || got.Reason != api.ReasonCancelTimeout || got.Attempt != 1 || got.Attempts[0].Outcome != api.OutcomeCancelTimeout ||
		got.LeaseExpiresAt != nil || len(got.Attempts) != 1 {
		t.Errorf("task %s %s attempt %d lease %v, attempts %+v; want FAILED CANCEL_TIMEOUT, attempt 1 CANCEL_TIMEOUT", got.State, got.Reason, got.Attempt, got.LeaseExpiresAt, got.Attempts)
	}
	want := []string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>CANCELLING", "CANCELLING>FAILED"}
	if tr := e.outboxTransitions(rq.taskID); !slices.Equal(tr, want) {
		t.Errorf("outbox %v, want %v", tr, want)
	}
}

// contractCases covers every row of docs/contract.md §4.4 (the 503 row is
// TestUnavailable, which needs a store that cannot be reached).
func contractCases() []contractCase {
	return []contractCase{
		// 200 CONTINUE: accepted started / heartbeat.
		{
			name: "started QUEUED", status: 200, disp: api.Continue, cost: readCommit,
			prep: func(e *env) request {
				tk := e.queued()
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1"))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				got := e.get(rq.taskID)
				now := e.clock.Now()
				a := got.Attempts[0]
				if got.State != api.Running || a.WorkerID != "w1" || !a.StartedAt.Equal(now) || !got.LeaseExpiresAt.Equal(now.Add(testTiming.HeartbeatTimeout())) {
					t.Errorf("task %s lease %v, attempt %+v", got.State, got.LeaseExpiresAt, a)
				}
				if _, ok := rp.fields["shouldCancel"]; ok {
					t.Errorf("started answer has shouldCancel: %s", rp.raw)
				}
			},
		},
		{
			name: "started PENDING (delivered before QUEUED was recorded)", status: 200, disp: api.Continue, cost: readCommit,
			prep: func(e *env) request {
				tk := e.create(nil)
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1"))}
			},
			check: wantState(api.Running, 1),
		},
		{
			name: "started with charset parameter", status: 200, disp: api.Continue, cost: readCommit,
			prep: func(e *env) request {
				tk := e.queued()
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1")),
					contentType: "Application/JSON; charset=utf-8"}
			},
			check: wantState(api.Running, 1),
		},
		{
			name: "started repeated by the same worker", status: 200, disp: api.Continue, cost: readOnly,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1"))}
			},
		},
		{
			name: "heartbeat RUNNING", status: 200, disp: api.Continue, cost: readCommit,
			prep: func(e *env) request {
				tk := e.running("w1")
				hb := heartbeatReq(1, "w1")
				hb.Checkpoint = json.RawMessage(`{"offset":7}`)
				e.clock.Set(e.clock.Now().Add(time.Second))
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, hb)}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				if string(rp.fields["shouldCancel"]) != "false" || rp.resp.TaskToken != "" {
					t.Errorf("want shouldCancel false and no fresh token: %s", rp.raw)
				}
				got := e.get(rq.taskID)
				now := e.clock.Now()
				a := got.Attempts[0]
				if !a.LastHeartbeatAt.Equal(now) || a.ProgressPct == nil || *a.ProgressPct != 45 || a.Message != "partition 5 of 10" ||
					string(a.Checkpoint) != `{"offset":7}` || !got.LeaseExpiresAt.Equal(now.Add(testTiming.HeartbeatTimeout())) {
					t.Errorf("heartbeat not recorded: lease %v, attempt %+v", got.LeaseExpiresAt, a)
				}
			},
		},
		{
			name: "heartbeat without started", status: 200, disp: api.Continue, cost: heartbeatTransition,
			prep: func(e *env) request {
				tk := e.queued()
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantState(api.Running, 1),
		},
		{
			name: "heartbeat CANCELLING answers shouldCancel", status: 200, disp: api.Continue, cost: readCommit,
			prep: func(e *env) request {
				tk := e.cancelling("w1", "operator said so")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				if rp.resp.ShouldCancel == nil || !*rp.resp.ShouldCancel || rp.resp.CancelReason != "operator said so" {
					t.Errorf("want shouldCancel true with the reason: %s", rp.raw)
				}
			},
		},
		// 200 COMMITTED: accepted completed, or its identical repeat.
		{
			name: "completed SUCCEEDED", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				wantFinal(api.Succeeded, false, 0)(t, e, rq, rp)
				a := e.get(rq.taskID).Attempts[0]
				if a.Outcome != api.OutcomeSucceeded || string(a.Output) != `{"rowCount":1000}` || a.Metrics == nil || a.Metrics.CPUTimeMs != 5 {
					t.Errorf("attempt %+v", a)
				}
			},
		},
		{
			name: "completed identical repeat replays", status: 200, disp: api.Committed, cost: readOnly,
			prep: func(e *env) request {
				tk := e.succeeded("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantFinal(api.Succeeded, false, 0),
		},
		{
			name: "completed identical repeat of a retried failure replays", status: 200, disp: api.Committed, cost: readRecord,
			prep: func(e *env) request {
				tk := e.retried("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, failedReq(1, "w1", api.CategoryInfrastructure))}
			},
			check: wantFinal(api.Queued, true, 2),
		},
		{
			name: "completed without started", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.queued()
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				wantFinal(api.Succeeded, false, 0)(t, e, rq, rp)
				if a := e.get(rq.taskID).Attempts[0]; a.WorkerID != "w1" || a.StartedAt == nil {
					t.Errorf("completed did not count as the start: %+v", a)
				}
			},
		},
		{
			name: "completed FAILED retryable schedules a retry", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, failedReq(1, "w1", api.CategoryUserCode))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				wantFinal(api.Queued, true, 2)(t, e, rq, rp)
				got := e.get(rq.taskID)
				now := e.clock.Now()
				if got.Attempt != 2 || len(got.Attempts) != 2 || got.NotBefore == nil || got.NotBefore.Before(now) || got.NotBefore.After(now.Add(100*time.Millisecond)) {
					t.Errorf("retry not scheduled: attempt %d notBefore %v attempts %d", got.Attempt, got.NotBefore, len(got.Attempts))
				}
			},
		},
		{
			name: "completed FAILED DATA_QUALITY is not retried", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, failedReq(1, "w1", api.CategoryDataQuality))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				wantFinal(api.Failed, false, 0)(t, e, rq, rp)
				if got := e.get(rq.taskID); got.Reason != api.ReasonNonRetryable {
					t.Errorf("reason %q", got.Reason)
				}
			},
		},
		{
			name: "completed CANCELLED in the grace period", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.cancelling("w1", "")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeCancelled))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				wantFinal(api.Cancelled, false, 0)(t, e, rq, rp)
				if a := e.get(rq.taskID).Attempts[0]; a.CancelledDuringPhase != "processing" || string(a.PartialProgress) != `{"records":5}` {
					t.Errorf("attempt %+v", a)
				}
			},
		},
		{
			name: "completed FAILED while CANCELLING is never retried", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.cancelling("w1", "")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, failedReq(1, "w1", api.CategoryInfrastructure))}
			},
			check: wantFinal(api.Failed, false, 0),
		},
		{
			name: "completed SUCCEEDED just within the grace period is accepted as reported", status: 200, disp: api.Committed, cost: readCommit,
			prep: func(e *env) request {
				tk := e.cancellingSince("w1", testTiming.CancelGracePeriod()-time.Millisecond)
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantFinal(api.Succeeded, false, 0),
		},
		// 409 task_already_terminal, CANCELLED.
		{
			name: "started after cancel before start", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.cancelledBeforeStart()
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1"))}
			},
			check: wantTerminal(api.Cancelled),
		},
		{
			name: "completed after cancel before start", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.cancelledBeforeStart()
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantTerminal(api.Cancelled),
		},
		{
			name: "heartbeat on a SUCCEEDED task", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.succeeded("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantTerminal(api.Succeeded),
		},
		{
			// Terminal rows come before attempt_mismatch (docs/contract.md §4.5).
			name: "late completed of a zombie attempt after attempt 2 succeeded", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readRecord,
			prep: func(e *env) request {
				tk := e.zombieThenSucceeded()
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantTerminal(api.Succeeded),
		},
		{
			name: "heartbeat of an older attempt after attempt 2 succeeded", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.retriedThenSucceeded()
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantTerminal(api.Succeeded),
		},
		{
			// Only the attempt that ended the task can conflict.
			name: "different completed of an older attempt after attempt 2 succeeded", status: 409, code: api.CodeTaskAlreadyTerminal, disp: api.Cancel, cost: readRecord,
			prep: func(e *env) request {
				tk := e.retriedThenSucceeded()
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantTerminal(api.Succeeded),
		},
		// 409 attempt_mismatch, CANCELLED.
		{
			name: "heartbeat of an older attempt", status: 409, code: api.CodeAttemptMismatch, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.retried("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantMismatch(2, 1),
		},
		{
			name: "completed of an older attempt with a different report while attempt 2 runs", status: 409, code: api.CodeAttemptMismatch, disp: api.Cancel, cost: readRecord,
			prep: func(e *env) request {
				tk := e.retriedRunning()
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantMismatch(2, 1),
		},
		// 409 attempt_already_started, CANCELLED.
		{
			name: "started by another worker (duplicate delivery)", status: 409, code: api.CodeAttemptAlreadyStarted, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w2"))}
			},
		},
		{
			name: "completed by another worker", status: 409, code: api.CodeAttemptAlreadyStarted, disp: api.Cancel, cost: readOnly,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w2", api.OutcomeSucceeded))}
			},
		},
		// 410 task_expired, CANCELLED: the zombie transition is applied.
		{
			name: "heartbeat after the lease expired", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: heartbeatTransition,
			prep: func(e *env) request {
				tk := e.expired("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				got := e.get(rq.taskID)
				if got.State != api.Queued || got.Attempt != 2 || got.Attempts[0].Outcome != api.OutcomeZombie {
					t.Errorf("zombie not applied: %s attempt %d, attempt 1 %+v", got.State, got.Attempt, got.Attempts[0])
				}
				if tr := e.outboxTransitions(rq.taskID); tr[len(tr)-1] != "RUNNING>QUEUED" {
					t.Errorf("outbox %v", tr)
				}
			},
		},
		{
			name: "completed after the lease expired", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: readCommit,
			prep: func(e *env) request {
				tk := e.expired("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantState(api.Queued, 2),
		},
		{
			name: "heartbeat after the lease expired while CANCELLING", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: heartbeatTransition,
			prep: func(e *env) request {
				now := e.clock.Now()
				e.clock.Set(now.Add(-testTiming.HeartbeatTimeout() - time.Second))
				tk := e.cancelling("w1", "")
				e.clock.Set(now)
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				if got := e.get(rq.taskID); got.State != api.Failed || got.Reason != api.ReasonCancelTimeout {
					t.Errorf("task %s %s, want FAILED CANCEL_TIMEOUT", got.State, got.Reason)
				}
			},
		},
		{
			name: "heartbeat past the cancel grace", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: heartbeatTransition,
			prep: func(e *env) request {
				tk := e.cancellingSince("w1", testTiming.CancelGracePeriod()+time.Second) // the lease is still valid
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantCancelTimeout,
		},
		{
			name: "heartbeat at the cancel deadline", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: heartbeatTransition,
			prep: func(e *env) request {
				tk := e.cancellingSince("w1", testTiming.CancelGracePeriod())
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantCancelTimeout,
		},
		{
			name: "completed SUCCEEDED past the cancel grace", status: 410, code: api.CodeTaskExpired, disp: api.Cancel, cost: readCommit,
			prep: func(e *env) request {
				tk := e.cancellingSince("w1", testTiming.CancelGracePeriod()+time.Second)
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
			check: wantCancelTimeout,
		},
		// 409 completion_conflict, REJECTED.
		{
			name: "completed with a different outcome", status: 409, code: api.CodeCompletionConflict, disp: api.Rejected, cost: readOnly,
			prep: func(e *env) request {
				tk := e.succeeded("w1")
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, failedReq(1, "w1", api.CategoryDataQuality))}
			},
		},
		{
			name: "completed with a different output", status: 409, code: api.CodeCompletionConflict, disp: api.Rejected, cost: readOnly,
			prep: func(e *env) request {
				tk := e.succeeded("w1")
				c := completedReq(1, "w1", api.OutcomeSucceeded)
				c.Output = json.RawMessage(`{"rowCount":999}`)
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, c)}
			},
		},
		// 400 invalid_request (+field), REJECTED.
		badBody("malformed JSON", callbacks.KindHeartbeat, `{"attempt":1,`, "body"),
		// Control characters in worker text reach pages, streams and
		// terminals: refused, naming the field (tab, newline, CRLF pass).
		badBody("ESC in a heartbeat message", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","message":"\u001b]0;pwned\u0007"}`, "message"),
		badBody("bare CR in a heartbeat message", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","message":"ok\rdata: forged"}`, "message"),
		badBody("NUL in a heartbeat message", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","message":"a\u0000b"}`, "message"),
		badBody("ESC in an error message", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"FAILED","error":{"category":"USER_CODE","message":"\u001b[2J"}}`, "error.message"),
		badBody("bare CR in a stack trace", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"FAILED","error":{"category":"USER_CODE","message":"m","stackTrace":"at a\rat b"}}`, "error.stackTrace"),
		badBody("newline in a worker id", callbacks.KindStarted, `{"attempt":1,"workerId":"w1\nINFO forged"}`, "workerId"),
		badBody("C1 control in cancelledDuringPhase", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"CANCELLED","cancelledDuringPhase":"x\u009by"}`, "cancelledDuringPhase"),
		// Nested deeper than api.MaxJSONDepth: an SDK's parser may not
		// take it (Python's recursion limit), so it is refused here.
		badBody("checkpoint nested 1 000 deep", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","checkpoint":`+deepJSON(1000)+`}`, "checkpoint"),
		badBody("output nested 65 deep", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"SUCCEEDED","output":`+deepJSON(api.MaxJSONDepth+1)+`}`, "output"),
		badBody("partialProgress nested 1 000 deep", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"CANCELLED","cancelledDuringPhase":"RUNNING","partialProgress":`+deepJSON(1000)+`}`, "partialProgress"),
		badBody("not an object", callbacks.KindStarted, `[1]`, "body"),
		badBody("attempt missing", callbacks.KindStarted, `{"workerId":"w1"}`, "attempt"),
		badBody("workerId missing", callbacks.KindStarted, `{"attempt":1}`, "workerId"),
		badBody("attempt of the wrong type", callbacks.KindStarted, `{"attempt":"one","workerId":"w1"}`, "attempt"),
		badBody("progressPct out of range", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","progressPct":150}`, "progressPct"),
		badBody("checkpoint over 64 KiB", callbacks.KindHeartbeat, `{"attempt":1,"workerId":"w1","checkpoint":"`+strings.Repeat("x", api.MaxCheckpointBytes)+`"}`, "checkpoint"),
		badBody("unknown outcome", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"ZOMBIE"}`, "outcome"),
		badBody("FAILED without error", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"FAILED"}`, "error"),
		badBody("FAILED with an unknown category", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"FAILED","error":{"category":"OOPS"}}`, "error.category"),
		badBody("output over the cap", callbacks.KindCompleted, `{"attempt":1,"workerId":"w1","outcome":"SUCCEEDED","output":"`+strings.Repeat("x", api.MaxOutputBytes)+`"}`, "output"),
		// 401 invalid_token / token_expired, REJECTED.
		{
			name: "no Authorization header", status: 401, code: api.CodeInvalidToken, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, authz: "-", body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantAuthenticate,
		},
		{
			name: "not a bearer token", status: 401, code: api.CodeInvalidToken, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, authz: "Basic " + e.token(tk, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantAuthenticate,
		},
		{
			name: "garbage token", status: 401, code: api.CodeInvalidToken, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: "not.a.jwt", body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantAuthenticate,
		},
		{
			name: "expired token", status: 401, code: api.CodeTokenExpired, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				tok := e.tokenFor(scopeOf(tk, 1), time.Hour, e.clock.Now().Add(-2*time.Hour))
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tok, body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
			check: wantAuthenticate,
		},
		// 403 token_scope_mismatch, REJECTED.
		{
			name: "token of another task", status: 403, code: api.CodeTokenScopeMismatch, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk, other := e.running("w1"), e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(other, 1), body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
		},
		{
			name: "token of another tenant's task", status: 403, code: api.CodeTokenScopeMismatch, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				other := e.create(func(t *task.Task) { t.TenantID = "globex" })
				return request{kind: callbacks.KindCompleted, taskID: tk.ID, token: e.token(other, 1), body: mustJSON(e.t, completedReq(1, "w1", api.OutcomeSucceeded))}
			},
		},
		{
			name: "body attempt is not the token's", status: 403, code: api.CodeTokenScopeMismatch, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.retried("w1")
				return request{kind: callbacks.KindStarted, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(2, "w2"))}
			},
		},
		{
			name: "scope beats a bad body", status: 403, code: api.CodeTokenScopeMismatch, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: []byte(`{"attempt":2,"progressPct":"x"}`)}
			},
		},
		// 404 task_not_found, REJECTED.
		{
			name: "unknown task", status: 404, code: api.CodeTaskNotFound, disp: api.Rejected, cost: readOnly,
			prep: func(e *env) request {
				id := task.NewTaskID(e.clock.Now())
				tok := e.tokenFor(auth.Scope{TenantID: "acme", WorkspaceID: "ws1", RunID: "run_x", TaskID: id, Attempt: 1}, time.Hour, e.clock.Now())
				return request{kind: callbacks.KindHeartbeat, taskID: id, token: tok, body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
		},
		{
			name: "unknown callback path", status: 404, code: api.CodeNotFound, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{path: callbacks.PathPrefix + tk.ID + "/finished", taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(e.t, startedReq(1, "w1"))}
			},
		},
		// 405 (method first).
		{
			name: "GET", status: 405, code: api.CodeMethodNotAllowed, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{method: http.MethodGet, kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1)}
			},
			check: func(t *testing.T, e *env, rq request, rp reply) {
				if rp.header.Get("Allow") != http.MethodPost {
					t.Errorf("Allow %q", rp.header.Get("Allow"))
				}
			},
		},
		// 413 payload_too_large / 415 unsupported_media_type, REJECTED.
		{
			name: "body over 1 MiB", status: 413, code: api.CodePayloadTooLarge, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				big := `{"attempt":1,"workerId":"w1","message":"` + strings.Repeat("x", callbacks.DefaultMaxBodyBytes) + `"}`
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), body: []byte(big)}
			},
		},
		{
			name: "oversized body beats a missing token", status: 413, code: api.CodePayloadTooLarge, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, authz: "-", body: make([]byte, callbacks.DefaultMaxBodyBytes+1)}
			},
		},
		{
			name: "text/plain", status: 415, code: api.CodeUnsupportedMediaType, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), contentType: "text/plain", body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
		},
		{
			name: "no Content-Type", status: 415, code: api.CodeUnsupportedMediaType, disp: api.Rejected, cost: noRPC,
			prep: func(e *env) request {
				tk := e.running("w1")
				return request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: e.token(tk, 1), contentType: "-", body: mustJSON(e.t, heartbeatReq(1, "w1"))}
			},
		},
	}
}

func badBody(name string, kind callbacks.Kind, body, field string) contractCase {
	return contractCase{
		name: "bad body: " + name, status: 400, code: api.CodeInvalidRequest, disp: api.Rejected, cost: noRPC,
		prep: func(e *env) request {
			tk := e.running("w1")
			return request{kind: kind, taskID: tk.ID, token: e.token(tk, 1), body: []byte(body)}
		},
		check: func(t *testing.T, e *env, rq request, rp reply) {
			if rp.resp.Field != field {
				t.Errorf("field %q, want %q (%s)", rp.resp.Field, field, rp.raw)
			}
		},
	}
}

func (e *env) get(id string) task.Task {
	e.t.Helper()
	got, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func wantState(state api.State, attempt int) func(*testing.T, *env, request, reply) {
	return func(t *testing.T, e *env, rq request, rp reply) {
		t.Helper()
		if got := e.get(rq.taskID); got.State != state || got.Attempt != attempt {
			t.Errorf("task %s attempt %d, want %s attempt %d", got.State, got.Attempt, state, attempt)
		}
	}
}

func wantFinal(state api.State, retry bool, next int) func(*testing.T, *env, request, reply) {
	return func(t *testing.T, e *env, rq request, rp reply) {
		t.Helper()
		if rp.resp.FinalState != state || rp.resp.RetryScheduled != retry || rp.resp.NextAttempt != next {
			t.Errorf("answer %s, want finalState %s retryScheduled %v nextAttempt %d", rp.raw, state, retry, next)
		}
		if got := e.get(rq.taskID); got.State != state {
			t.Errorf("stored state %s, answered %s", got.State, state)
		}
	}
}

func wantTerminal(state api.State) func(*testing.T, *env, request, reply) {
	return func(t *testing.T, e *env, rq request, rp reply) {
		t.Helper()
		if rp.resp.State != state {
			t.Errorf("state %q, want %q: %s", rp.resp.State, state, rp.raw)
		}
	}
}

func wantMismatch(expected, received int) func(*testing.T, *env, request, reply) {
	return func(t *testing.T, e *env, rq request, rp reply) {
		t.Helper()
		if rp.resp.ExpectedAttempt != expected || rp.resp.ReceivedAttempt != received {
			t.Errorf("expectedAttempt %d receivedAttempt %d, want %d %d", rp.resp.ExpectedAttempt, rp.resp.ReceivedAttempt, expected, received)
		}
	}
}

func wantAuthenticate(t *testing.T, e *env, rq request, rp reply) {
	t.Helper()
	if !strings.HasPrefix(rp.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("WWW-Authenticate %q", rp.header.Get("WWW-Authenticate"))
	}
}

// TestContract runs every row of docs/contract.md §4.4 against the
// emulator and, for each, checks the status, error, disposition, the
// Firestore round trips (0 before the transaction, BatchGetDocuments +
// Commit when it writes, BatchGetDocuments + Rollback when it does not),
// and that nothing was written when the callback was refused or changed
// nothing.
func TestContract(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range contractCases() {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			rq := tc.prep(e)
			before := e.snapshot(rq.taskID)
			e.rpc.Reset()
			rp := e.do(rq)
			rpcs := e.rpc.Counts()
			if rp.status != tc.status || rp.resp.Error != tc.code || rp.resp.Disposition != tc.disp {
				t.Fatalf("got %d %q %s, want %d %q %s: %s", rp.status, rp.resp.Error, rp.resp.Disposition, tc.status, tc.code, tc.disp, rp.raw)
			}
			if rp.resp.Acknowledged != (tc.status == http.StatusOK) {
				t.Errorf("acknowledged %v on %d", rp.resp.Acknowledged, rp.status)
			}
			if tc.status != http.StatusOK && rp.resp.Message == "" {
				t.Errorf("no message: %s", rp.raw)
			}
			if !rp.resp.ServerTime.Equal(e.clock.Now()) {
				t.Errorf("serverTime %v, want the server clock %v", rp.resp.ServerTime, e.clock.Now())
			}
			if rq.kind == callbacks.KindHeartbeat && tc.status == http.StatusOK {
				if _, ok := rp.fields["shouldCancel"]; !ok {
					t.Errorf("heartbeat 200 without shouldCancel: %s", rp.raw)
				}
			}
			if tc.code == api.CodeTaskExpired && rpcs["RunQuery"] == 1 {
				// A timer that ran out looks up Servo's recorded outages
				// first (store.machine), a read cached for 2 s of wall
				// time: a slow run between two such cases reads it again.
				delete(rpcs, "RunQuery")
			}
			if want := tc.cost.want(); !maps.Equal(rpcs, want) {
				t.Errorf("Firestore RPCs %v, want %v", rpcs, want)
			}
			after := e.snapshot(rq.taskID)
			commits := tc.cost == readCommit || tc.cost == heartbeatTransition
			if wrote := !sameSnapshot(before, after); wrote != commits {
				t.Errorf("wrote = %v, want %v\nbefore %+v\nafter  %+v", wrote, commits, before, after)
			}
			if tc.check != nil {
				tc.check(t, e, rq, rp)
			}
		})
	}
}

// TestUnavailable: when Firestore cannot be reached the callback answers
// 503 unavailable, disposition RETRY, with Retry-After, so the worker
// retries the same body; checks before the transaction still answer as
// usual.
func TestUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	tk := e.running("w1")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	st, err := store.New(e.ctx, e.project, store.WithClientOptions(option.WithEndpoint(dead)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := e.cfg
	cfg.Store, cfg.StoreTimeout, cfg.RetryAfter = st, 500*time.Millisecond, 3*time.Second
	h := newHandler(t, cfg)
	for _, kind := range []callbacks.Kind{callbacks.KindStarted, callbacks.KindHeartbeat, callbacks.KindCompleted} {
		body := map[callbacks.Kind]any{
			callbacks.KindStarted: startedReq(1, "w1"), callbacks.KindHeartbeat: heartbeatReq(1, "w1"),
			callbacks.KindCompleted: completedReq(1, "w1", api.OutcomeSucceeded),
		}[kind]
		rp := serve(t, h, request{kind: kind, taskID: tk.ID, token: e.token(tk, 1), body: mustJSON(t, body)})
		if rp.status != http.StatusServiceUnavailable || rp.resp.Error != api.CodeUnavailable || rp.resp.Disposition != api.Retry {
			t.Fatalf("%s: %d %s", kind, rp.status, rp.raw)
		}
		if ra := rp.header.Get("Retry-After"); ra != "3" {
			t.Errorf("%s: Retry-After %q, want 3", kind, ra)
		}
	}
	if rp := serve(t, h, request{kind: callbacks.KindHeartbeat, taskID: tk.ID, authz: "-", body: mustJSON(t, heartbeatReq(1, "w1"))}); rp.status != http.StatusUnauthorized {
		t.Errorf("no token with the store down: %d %s", rp.status, rp.raw)
	}
	// The same body succeeds once the store is back.
	if rp := e.post(callbacks.KindCompleted, tk.ID, e.token(tk, 1), completedReq(1, "w1", api.OutcomeSucceeded)); rp.status != http.StatusOK {
		t.Errorf("retry against the live store: %d %s", rp.status, rp.raw)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"status":503`) || !strings.Contains(logs, `"storeError"`) {
		t.Errorf("503 not logged with its cause:\n%s", logs)
	}
}

// deepJSON is an array nested n levels deep: [[[…]]].
func deepJSON(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
