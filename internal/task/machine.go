package task

import (
	"fmt"
	"slices"
	"time"

	"github.com/servo-dev/servo/api"
)

// EventKind names an input to the state machine.
type EventKind string

// Event kinds. Callbacks send Started, Heartbeat and Completed; the
// dispatcher sends Enqueued, DispatchFailed and Cancel; the sweeper sends Redrive,
// LeaseExpired, CancelTimeout and DeadlineExceeded.
const (
	EventEnqueued         EventKind = "ENQUEUED"
	EventRedrive          EventKind = "REDRIVE"
	EventStarted          EventKind = "STARTED"
	EventHeartbeat        EventKind = "HEARTBEAT"
	EventCompleted        EventKind = "COMPLETED"
	EventCancel           EventKind = "CANCEL"
	EventLeaseExpired     EventKind = "LEASE_EXPIRED"
	EventCancelTimeout    EventKind = "CANCEL_TIMEOUT"
	EventDeadlineExceeded EventKind = "DEADLINE_EXCEEDED"
	// EventDispatchFailed: the Cloud Task of a task stored QUEUED at submit
	// could not be created; the task goes back to PENDING with its dispatch
	// check due at once, so the sweeper's next pass re-drives it.
	EventDispatchFailed EventKind = "DISPATCH_FAILED"
	// EventClaimed: a pull-pool worker claimed the attempt (pull/). It is
	// the attempt's started for WorkerID, but only an attempt nobody has
	// started yet is claimable: a claim of a RUNNING or CANCELLING attempt
	// (a duplicate transport message) is refused with
	// attempt_already_started, even for the same worker id, so one message
	// delivered twice yields one claim.
	EventClaimed EventKind = "CLAIMED"
	// EventAdmit: the sweeper's admit duty offers a run slot to a QUEUED
	// task waiting for one (WaitingSince set); with Event.SlotFree the task
	// takes it and is enqueued. The state stays QUEUED.
	EventAdmit EventKind = "ADMIT"
	// EventExecution: the jobs dispatch endpoint started (or found) the
	// Cloud Run Job execution that runs the attempt (Event.Execution); it is
	// recorded on the attempt, and changes no state. The record is a
	// compare-and-set: it is taken when the attempt records no execution or
	// Event.PreviousExecution (one that ended without running the attempt),
	// is a no-op when it records this one, and is refused with
	// CodeExecutionConflict otherwise; a task that is terminal,
	// or has moved to a newer attempt, refuses it too. A refused execution
	// that the caller started must be cancelled.
	EventExecution EventKind = "EXECUTION"
)

// EventKinds lists every kind.
var EventKinds = []EventKind{EventEnqueued, EventRedrive, EventStarted, EventHeartbeat, EventCompleted, EventCancel, EventLeaseExpired, EventCancelTimeout, EventDeadlineExceeded, EventDispatchFailed, EventClaimed, EventExecution, EventAdmit}

// Edges is the transition table: for each state and event, the states the
// task may be in afterwards. A pair that is absent leaves the state as it is
// (the event is a no-op or is rejected). Terminal states have no edges.
var Edges = map[api.State]map[EventKind][]api.State{
	api.Pending: {
		EventExecution:        {api.Pending},
		EventEnqueued:         {api.Queued},
		EventRedrive:          {api.Pending, api.Failed},
		EventStarted:          {api.Running},
		EventHeartbeat:        {api.Running},
		EventCompleted:        {api.Succeeded, api.Failed, api.Cancelled, api.Queued},
		EventCancel:           {api.Cancelled},
		EventDeadlineExceeded: {api.Failed},
		EventClaimed:          {api.Running},
	},
	api.Queued: {
		EventExecution:        {api.Queued},
		EventDispatchFailed:   {api.Pending},
		EventAdmit:            {api.Queued},
		EventRedrive:          {api.Queued, api.Failed},
		EventStarted:          {api.Running},
		EventHeartbeat:        {api.Running},
		EventCompleted:        {api.Succeeded, api.Failed, api.Cancelled, api.Queued},
		EventCancel:           {api.Cancelled},
		EventDeadlineExceeded: {api.Failed},
		EventClaimed:          {api.Running},
	},
	api.Running: {
		// A started/heartbeat/completed that finds the lease expired applies
		// the zombie transition itself (retry → QUEUED, or FAILED).
		EventExecution:        {api.Running},
		EventStarted:          {api.Running, api.Queued, api.Failed},
		EventHeartbeat:        {api.Running, api.Queued, api.Failed},
		EventCompleted:        {api.Succeeded, api.Failed, api.Cancelled, api.Queued},
		EventCancel:           {api.Cancelling},
		EventLeaseExpired:     {api.Queued, api.Failed},
		EventDeadlineExceeded: {api.Failed},
	},
	api.Cancelling: {
		// A started/heartbeat/completed that finds the cancel grace or the
		// lease run out applies the cancel timeout itself (FAILED).
		EventExecution:        {api.Cancelling},
		EventStarted:          {api.Cancelling, api.Failed},
		EventHeartbeat:        {api.Cancelling, api.Failed},
		EventCompleted:        {api.Succeeded, api.Failed, api.Cancelled},
		EventCancel:           {api.Cancelling},
		EventLeaseExpired:     {api.Failed},
		EventCancelTimeout:    {api.Failed},
		EventDeadlineExceeded: {api.Failed},
	},
}

// Event is one input to the state machine.
type Event struct {
	Kind EventKind
	// Attempt is the attempt the event concerns: the token's attempt for
	// callbacks, the attempt the sweeper observed, the enqueued attempt.
	// Zero (Cancel only) means the current attempt.
	Attempt int
	// Now is the server time of the event.
	Now time.Time
	// WorkerID is the reporting worker (callbacks).
	WorkerID string
	// TenantID, WorkspaceID and RunID are the scope the callback's token
	// names. When TenantID is set, a task with another scope refuses the
	// callback with token_scope_mismatch before anything else is decided.
	TenantID, WorkspaceID, RunID string
	// Heartbeat is the heartbeat body (EventHeartbeat).
	Heartbeat *api.HeartbeatRequest
	// Completed is the completed body (EventCompleted).
	Completed *api.CompletedRequest
	// Reason is the cancel reason (EventCancel).
	Reason string
	// Jitter in [0, 1) draws the full-jitter retry delay.
	Jitter float64
	// MaxRedrives bounds sweeper re-drives before DISPATCH_TIMEOUT.
	MaxRedrives int
	// Held (EventRedrive) says Cloud Tasks still holds the attempt's
	// current dispatch (a backlog, a paused queue): it will be delivered,
	// so the start timeout is stretched instead of re-driving.
	Held bool
	// Delivery (EventRedrive) is what Cloud Tasks said of the current
	// dispatch when the sweeper asked (nil for a pull worker, or when the
	// dispatch is gone): recorded on the task while it waits, so that a
	// delivery that keeps failing is visible (Task.Delivery).
	Delivery *api.Delivery
	// Execution is the Cloud Run Job execution to record (EventExecution);
	// PreviousExecution is the one the caller expects recorded (empty: none).
	Execution, PreviousExecution string
	// Hold (EventEnqueued at creation) is the quota hold the store chose
	// for a task of a limited tenant or worker; nil when no quota applies.
	Hold *QuotaHold
	// SlotFree (EventEnqueued with Hold, EventAdmit) says the store found
	// a free run slot for the task in the same transaction.
	SlotFree bool
	// Retention is how long a task that ends and its attempt records are
	// kept (their Firestore TTL, setExpiry); zero keeps them. The store
	// sets it from the task's tenant.
	Retention time.Duration
	// Outages are the recent spans during which Servo could not record
	// callbacks (its store or itself unavailable). A lease or a cancel
	// grace is not over until it has lasted its full length outside them
	// (docs/contract.md §5.3): a worker that kept reporting through an
	// outage is not made a zombie by it.
	Outages []Outage
}

// Outage is a span of time during which Servo could not record callbacks.
type Outage struct {
	From time.Time
	To   time.Time
}

// outageCredit is how much of [from, to] the outages cover (overlapping
// outages count once).
func outageCredit(outs []Outage, from, to time.Time) time.Duration {
	if len(outs) == 0 || !to.After(from) {
		return 0
	}
	type span struct{ a, b time.Time }
	var spans []span
	for _, o := range outs {
		a, b := laterOf(from, &o.From), o.To
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			spans = append(spans, span{a, b})
		}
	}
	slices.SortFunc(spans, func(x, y span) int { return x.a.Compare(y.a) })
	var total time.Duration
	var end time.Time
	for _, s := range spans {
		if s.a.Before(end) {
			s.a = end
		}
		if s.b.After(s.a) {
			total += s.b.Sub(s.a)
			end = s.b
		}
	}
	return total
}

// Expired reports whether the result ended an attempt because its lease
// or its cancel grace ran out: the store then looks up recent outages
// (Event.Outages) and applies the event again with them.
func (r *Result) Expired() bool {
	a := r.Attempt
	return r.Write && a != nil && (a.Outcome == api.OutcomeZombie || a.Outcome == api.OutcomeCancelTimeout)
}

// Rejection is why the machine refused a callback or a cancel.
type Rejection struct {
	// Code is one of the Code* constants.
	Code string
	// State is the task's state (task_already_terminal).
	State api.State
	// Expected and Received are attempts (attempt_mismatch).
	Expected, Received int
	// Message is for people.
	Message string
}

func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// Result is the effect of an event: the new task and attempt records to
// write, the transitions to publish, and what the caller must do next.
type Result struct {
	// Task is the task after the event.
	Task Task
	// Attempt is the event's attempt record after the event.
	Attempt *Attempt
	// Next is a new attempt record to create (a retry).
	Next *Attempt
	// Write says Task, Attempt and Next must be written.
	Write bool
	// Transitions are the state changes, in order, for the outbox.
	Transitions []Transition
	// Rejection, when set, is the refusal to answer; the result may still
	// need writing (an expired lease is applied, then refused).
	Rejection *Rejection
	// Replay marks an identical repeat of an accepted completion.
	Replay bool
	// Enqueue asks the caller to enqueue the task's current attempt after commit.
	Enqueue bool
	// Dequeue asks the caller to delete the current attempt's Cloud Task (best effort).
	Dequeue bool
	// CancelExecution names the Cloud Run Job execution of the attempt this
	// result ended against the job's will (lease expired, cancel grace over,
	// cancelled before the job said started), which the caller cancels
	// after commit (best effort): the job may still run.
	CancelExecution string
	// ShouldCancel and CancelReason answer a heartbeat while CANCELLING.
	ShouldCancel bool
	CancelReason string
	// FinalState, RetryScheduled and NextAttempt answer a completion.
	FinalState     api.State
	RetryScheduled bool
	NextAttempt    int
}

// Apply computes the effect of ev on t, whose record for ev's attempt (or
// the current attempt, for a zero ev.Attempt) is cur (nil if absent). It is
// pure: the store calls it inside a transaction that re-read t and cur.
func Apply(t Task, cur *Attempt, ev Event) Result {
	r := Result{Task: t}
	if cur != nil {
		c := *cur
		r.Attempt = &c
	}
	m := machine{r: &r, ev: ev, now: ev.Now.UTC()}
	m.apply()
	m.setExpiry()
	r.Task.record(r.Transitions)
	if r.Write {
		r.Task.UpdatedAt = m.now
	}
	return r
}

type machine struct {
	r   *Result
	ev  Event
	now time.Time
}

func (m *machine) t() *Task { return &m.r.Task }

func (m *machine) reject(code, msg string) {
	m.r.Rejection = &Rejection{Code: code, Message: msg}
}

func (m *machine) apply() {
	t := m.t()
	switch m.ev.Kind {
	case EventStarted, EventHeartbeat, EventCompleted:
		if !m.guardCallback() {
			return
		}
		switch m.ev.Kind {
		case EventStarted:
			if t.State == api.Pending || t.State == api.Queued {
				m.start()
			}
		case EventHeartbeat:
			m.heartbeat()
		case EventCompleted:
			m.complete()
		}
	case EventClaimed:
		m.claim()
	case EventCancel:
		m.cancel()
	case EventEnqueued:
		if m.ev.Attempt == t.Attempt && t.State == api.Pending && m.ev.Hold != nil {
			m.hold()
			if !m.ev.SlotFree {
				return
			}
		}
		if m.ev.Attempt == t.Attempt && t.State == api.Pending {
			m.transition(api.Queued, api.ReasonEnqueued, "")
			if t.EnqueueAt != nil {
				// A start beyond the transport's horizon: queued in
				// Firestore; the dispatch duty enqueues it at EnqueueAt.
				check := *t.EnqueueAt
				t.DispatchCheckAt, t.StartTimeoutAt = &check, nil
			} else {
				m.armDispatch(laterOf(m.now, t.NotBefore))
			}
		}
	case EventRedrive:
		if m.ev.Attempt != t.Attempt || (t.State != api.Pending && t.State != api.Queued) || !due(t.DispatchCheckAt, m.now) {
			return
		}
		if t.EnqueueAt != nil {
			// A delayed start now within its transport's horizon: its
			// first enqueue, not a re-drive.
			t.EnqueueAt = nil
			m.armDispatch(laterOf(m.now, t.NotBefore))
			m.r.Write, m.r.Enqueue = true, true
			return
		}
		if t.State == api.Queued && t.StartTimeoutAt != nil && m.now.Before(*t.StartTimeoutAt) {
			m.probeDelivery()
			return
		}
		if m.ev.Held && t.State == api.Queued {
			// Waiting in the queue, not lost: no re-drive (it would move
			// the dispatch to the back of the backlog) and no
			// DISPATCH_TIMEOUT; look again a start timeout later.
			check := m.now.Add(t.Timing.StartTimeout())
			t.DispatchCheckAt, t.StartTimeoutAt = &check, &check
			if m.ev.Delivery != nil {
				t.Delivery = m.ev.Delivery
			}
			m.r.Write = true
			return
		}
		if t.Redrives >= m.ev.MaxRedrives {
			m.endAttempt(api.OutcomeTimedOut, dispatchTimeoutError(t, m.ev.Delivery))
			m.transition(api.Failed, api.ReasonDispatchTimeout, api.OutcomeTimedOut)
			return
		}
		t.Redrives++
		m.armDispatch(laterOf(m.now, t.NotBefore))
		m.r.Write, m.r.Enqueue = true, true
	case EventAdmit:
		m.admit()
	case EventDispatchFailed:
		if m.ev.Attempt == t.Attempt && t.State == api.Queued {
			m.transition(api.Pending, api.ReasonDispatchFailed, "")
			now := m.now
			t.DispatchCheckAt, t.StartTimeoutAt = &now, nil
		}
	case EventLeaseExpired:
		if m.ev.Attempt == t.Attempt && (t.State == api.Running || t.State == api.Cancelling) && m.leaseOver() {
			m.expire()
		}
	case EventCancelTimeout:
		if m.ev.Attempt == t.Attempt && t.State == api.Cancelling && m.graceOver() {
			m.cancelTimeout()
		}
	case EventExecution:
		m.execution()
	case EventDeadlineExceeded:
		if m.ev.Attempt == t.Attempt && !t.State.Terminal() && due(t.Deadline, m.now) {
			m.endAttempt(api.OutcomeTimedOut, nil)
			m.transition(api.Failed, api.ReasonDeadlineExceeded, api.OutcomeTimedOut)
		}
	}
}

// guardCallback applies the attempt guard in the order of docs/contract.md
// §4.5 and reports whether the callback may proceed. The handler has
// answered the 4xx rows before the transaction; the scope of a token that
// names the right task is the last of them, and only the task can tell it.
// Then:
//
//  1. the task is terminal: an identical repeat of the committed completed
//     replays its answer; a different completed from the attempt that
//     ended the task is completion_conflict; anything else is
//     task_already_terminal;
//  2. the callback's attempt is older than the task's: attempt_mismatch,
//     except that an identical repeat of that attempt's committed
//     completed (one that scheduled the retry) still replays its answer,
//     as docs/contract.md §4.5 (step 5.3) says;
//  3. the attempt was started by another worker id: attempt_already_started;
//  4. the lease, or while CANCELLING the cancel grace, has run out: the
//     sweeper's transition is applied here, in the same transaction, then
//     task_expired;
//  5. accept.
func (m *machine) guardCallback() bool {
	t, cur := m.t(), m.r.Attempt
	if m.ev.TenantID != "" && (m.ev.TenantID != t.TenantID || m.ev.WorkspaceID != t.WorkspaceID || m.ev.RunID != t.RunID) {
		m.reject(api.CodeTokenScopeMismatch, "the task token is for another tenant, workspace or run")
		return false
	}
	// committed is the token's attempt's accepted completion, if any.
	committed := m.ev.Kind == EventCompleted && cur != nil && cur.CompletionDigest != ""
	identical := committed && cur.CompletionDigest == CompletionDigest(m.ev.Completed)
	if t.State.Terminal() {
		switch {
		case identical:
			m.replay()
		case committed && cur.Attempt == t.Attempt:
			m.reject(api.CodeCompletionConflict, fmt.Sprintf("attempt %d already completed with a different report", cur.Attempt))
		default:
			m.r.Rejection = &Rejection{Code: api.CodeTaskAlreadyTerminal, State: t.State, Message: "task is already " + string(t.State)}
		}
		return false
	}
	if m.ev.Attempt != t.Attempt {
		if identical {
			m.replay()
			return false
		}
		m.r.Rejection = &Rejection{Code: api.CodeAttemptMismatch, Expected: t.Attempt, Received: m.ev.Attempt,
			Message: fmt.Sprintf("attempt %d is not the task's current attempt %d", m.ev.Attempt, t.Attempt)}
		return false
	}
	if t.State == api.Running || t.State == api.Cancelling {
		if cur != nil && cur.WorkerID != "" && cur.WorkerID != m.ev.WorkerID {
			m.reject(api.CodeAttemptAlreadyStarted, fmt.Sprintf("attempt %d was started by another worker", t.Attempt))
			return false
		}
		// The sweeper applies the cancel timeout before the lease expiry
		// (zombie duties "cancel", then "lease"); so does the callback.
		switch {
		case t.State == api.Cancelling && m.graceOver():
			m.cancelTimeout()
			m.reject(api.CodeTaskExpired, "the cancel grace period has run out")
			return false
		case m.leaseOver():
			m.expire()
			m.reject(api.CodeTaskExpired, "task exceeded its heartbeat timeout")
			return false
		}
	}
	return true
}

// claim starts the attempt for a pull-pool worker when nobody has started
// it: a terminal task, an older attempt, and an attempt already started
// (by any worker, the claimer included) are refused, and nothing changes
// (the sweeper, not a claim, applies an expired lease).
func (m *machine) claim() {
	t := m.t()
	switch {
	case t.State.Terminal():
		m.r.Rejection = &Rejection{Code: api.CodeTaskAlreadyTerminal, State: t.State, Message: "task is already " + string(t.State)}
	case m.ev.Attempt != t.Attempt:
		m.r.Rejection = &Rejection{Code: api.CodeAttemptMismatch, Expected: t.Attempt, Received: m.ev.Attempt,
			Message: fmt.Sprintf("attempt %d is not the task's current attempt %d", m.ev.Attempt, t.Attempt)}
	case t.State == api.Running || t.State == api.Cancelling:
		m.reject(api.CodeAttemptAlreadyStarted, fmt.Sprintf("attempt %d was already claimed or started", t.Attempt))
	default:
		m.start()
	}
}

// replay answers an identical repeat of the token's attempt's committed
// completion as it was first answered, and changes nothing.
func (m *machine) replay() {
	t, cur := m.t(), m.r.Attempt
	m.r.Replay = true
	if cur.Attempt < t.Attempt {
		// Only a completion that scheduled the retry leaves an older
		// attempt with a committed report.
		m.r.FinalState, m.r.RetryScheduled, m.r.NextAttempt = api.Queued, true, cur.Attempt+1
		return
	}
	m.r.FinalState = t.State
}

func (m *machine) attempt() *Attempt {
	if m.r.Attempt == nil {
		m.r.Attempt = &Attempt{Attempt: m.t().Attempt, CreatedAt: m.now}
	}
	return m.r.Attempt
}

func (m *machine) start() {
	t, a := m.t(), m.attempt()
	now := m.now
	a.WorkerID, a.StartedAt = m.ev.WorkerID, &now
	m.transition(api.Running, api.ReasonStarted, "")
	lease := now.Add(t.Timing.HeartbeatTimeout())
	t.LeaseExpiresAt = &lease
}

func (m *machine) heartbeat() {
	t := m.t()
	started := t.State == api.Pending || t.State == api.Queued
	if started {
		m.start()
	}
	a, hb, now := m.attempt(), m.ev.Heartbeat, m.now
	if !started && !m.heartbeatWrites(a, hb) {
		// Accepted, nothing written: the stored lease outlasts the next
		// heartbeat (see heartbeatWrites).
		return
	}
	a.LastHeartbeatAt = &now
	a.recordHeartbeat(now)
	if hb != nil {
		if hb.ProgressPct != nil {
			p := *hb.ProgressPct
			a.ProgressPct = &p
		}
		if hb.Message != "" {
			a.Message = hb.Message
		}
		if len(hb.Checkpoint) > 0 {
			a.Checkpoint = hb.Checkpoint
		}
	}
	lease := now.Add(t.Timing.HeartbeatTimeout())
	t.LeaseExpiresAt = &lease
	m.r.Write = true
	if t.State == api.Cancelling {
		m.r.ShouldCancel, m.r.CancelReason = true, t.CancelReason
	}
}

func (m *machine) complete() {
	t := m.t()
	if t.State == api.Pending || t.State == api.Queued {
		m.start()
	}
	c, a, now := m.ev.Completed, m.attempt(), m.now
	a.CompletedAt, a.ReportedAt = &now, c.CompletedAt
	a.Output, a.Error, a.Metrics = c.Output, c.Error, c.Metrics
	a.CancelledDuringPhase, a.PartialProgress = c.CancelledDuringPhase, c.PartialProgress
	a.CompletionDigest = CompletionDigest(c)
	a.Outcome = c.Outcome
	switch c.Outcome {
	case api.OutcomeSucceeded:
		m.transition(api.Succeeded, api.ReasonSucceeded, c.Outcome)
	case api.OutcomeCancelled:
		reason := api.ReasonWorkerCancelled
		if t.State == api.Cancelling && t.CancelReason != "" {
			reason = t.CancelReason
		}
		m.transition(api.Cancelled, reason, c.Outcome)
	case api.OutcomeFailed:
		if t.State == api.Cancelling {
			m.transition(api.Failed, api.ReasonFailedCancelling, c.Outcome)
			break
		}
		retryable := c.Error != nil && RetryableByDefault(c.Error.Category) && (c.Error.Retryable == nil || *c.Error.Retryable)
		var cat api.Category
		if c.Error != nil {
			cat = c.Error.Category
		}
		m.retryOrFail(retryable, cat, api.ReasonRetriesExhausted, c.Outcome)
	}
	m.r.FinalState = t.State
}

// expire applies the zombie transition for a lease that ran out.
func (m *machine) expire() {
	t := m.t()
	cancelling := t.State == api.Cancelling
	m.stopExecution()
	m.endAttempt(api.OutcomeZombie, &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "no heartbeat within the heartbeat timeout"})
	if cancelling {
		m.transition(api.Failed, api.ReasonCancelTimeout, api.OutcomeZombie)
		return
	}
	m.retryOrFail(true, api.CategoryInfrastructure, api.ReasonHeartbeatTimeout, api.OutcomeZombie)
}

// execution records the attempt's Cloud Run Job execution
// (EventExecution): a compare-and-set on the attempt record.
func (m *machine) execution() {
	t, cur := m.t(), m.r.Attempt
	switch {
	case t.State.Terminal():
		m.r.Rejection = &Rejection{Code: api.CodeTaskAlreadyTerminal, State: t.State, Message: "task is already " + string(t.State)}
		return
	case m.ev.Attempt != t.Attempt:
		m.r.Rejection = &Rejection{Code: api.CodeAttemptMismatch, Expected: t.Attempt, Received: m.ev.Attempt,
			Message: fmt.Sprintf("attempt %d is not the task's current attempt %d", m.ev.Attempt, t.Attempt)}
		return
	}
	recorded := ""
	if cur != nil {
		recorded = cur.Execution
	}
	switch recorded {
	case m.ev.Execution:
		return // already recorded: nothing to write
	case "", m.ev.PreviousExecution:
		m.attempt().Execution = m.ev.Execution
		m.r.Write = true
	default:
		m.reject(api.CodeExecutionConflict, fmt.Sprintf("attempt %d already runs in execution %s", t.Attempt, recorded))
	}
}

// cancelTimeout applies the end of a CANCELLING task's grace period: the
// attempt ends CANCEL_TIMEOUT and the task FAILED, never retried. The
// grace period is [cancel, CancelDeadline): at CancelDeadline itself it
// has run out, for the sweeper and for a callback alike.
func (m *machine) cancelTimeout() {
	m.stopExecution()
	m.endAttempt(api.OutcomeCancelTimeout, nil)
	m.transition(api.Failed, api.ReasonCancelTimeout, api.OutcomeCancelTimeout)
}

// stopExecution asks the caller to cancel the attempt's Cloud Run Job
// execution, if it has one, after commit.
func (m *machine) stopExecution() {
	if a := m.r.Attempt; a != nil && a.Execution != "" {
		m.r.CancelExecution = a.Execution
	}
}

// retryOrFail ends the current (already ended) attempt's task, whose
// failure has category cat: a new attempt when the policy, the attempts
// left and the deadline allow it, FAILED otherwise. Two counts are
// enforced (docs/contract.md §6.2): the attempts that failed in cat (or,
// for a category without a policy of its own, in any such category)
// against its policy's maxAttempts, and the task's attempts against
// TotalAttempts; the first one reached ends the task.
func (m *machine) retryOrFail(retryable bool, cat api.Category, exhaustedReason string, outcome api.Outcome) {
	t := m.t()
	if !retryable {
		m.transition(api.Failed, api.ReasonNonRetryable, outcome)
		return
	}
	p, own := RetryFor(t.Retry, cat)
	n := t.FailedIn(cat, own) + 1
	if n >= p.MaxAttempts || t.Attempt >= TotalAttempts(t.Retry) {
		m.transition(api.Failed, exhaustedReason, outcome)
		return
	}
	at := m.now.Add(Backoff(p, n, m.ev.Jitter))
	if t.Deadline != nil && !at.Before(*t.Deadline) {
		m.transition(api.Failed, api.ReasonDeadlineExceeded, outcome)
		return
	}
	prev := m.attempt()
	m.transition(api.Queued, api.ReasonRetryScheduled, outcome)
	m.r.Transitions[len(m.r.Transitions)-1].NextAttempt = t.Attempt + 1
	if len(prev.Checkpoint) > 0 {
		t.ResumeFrom = prev.Checkpoint
	}
	if own {
		if t.Failures == nil {
			t.Failures = map[api.Category]int{}
		}
		t.Failures[cat] = n
	}
	t.Attempt++
	t.NotBefore = &at
	t.Redrives = 0
	m.armDispatch(at)
	m.r.Next = &Attempt{Attempt: t.Attempt, CreatedAt: m.now, ScheduledAt: &at}
	m.r.Enqueue, m.r.RetryScheduled, m.r.NextAttempt = true, true, t.Attempt
}

func (m *machine) cancel() {
	t := m.t()
	reason := m.ev.Reason
	if reason == "" {
		reason = api.ReasonUserRequested
	}
	switch t.State {
	case api.Pending, api.Queued:
		// A job execution may have been started but not yet said started.
		m.stopExecution()
		m.endAttempt(api.OutcomeCancelled, nil)
		t.CancelReason = reason
		m.transition(api.Cancelled, reason, api.OutcomeCancelled)
		m.r.Dequeue = true
	case api.Running:
		t.CancelReason = reason
		deadline := m.now.Add(t.Timing.CancelGracePeriod())
		m.transition(api.Cancelling, reason, "")
		t.CancelDeadline = &deadline
	case api.Cancelling:
		// Already cancelling: idempotent.
	default:
		m.r.Rejection = &Rejection{Code: api.CodeTaskAlreadyTerminal, State: t.State, Message: "task is already " + string(t.State)}
	}
}

// endAttempt gives the current attempt an outcome if it has none.
func (m *machine) endAttempt(o api.Outcome, e *api.ErrorInfo) {
	a := m.attempt()
	if a.Ended() {
		return
	}
	now := m.now
	a.Outcome, a.CompletedAt = o, &now
	if e != nil && a.Error == nil {
		a.Error = e
	}
	m.r.Write = true
}

// transition moves the task to state to, records the event, and sets the
// timers that state uses.
func (m *machine) transition(to api.State, reason string, outcome api.Outcome) {
	t := m.t()
	from := t.State
	t.Seq++
	tr := Transition{
		EventID: EventID(t.ID, t.Seq), TaskID: t.ID, RunID: t.RunID, TenantID: t.TenantID,
		WorkspaceID: t.WorkspaceID, Worker: t.Worker, Attempt: t.Attempt, Priority: t.Priority, From: from, To: to,
		Reason: reason, Outcome: outcome, Seq: t.Seq, OccurredAt: m.now, DeadLetter: to == api.Failed,
		ScheduleID: t.ScheduleID, ScheduledFireAt: t.ScheduledFireAt,
	}
	if outcome != "" && m.r.Attempt != nil {
		tr.Error = m.r.Attempt.Error
	}
	m.r.Transitions = append(m.r.Transitions, tr)
	t.State = to
	m.r.Write = true
	switch to {
	case api.Running:
		t.DispatchCheckAt, t.CancelDeadline, t.WaitingSince = nil, nil, nil
		t.StartTimeoutAt, t.Delivery = nil, nil
	case api.Cancelling:
		t.DispatchCheckAt, t.StartTimeoutAt, t.Delivery = nil, nil, nil
	case api.Queued, api.Pending:
		t.LeaseExpiresAt, t.CancelDeadline = nil, nil
		if from == api.Running || from == api.Cancelling {
			t.Delivery = nil // a new attempt's dispatch
		}
	}
	if to.Terminal() {
		now := m.now
		t.EndedAt = &now
		t.Reason = reason
		t.LeaseExpiresAt, t.CancelDeadline, t.DispatchCheckAt, t.WaitingSince = nil, nil, nil, nil
		t.StartTimeoutAt, t.Delivery = nil, nil
	} else if to == api.Cancelling {
		t.Reason = reason
	}
}

// DeliveryProbe is the first look at a QUEUED push attempt's delivery:
// a quarter of its start timeout, at most 30 s after the attempt was
// handed to the transport (or its scheduled time). Attempts that start
// sooner, nearly all of them, are never probed.
func DeliveryProbe(tm api.Timing) time.Duration {
	return min(MaxDeliveryProbe, tm.StartTimeout()/4)
}

// MaxDeliveryProbe bounds DeliveryProbe.
const MaxDeliveryProbe = 30 * time.Second

// armDispatch sets the dispatch checks of an attempt handed to the
// transport for delivery at from: its start timeout ends at from +
// StartTimeout (StartTimeoutAt), and the sweeper first looks at its
// delivery a DeliveryProbe after from (DispatchCheckAt).
func (m *machine) armDispatch(from time.Time) {
	t := m.t()
	end := from.Add(t.Timing.StartTimeout())
	probe := from.Add(DeliveryProbe(t.Timing))
	t.StartTimeoutAt, t.DispatchCheckAt = &end, &probe
}

// probeDelivery is a dispatch check before the start timeout ends: the
// sweeper asked Cloud Tasks about the dispatch (ev.Delivery). While
// deliveries are being tried and failing it records them and looks again
// after as long again as the attempt has waited (30 s, 1 min, 2 min, ...,
// at most until the start timeout); a dispatch not tried yet (a backlog),
// one no longer held, or a pull worker's, is next looked at when the
// start timeout ends. Never a re-drive nor an end.
func (m *machine) probeDelivery() {
	t := m.t()
	next := *t.StartTimeoutAt
	if d := m.ev.Delivery; d != nil && m.ev.Held && d.Attempts > 0 {
		t.Delivery = d
		since := t.StartTimeoutAt.Add(-t.Timing.StartTimeout())
		if n := m.now.Add(max(m.now.Sub(since), DeliveryProbe(t.Timing))); n.Before(next) {
			next = n
		}
	}
	t.DispatchCheckAt = &next
	m.r.Write = true
}

// dispatchTimeoutError is the error a DISPATCH_TIMEOUT attempt ends with:
// the last failing delivery Cloud Tasks reported (this pass's answer, else
// the one a probe recorded on the task), so that the dead letter says why
// the worker never started the attempt; else that no delivery was seen.
func dispatchTimeoutError(t *Task, seen *api.Delivery) *api.ErrorInfo {
	d := seen
	if d == nil || d.Attempts == 0 {
		d = t.Delivery
	}
	msg := fmt.Sprintf("not started within its start timeout, %d re-drive(s) included", t.Redrives)
	if d != nil && d.Attempts > 0 {
		msg = fmt.Sprintf("worker %q unreachable: %s: %s (%d delivery tries); %s", t.Worker, orDash(d.LastStatus), orDash(d.LastError), d.Attempts, msg)
	} else {
		msg += "; no failing delivery was recorded (its Cloud Task deleted, or its queue purged?)"
	}
	return &api.ErrorInfo{Category: api.CategoryTimeout, Message: msg}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func due(at *time.Time, now time.Time) bool { return at != nil && !now.Before(*at) }

// leaseOver reports whether the lease has run out: it ran its full length
// (since the last renewal) outside the event's outages.
func (m *machine) leaseOver() bool {
	t := m.t()
	return m.overAfter(t.LeaseExpiresAt, t.Timing.HeartbeatTimeout())
}

// graceOver is leaseOver for the cancel grace period.
func (m *machine) graceOver() bool {
	t := m.t()
	return m.overAfter(t.CancelDeadline, t.Timing.CancelGracePeriod())
}

// overAfter reports whether a timer of length d ending at end has run out,
// counting only time outside the event's outages.
func (m *machine) overAfter(end *time.Time, d time.Duration) bool {
	if !due(end, m.now) {
		return false
	}
	credit := outageCredit(m.ev.Outages, end.Add(-d), m.now)
	return !m.now.Before(end.Add(credit))
}

func laterOf(now time.Time, at *time.Time) time.Time {
	if at != nil && at.After(now) {
		return *at
	}
	return now
}

// NewTask builds the stored form of a submitted task: state PENDING,
// attempt 1, defaults applied, the creation transition recorded.
func NewTask(t Task, now time.Time) (Task, Attempt, Transition) {
	now = now.UTC()
	t.State, t.Attempt, t.Seq = api.Pending, 1, 1
	t.Timing = t.Timing.WithDefaults()
	t.Retry = t.Retry.WithDefaults()
	t.CreatedAt, t.UpdatedAt = now, now
	if t.NotBefore != nil && !t.NotBefore.After(now) {
		t.NotBefore = nil // a start already past: now
	}
	if t.NotBefore == nil || t.EnqueueAt == nil || !t.EnqueueAt.After(now) {
		t.EnqueueAt = nil
	}
	check := laterOf(now, t.NotBefore).Add(t.Timing.StartTimeout())
	t.DispatchCheckAt = &check
	a := Attempt{Attempt: 1, CreatedAt: now, ScheduledAt: t.NotBefore}
	tr := Transition{
		EventID: EventID(t.ID, 1), TaskID: t.ID, RunID: t.RunID, TenantID: t.TenantID,
		WorkspaceID: t.WorkspaceID, Worker: t.Worker, Attempt: 1, Priority: t.Priority, To: api.Pending, Reason: api.ReasonSubmitted,
		Seq: 1, OccurredAt: now, ScheduleID: t.ScheduleID, ScheduledFireAt: t.ScheduledFireAt,
	}
	t.History = nil
	t.record([]Transition{tr})
	return t, a, tr
}
