package faults

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// Call kinds besides the callbacks' ("started", "heartbeat", "completed").
const (
	KindSubmit = "submit"
	KindGet    = "get"
	KindCancel = "cancel"
)

// Call is one HTTP request a simulated worker or client made, and what it
// saw: the answer, or the transport error.
type Call struct {
	TaskID   string
	Kind     string // started, heartbeat, completed, submit, get
	Attempt  int
	WorkerID string
	// Outcome is what a completed reported.
	Outcome api.Outcome
	// Key is a submit's idempotency key.
	Key            string
	Sent, Received time.Time
	// FirstSent is when the first try of the same request was sent (Sent,
	// unless this is a retry of a 503 or a transport error); BodyDone is
	// when its body was sent in full (Sent, unless it trickled).
	FirstSent, BodyDone time.Time
	// Plain is a heartbeat that reports nothing new (no checkpoint,
	// progress or message): the store need not write it while the lease
	// has more than half of it left (docs/contract.md §5.3).
	Plain bool
	// Status is the HTTP status; 0 when the request failed in transport.
	Status       int
	TransportErr string
	RetryAfter   string
	// Answer is a callback's decoded answer.
	Answer api.CallbackResponse
	// Code is a control API error answer's code.
	Code string
}

// Delivery is one envelope a worker received.
type Delivery struct {
	TaskID  string
	Attempt int
	At      time.Time
}

// TaskHistory is everything seen of one task.
type TaskHistory struct {
	TaskID     string
	Calls      []Call
	Deliveries []Delivery
	// Events are the events read from the events topic, in arrival order,
	// duplicates included.
	Events []api.Event
	// Final is the task as the API returned it after the run; nil if it
	// could not be read.
	Final *api.Task
	// Interval is the task's heartbeat interval, as its envelopes say (0:
	// History.Interval); CancelGrace its cancel grace period (0:
	// History.CancelGrace).
	Interval, CancelGrace time.Duration
	// Slot are the reads of a task watched while it waited for a run slot
	// (the priority workload's priority-1 tasks), in order.
	Slot []SlotSeen
}

// SlotSeen is one read of a task (GET /v1/tasks/{id}) answered 200: sent
// and answered when, and whether it showed the task QUEUED waiting for a
// run slot (waitingSince set).
type SlotSeen struct {
	Sent, Received time.Time
	State          api.State
	Waiting        bool
}

// History is what a run saw, for Check.
type History struct {
	Tasks map[string]*TaskHistory
	// Submits are the submit calls, by idempotency key (a submit that failed
	// in transport has no task id yet).
	Submits []Call
	// Tokens are every task token the workers were handed (envelopes and
	// refreshed tokens); Log is Servo's captured log, searched for them.
	Tokens []string
	Log    []byte
	// MaxLatency bounds how long any answer may take (the store timeout and
	// the follow-up enqueue, plus slack); 0: not checked.
	MaxLatency time.Duration
	// Start and End bound the run: every time Servo records lies within.
	Start, End time.Time
	// Lease and CancelGrace are every task's heartbeat timeout and cancel
	// grace period; 0: the lease and cancel-grace invariants are not
	// checked.
	Lease, CancelGrace time.Duration
	// Interval is every task's heartbeat interval: a plain heartbeat is
	// written only when less than max(Lease/2, 1.5 × Interval) is left.
	Interval time.Duration
	// Outages are the stack faults during which callbacks could not
	// commit or the sweeper did not run (a frozen Firestore, Servo down or
	// crashing): Servo credits a lease or cancel grace with the time they
	// cover (docs/contract.md §5.3), give or take CreditSlack at each.
	Outages []Window
	// MayCredit are spans in which callbacks could commit but the sweeper
	// may not have run (a frozen Pub/Sub stops its ticks): Servo may
	// credit them, and need not.
	MayCredit []Window
	// Schedules are the run's schedules and their fires' tasks.
	Schedules []ScheduleRecord
	// MaxRunning is the maxRunning quota of each limited worker: the
	// priority invariant judges their tasks' order (none: not checked).
	MaxRunning map[string]int
}

// Window is a span of time.
type Window struct {
	From, To time.Time
	// Slack is how much of an outage's start Servo may not credit (0:
	// CreditSlack).
	Slack time.Duration
}

// CreditSlack is how far Servo's record of an outage may fall short of
// the harness's at its start, or run past it at either end: Servo records
// a gap in its sweeper's passes (Servo down) from the pass it expected,
// once that is max(cadence/2, 2 s) late. StoreSlack is the shortfall of a
// store outage, which Servo records from the start of the first call that
// failed (a callback or a sweeper's query, several a second here) to the
// end of the next that succeeded.
const (
	CreditSlack = 3 * time.Second
	StoreSlack  = time.Second
)

// credit is how much of [from, to] the outages cover (overlapping ones
// once): at least (most false: each outage less its Slack at its start)
// or at most (most: each outage and each MayCredit span CreditSlack longer
// at both ends). Each outage's shortfall is its Slack.
func (h *History) credit(from, to time.Time, most bool) time.Duration {
	var spans []Window
	add := func(ws []Window, grow time.Duration, shrink bool) {
		for _, w := range ws {
			a, b := w.From.Add(-grow), w.To.Add(grow)
			if shrink {
				a = w.From.Add(cmp.Or(w.Slack, CreditSlack))
			}
			a, b = later(a, from), earlier(b, to)
			if b.After(a) {
				spans = append(spans, Window{From: a, To: b})
			}
		}
	}
	if most {
		add(h.Outages, CreditSlack, false)
		add(h.MayCredit, CreditSlack, false)
	} else {
		add(h.Outages, 0, true)
	}
	slices.SortFunc(spans, func(x, y Window) int { return x.From.Compare(y.From) })
	var total time.Duration
	var end time.Time
	for _, w := range spans {
		a := later(w.From, end)
		if w.To.After(a) {
			total += w.To.Sub(a)
			end = w.To
		}
	}
	return total
}

// creditedEnd is when a timer of length d that started at from runs out by
// the contract's rule: once it has lasted d outside the outages, counted
// at least (most false) or at most (most) as credit does.
func (h *History) creditedEnd(from time.Time, d time.Duration, most bool) time.Time {
	end := from.Add(d)
	for range 1000 {
		next := from.Add(d + h.credit(from, end, most))
		if !next.After(end) {
			break
		}
		end = next
	}
	return end
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// leaseSlack is the margin of the lease and cancel-grace invariants: the
// harness's times bound Servo's from one side only, through a loaded
// machine.
const leaseSlack = time.Second

// Task returns the history of id, created on first use.
func (h *History) Task(id string) *TaskHistory {
	if h.Tasks == nil {
		h.Tasks = map[string]*TaskHistory{}
	}
	th := h.Tasks[id]
	if th == nil {
		th = &TaskHistory{TaskID: id}
		h.Tasks[id] = th
	}
	return th
}

// Invariant names, as violations report them.
const (
	InvNotTerminal   = "terminal"       // every task ends in exactly one terminal state
	InvAnswer        = "answer"         // only contract answers to conforming requests
	InvLatency       = "latency"        // no answer blocked past the store timeout
	InvCommitted     = "committed"      // COMMITTED answers agree with the final state
	InvAttemptOrder  = "attempt-order"  // attempt never decreases
	InvStaleAttempt  = "stale-attempt"  // nothing accepted from a superseded attempt
	InvZombie        = "zombie"         // a zombie's lease never comes back
	InvEvents        = "events"         // gapless seq along the machine's edges to the final state
	InvServerTime    = "server-time"    // recorded times are Servo's, not the workers'
	InvDuplicateTask = "duplicate-task" // one task per idempotency key
	InvTokenInLog    = "token-in-log"   // no token in any log line
	InvLease         = "lease"          // a lease neither lapses early nor is honoured after it ran out
	InvCancelGrace   = "cancel-grace"   // nothing accepted of a cancelled attempt once its grace ran out
	InvOneWorker     = "one-worker"     // one worker id's callbacks accepted per attempt
	InvEarlyStart    = "early-start"    // no delivery, no accepted callback, before a delayed start
	InvScheduleOnce  = "schedule-once"  // each fire time of a schedule made exactly once
	InvScheduleEarly = "schedule-early" // no schedule fire made before its time
	InvPacing        = "pacing"         // a worker heartbeating by the pacing hint keeps its lease; the hint keeps its bounds
	InvPriority      = "priority"       // a waiting task is passed by no lower-priority task but those holding slots when it came
)

// Invariants are every invariant Check checks.
var Invariants = []string{InvNotTerminal, InvAnswer, InvLatency, InvCommitted, InvAttemptOrder, InvStaleAttempt, InvZombie, InvEvents,
	InvServerTime, InvDuplicateTask, InvTokenInLog, InvLease, InvCancelGrace, InvOneWorker, InvEarlyStart, InvScheduleOnce, InvScheduleEarly,
	InvPacing, InvPriority}

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	TaskID    string
	Message   string
}

func (v Violation) String() string {
	if v.TaskID == "" {
		return v.Invariant + ": " + v.Message
	}
	return v.Invariant + ": " + v.TaskID + ": " + v.Message
}

// Stats counts what Check went through.
type Stats struct {
	Tasks, Callbacks, Answers503, TransportErrors int
	Events, DuplicateEvents                       int
	// Delayed counts the tasks with a delayed start checked.
	Delayed int
	// Priority counts the tasks the priority invariant judged (each
	// outranks a task of its limited worker), PriorityWaited those of them
	// seen waiting for a run slot, and PriorityAhead is the most
	// lower-priority tasks that started while one of them was seen waiting
	// (at most the worker's maxRunning).
	Priority, PriorityWaited, PriorityAhead int
	Final                                   map[api.State]int
}

// Check checks h against the invariants and returns every violation (none
// when the run kept every promise) and what it counted.
func Check(h *History) ([]Violation, Stats) {
	c := &checker{h: h, st: Stats{Final: map[api.State]int{}}}
	ids := make([]string, 0, len(h.Tasks))
	for id := range h.Tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c.task(h.Tasks[id])
	}
	c.submits()
	c.tokens()
	c.schedules()
	c.priority()
	return c.vs, c.st
}

type checker struct {
	h  *History
	vs []Violation
	st Stats
}

func (c *checker) fail(inv, id, format string, args ...any) {
	c.vs = append(c.vs, Violation{Invariant: inv, TaskID: id, Message: fmt.Sprintf(format, args...)})
}

func isCallback(kind string) bool {
	return kind == "started" || kind == "heartbeat" || kind == "completed"
}

func (c *checker) task(th *TaskHistory) {
	id := th.TaskID
	c.st.Tasks++
	f := th.Final
	if f == nil {
		c.fail(InvNotTerminal, id, "the task's final state could not be read")
	} else {
		c.st.Final[f.State]++
		if !f.State.Terminal() {
			c.fail(InvNotTerminal, id, "left %s (attempt %d) after the faults healed and its timers ran out", f.State, f.Attempt)
		}
	}
	evs := c.events(th)
	superseded := map[int]time.Time{} // attempt → when the task moved past it
	zombie := map[int]time.Time{}     // attempt → when its lease was declared lost
	for _, e := range evs {
		if e.NextAttempt > 0 {
			if _, ok := superseded[e.Attempt]; !ok {
				superseded[e.Attempt] = e.OccurredAt
			}
		}
		if e.Outcome == api.OutcomeZombie {
			zombie[e.Attempt] = e.OccurredAt
		}
	}
	maxSeen := 0
	for _, call := range th.Calls {
		if !isCallback(call.Kind) {
			c.apiAnswer(id, call)
			continue
		}
		c.st.Callbacks++
		if call.Status == 0 {
			c.st.TransportErrors++
			continue
		}
		if call.Status == 503 {
			c.st.Answers503++
		}
		maxSeen = max(maxSeen, call.Attempt)
		c.answer(id, call)
		if c.h.MaxLatency > 0 && call.Received.Sub(call.Sent) > c.h.MaxLatency {
			c.fail(InvLatency, id, "%s of attempt %d answered after %v (bound %v)", call.Kind, call.Attempt, call.Received.Sub(call.Sent).Round(time.Millisecond), c.h.MaxLatency)
		}
		if call.Status != 200 {
			continue
		}
		// A retry (after a 503 or a lost answer) of a request whose first
		// try may have been committed is judged by that first try.
		sent := call.Sent
		if !call.FirstSent.IsZero() {
			sent = call.FirstSent
		}
		if at, ok := superseded[call.Attempt]; ok && sent.After(at) {
			c.fail(InvStaleAttempt, id, "%s of attempt %d sent at %s accepted (%s) although the task moved to attempt %d at %s",
				call.Kind, call.Attempt, ts(sent), call.Answer.Disposition, call.Attempt+1, ts(at))
		}
		if at, ok := zombie[call.Attempt]; ok && sent.After(at) {
			c.fail(InvZombie, id, "%s of attempt %d sent at %s accepted although its lease was declared lost at %s", call.Kind, call.Attempt, ts(sent), ts(at))
		}
		if call.Kind == "completed" && f != nil {
			c.committed(id, call, f, evs)
		}
	}
	for _, d := range th.Deliveries {
		maxSeen = max(maxSeen, d.Attempt)
	}
	c.earlyStart(th)
	cancelled := cancelledAt(th)
	c.lease(th, zombie, cancelled)
	c.pacing(th, zombie, cancelled)
	c.cancelGrace(th, cancelled)
	c.oneWorker(th)
	if f != nil && maxSeen > f.Attempt {
		c.fail(InvAttemptOrder, id, "attempt %d was seen but the task ended at attempt %d", maxSeen, f.Attempt)
	}
	if f != nil {
		c.serverTimes(id, f)
		if len(evs) > 0 {
			if last := evs[len(evs)-1]; last.To != f.State {
				c.fail(InvEvents, id, "the last event (seq %d) enters %s but the task is %s", last.Seq, last.To, f.State)
			}
		}
		for a := range zombie {
			if a <= len(f.Attempts) && f.Attempts[a-1].Outcome != api.OutcomeZombie {
				c.fail(InvZombie, id, "attempt %d was declared a zombie but its record says %q", a, f.Attempts[a-1].Outcome)
			}
		}
	}
}

// earlyStart checks a delayed start (attempt 1's scheduledAt, as the
// final task shows it): no delivery of attempt 1 before it, and no
// callback of it accepted that was sent before it.
func (c *checker) earlyStart(th *TaskHistory) {
	f := th.Final
	if f == nil || len(f.Attempts) == 0 || f.Attempts[0].Attempt != 1 || f.Attempts[0].ScheduledAt == nil {
		return
	}
	start := *f.Attempts[0].ScheduledAt
	c.st.Delayed++
	for _, d := range th.Deliveries {
		if d.Attempt == 1 && d.At.Before(start) {
			c.fail(InvEarlyStart, th.TaskID, "attempt 1 was delivered at %s, before its start %s", ts(d.At), ts(start))
			return
		}
	}
	for _, call := range th.Calls {
		if isCallback(call.Kind) && call.Attempt == 1 && call.Status == 200 && call.Sent.Before(start) {
			c.fail(InvEarlyStart, th.TaskID, "%s of attempt 1 sent at %s accepted, before its start %s", call.Kind, ts(call.Sent), ts(start))
			return
		}
	}
}

// lease checks each attempt's lease against what its worker saw: it is
// not honoured after it ran out (a callback accepted although it was first
// sent a lease after the previous accepted one was answered, the outages
// in between credited at most), and it does not run out early (no
// ZOMBIE, no task_expired, before the lease the contract gives, the
// outages credited at least: the lease after the last accepted callback
// that renewed it was received in full; a plain heartbeat, an attempt's
// first included, renews it only when less than max(Lease/2,
// 1.5 × the task's interval) is left, docs/contract.md §5.3; a cancelled
// task's task_expired may be its grace's). The worker's clock reads each
// receipt no later than Servo's, so the lease computed here never ends
// after Servo's; a plain heartbeat Servo may have skipped by its own
// receipt time is taken as skipped.
func (c *checker) lease(th *TaskHistory, zombie map[int]time.Time, cancelled time.Time) {
	lease := c.h.Lease
	if lease <= 0 {
		return
	}
	id := th.TaskID
	interval := cmp.Or(th.Interval, c.h.Interval)
	type last struct {
		received time.Time
		// exp and expHi bound the lease's end as Servo stores it, by the
		// contract's rule: at the earliest and at the latest.
		exp, expHi time.Time
	}
	skips := func(left time.Duration) bool { return left > lease/2 && left >= interval+interval/2 }
	prev := map[int]*last{}        // attempt → its last accepted callback
	expiredEarly := map[int]bool{} // attempt → already reported
	for _, call := range callbacksBySent(th) {
		p := prev[call.Attempt]
		if p != nil && call.Status == 200 {
			if end := c.h.creditedEnd(p.received, lease, true); call.FirstSent.After(end.Add(leaseSlack)) {
				c.fail(InvLease, id, "%s of attempt %d first sent at %s was accepted: the lease (%v after the previous accepted callback was answered at %s, outages credited) had run out at %s",
					call.Kind, call.Attempt, ts(call.FirstSent), lease, ts(p.received), ts(end))
			}
		}
		graceOver := !cancelled.IsZero() && cancelled.Before(call.Received)
		if p != nil && call.Answer.Error == api.CodeTaskExpired && !graceOver && !expiredEarly[call.Attempt] {
			if due := c.h.creditedEnd(p.exp.Add(-lease), lease, false); call.Received.Before(due.Add(-leaseSlack)) {
				expiredEarly[call.Attempt] = true
				c.fail(InvLease, id, "%s of attempt %d answered task_expired at %s, but the lease ran until %s (%v after the last accepted callback that renewed it was received in full, outages credited)",
					call.Kind, call.Attempt, ts(call.Received), ts(due), lease)
			}
		}
		if call.Status == 200 {
			if p == nil {
				p = &last{exp: call.BodyDone.Add(lease), expHi: call.Received.Add(lease)}
				prev[call.Attempt] = p
			}
			p.received = call.Received
			if call.Kind == "started" || call.Kind == "heartbeat" {
				plain := call.Kind == "heartbeat" && call.Plain
				cancelling := !cancelled.IsZero() && cancelled.Before(call.Received)
				// Servo's view of what is left lies between these.
				leftLo, leftHi := p.exp.Sub(call.Received), p.expHi.Sub(call.BodyDone)
				if !plain || !skips(leftHi) {
					p.exp = call.BodyDone.Add(lease)
				}
				if !plain || cancelling || !skips(leftLo) {
					p.expHi = call.Received.Add(lease)
				}
			}
		}
	}
	for a, at := range zombie {
		p := prev[a]
		if p == nil || expiredEarly[a] {
			continue
		}
		if due := c.h.creditedEnd(p.exp.Add(-lease), lease, false); at.Before(due.Add(-leaseSlack)) {
			c.fail(InvLease, id, "attempt %d was declared a zombie at %s, but its lease ran until %s (%v after the last accepted callback that renewed it was received in full, outages credited)",
				a, ts(at), ts(due), lease)
		}
	}
}

// pacing checks the pacing hints (docs/contract.md §5.7) of each
// attempt's accepted `started` and `heartbeat` answers, and what became
// of a worker that heeded them:
//
//   - a hint is at least the task's interval; one above it is at most half
//     the cancel grace, and leaves at least task.LeaseMargin of the lease
//     as Servo stores it (at the latest the receipt of the last callback
//     that may have renewed it plus the lease) when counted from the
//     request's sending (Servo answered it later), less leaseSlack;
//   - a callback first sent within the hint of the attempt's last accepted
//     answer, or up to half an interval after it (on time: the lease's
//     margin is 1.5 intervals at least), with no outage that Servo may
//     credit in between, finds its lease alive: it is not answered
//     task_expired (outside a cancel's grace), and the attempt was not
//     declared a zombie before it was sent.
func (c *checker) pacing(th *TaskHistory, zombie map[int]time.Time, cancelled time.Time) {
	lease := c.h.Lease
	if lease <= 0 {
		return
	}
	id := th.TaskID
	interval := cmp.Or(th.Interval, c.h.Interval)
	grace := cmp.Or(th.CancelGrace, c.h.CancelGrace)
	margin := task.LeaseMargin(api.Timing{HeartbeatIntervalMs: interval.Milliseconds(), HeartbeatTimeoutMs: lease.Milliseconds()})
	skips := func(left time.Duration) bool { return left > lease/2 && left >= interval+interval/2 }
	type last struct {
		received time.Time     // the last accepted answer's arrival
		hint     time.Duration // its nextHeartbeatInMs
		expHi    time.Time     // the lease's end as Servo stores it, at the latest
	}
	prev := map[int]*last{}
	failed := map[int]bool{}
	for _, call := range callbacksBySent(th) {
		p := prev[call.Attempt]
		if p != nil && p.hint > 0 && !failed[call.Attempt] && !call.FirstSent.After(p.received.Add(p.hint+interval/2)) &&
			c.h.credit(p.received, call.Received, true) == 0 {
			graceOver := !cancelled.IsZero() && cancelled.Before(call.Received)
			z, zombied := zombie[call.Attempt]
			switch {
			case call.Answer.Error == api.CodeTaskExpired && !graceOver:
				failed[call.Attempt] = true
				c.fail(InvPacing, id, "%s of attempt %d, first sent at %s within the pacing hint (%v after the answer that arrived at %s), was answered task_expired",
					call.Kind, call.Attempt, ts(call.FirstSent), p.hint, ts(p.received))
			case zombied && z.Before(call.FirstSent):
				failed[call.Attempt] = true
				c.fail(InvPacing, id, "attempt %d was declared a zombie at %s, before its %s first sent at %s within the pacing hint (%v after the answer that arrived at %s)",
					call.Attempt, ts(z), call.Kind, ts(call.FirstSent), p.hint, ts(p.received))
			}
		}
		if call.Status != 200 || (call.Kind != "started" && call.Kind != "heartbeat") {
			continue
		}
		if p == nil {
			p = &last{expHi: call.Received.Add(lease)}
			prev[call.Attempt] = p
		}
		plain := call.Kind == "heartbeat" && call.Plain
		if !plain || !skips(p.expHi.Sub(call.BodyDone)) {
			p.expHi = call.Received.Add(lease)
		}
		p.received, p.hint = call.Received, time.Duration(call.Answer.NextHeartbeatInMs)*time.Millisecond
		switch {
		case p.hint == 0:
			c.fail(InvPacing, id, "%s of attempt %d answered 200 without nextHeartbeatInMs", call.Kind, call.Attempt)
		case p.hint < interval:
			c.fail(InvPacing, id, "%s of attempt %d answered nextHeartbeatInMs %v, under the interval %v", call.Kind, call.Attempt, p.hint, interval)
		case p.hint == interval:
		case grace > 0 && p.hint > grace/2:
			c.fail(InvPacing, id, "%s of attempt %d answered nextHeartbeatInMs %v, beyond half the cancel grace %v", call.Kind, call.Attempt, p.hint, grace)
		case call.Sent.Add(p.hint).After(p.expHi.Add(-margin + leaseSlack)):
			c.fail(InvPacing, id, "%s of attempt %d sent at %s answered nextHeartbeatInMs %v: a heartbeat then leaves under %v of the lease, which ends by %s at the latest",
				call.Kind, call.Attempt, ts(call.Sent), p.hint, margin, ts(p.expHi))
		}
	}
}

// priority checks the order in which the tasks of a worker with a
// maxRunning quota (History.MaxRunning) get its run slots
// (docs/contract.md §12, "Priority"). A task P outranks a task X of the
// same worker and tenant when X's priority is lower and X was created
// before P, less than task.PriorityAging per level of difference before
// it (by Servo's createdAt; a task created after P may take a slot it
// finds free at its creation, waiting or not). For each P that outranks a
// task of the run:
//
//   - P starts: one of its `started` is accepted;
//   - at most maxRunning of the tasks P outranks start, for the first
//     time, after P arrived and before P is admitted: their first
//     accepted `started` was first sent after P's first accepted submit
//     was answered, and answered before the last read that showed P
//     waiting for its slot (TaskHistory.Slot) was sent. Only the tasks
//     that held the worker's slots when P arrived may do that: every slot
//     freed while P waits is P's. Both bounds are taken so that the start
//     falls in P's wait by Servo's clock, whatever the network's delays,
//     and a slot given to P whose Cloud Task was lost (and re-driven
//     after the start timeout) while the others turned over counts no
//     task against it.
func (c *checker) priority() {
	if len(c.h.MaxRunning) == 0 {
		return
	}
	type info struct {
		th    *TaskHistory
		start *Call // the first accepted started, by its answer
	}
	var tasks []info
	for _, id := range slices.Sorted(maps.Keys(c.h.Tasks)) {
		th := c.h.Tasks[id]
		if th.Final == nil || c.h.MaxRunning[th.Final.Worker] <= 0 {
			continue
		}
		in := info{th: th}
		for _, call := range callbacksBySent(th) {
			if call.Kind == "started" && call.Status == 200 && (in.start == nil || call.Received.Before(in.start.Received)) {
				in.start = &call
			}
		}
		tasks = append(tasks, in)
	}
	outranks := func(p, x *api.Task) bool {
		pp, xp := task.PriorityOf(p.Priority), task.PriorityOf(x.Priority)
		return x.Worker == p.Worker && x.TenantID == p.TenantID && xp > pp && x.CreatedAt.Before(p.CreatedAt) &&
			p.CreatedAt.Sub(x.CreatedAt) < time.Duration(xp-pp)*task.PriorityAging
	}
	for _, p := range tasks {
		f := p.th.Final
		var lower []info
		for _, x := range tasks {
			if outranks(f, x.th.Final) {
				lower = append(lower, x)
			}
		}
		if len(lower) == 0 {
			continue
		}
		c.st.Priority++
		id := p.th.TaskID
		if p.start == nil {
			c.fail(InvPriority, id, "priority-%d task of worker %s never started (%d tasks of lower priority it outranks)", task.PriorityOf(f.Priority), f.Worker, len(lower))
			continue
		}
		var arrived, waiting time.Time // P's first accepted submit answered; the last read showing it waiting sent
		for _, call := range p.th.Calls {
			if call.Kind == KindSubmit && call.Status/100 == 2 && (arrived.IsZero() || call.Received.Before(arrived)) {
				arrived = call.Received
			}
		}
		for _, s := range p.th.Slot {
			if s.Waiting && s.Sent.After(waiting) {
				waiting = s.Sent
			}
		}
		if arrived.IsZero() || !waiting.After(arrived) {
			continue
		}
		c.st.PriorityWaited++
		var ahead []string
		for _, x := range lower {
			if x.start != nil && x.start.FirstSent.After(arrived) && x.start.Received.Before(waiting) {
				ahead = append(ahead, fmt.Sprintf("%s (priority %d, started %s)", x.th.TaskID, task.PriorityOf(x.th.Final.Priority), ts(x.start.Received)))
			}
		}
		c.st.PriorityAhead = max(c.st.PriorityAhead, len(ahead))
		if limit := c.h.MaxRunning[f.Worker]; len(ahead) > limit {
			c.fail(InvPriority, id, "priority-%d task of worker %s (maxRunning %d), submitted by %s and still waiting for a run slot at %s: %d tasks of lower priority, created before it, started in between, more than the %d slots held when it arrived: %s",
				task.PriorityOf(f.Priority), f.Worker, limit, ts(arrived), ts(waiting), len(ahead), limit, strings.Join(ahead, ", "))
		}
	}
}

// cancelledAt is when the task's first accepted cancel was answered; zero
// if none was.
func cancelledAt(th *TaskHistory) time.Time {
	var cancelled time.Time
	for _, call := range th.Calls {
		if call.Kind == KindCancel && call.Status/100 == 2 && (cancelled.IsZero() || call.Received.Before(cancelled)) {
			cancelled = call.Received
		}
	}
	return cancelled
}

// cancelGrace checks that once a cancel was accepted, no callback first
// sent after the grace period ran out (outages credited at most) is
// accepted.
func (c *checker) cancelGrace(th *TaskHistory, cancelled time.Time) {
	grace := cmp.Or(th.CancelGrace, c.h.CancelGrace)
	if c.h.CancelGrace <= 0 || cancelled.IsZero() {
		return
	}
	end := c.h.creditedEnd(cancelled, grace, true)
	for _, call := range callbacksBySent(th) {
		if call.Status == 200 && call.FirstSent.After(end.Add(leaseSlack)) {
			c.fail(InvCancelGrace, th.TaskID, "%s of attempt %d first sent at %s accepted (%s), but the task's cancel was accepted by %s and its grace (%v) ran out by %s",
				call.Kind, call.Attempt, ts(call.FirstSent), call.Answer.Disposition, ts(cancelled), grace, ts(end))
			return
		}
	}
}

// oneWorker checks that each attempt's accepted callbacks come from one
// worker: a second delivery of an attempt is refused
// (attempt_already_started), never run alongside.
func (c *checker) oneWorker(th *TaskHistory) {
	by := map[int]string{}
	for _, call := range callbacksBySent(th) {
		if call.Status != 200 {
			continue
		}
		w, ok := by[call.Attempt]
		switch {
		case !ok:
			by[call.Attempt] = call.WorkerID
		case w != call.WorkerID:
			c.fail(InvOneWorker, th.TaskID, "attempt %d: %s of worker %s accepted after worker %s's callbacks were", call.Attempt, call.Kind, call.WorkerID, w)
			return
		}
	}
}

// callbacksBySent returns th's callbacks answered (not lost in
// transport), by the time they were sent.
func callbacksBySent(th *TaskHistory) []Call {
	var cs []Call
	for _, call := range th.Calls {
		if isCallback(call.Kind) && call.Status != 0 {
			if call.FirstSent.IsZero() {
				call.FirstSent = call.Sent
			}
			if call.BodyDone.IsZero() {
				call.BodyDone = call.Sent
			}
			cs = append(cs, call)
		}
	}
	slices.SortStableFunc(cs, func(a, b Call) int { return a.Sent.Compare(b.Sent) })
	return cs
}

// answer checks that a callback's answer is one the contract gives a
// conforming worker (docs/contract.md §4.4).
func (c *checker) answer(id string, call Call) {
	a := call.Answer
	want := api.Disposition("")
	switch call.Status {
	case 200:
		want = api.Continue
		if call.Kind == "completed" {
			want = api.Committed
		}
	case 409:
		switch a.Error {
		case api.CodeTaskAlreadyTerminal, api.CodeAttemptMismatch, api.CodeAttemptAlreadyStarted:
			want = api.Cancel
		}
	case 410:
		if a.Error == api.CodeTaskExpired {
			want = api.Cancel
		}
	case 503:
		if a.Error == api.CodeUnavailable {
			want = api.Retry
		}
		if call.RetryAfter == "" {
			c.fail(InvAnswer, id, "%s of attempt %d: 503 without Retry-After", call.Kind, call.Attempt)
		}
	}
	if want == "" {
		c.fail(InvAnswer, id, "%s of attempt %d answered %d %q (%s): not an answer a conforming worker may get", call.Kind, call.Attempt, call.Status, a.Error, a.Message)
		return
	}
	if a.Disposition != want {
		c.fail(InvAnswer, id, "%s of attempt %d answered %d %q with disposition %q, want %q", call.Kind, call.Attempt, call.Status, a.Error, a.Disposition, want)
	}
}

// apiAnswer checks a control API answer: success or 503 with Retry-After
// (or, to a cancel, that the task already ended).
func (c *checker) apiAnswer(id string, call Call) {
	switch {
	case call.Status == 0, call.Status >= 200 && call.Status < 300:
	case call.Kind == KindCancel && call.Status == 409 && call.Code == api.CodeTaskAlreadyTerminal:
	case call.Status == 503:
		c.st.Answers503++
		if call.RetryAfter == "" {
			c.fail(InvAnswer, id, "%s: 503 without Retry-After", call.Kind)
		}
	default:
		c.fail(InvAnswer, id, "%s answered %d %q", call.Kind, call.Status, call.Code)
	}
	if c.h.MaxLatency > 0 && call.Status != 0 && call.Received.Sub(call.Sent) > c.h.MaxLatency {
		c.fail(InvLatency, id, "%s answered after %v (bound %v)", call.Kind, call.Received.Sub(call.Sent).Round(time.Millisecond), c.h.MaxLatency)
	}
}

// committed checks an accepted completed against the final state.
func (c *checker) committed(id string, call Call, f *api.Task, evs []api.Event) {
	a := call.Answer
	if a.RetryScheduled {
		if a.FinalState != api.Queued || a.NextAttempt != call.Attempt+1 {
			c.fail(InvCommitted, id, "completed of attempt %d: retry scheduled with finalState %s nextAttempt %d", call.Attempt, a.FinalState, a.NextAttempt)
		}
		if f.Attempt < call.Attempt+1 {
			c.fail(InvCommitted, id, "completed of attempt %d was answered with a retry as attempt %d, but the task ended at attempt %d", call.Attempt, a.NextAttempt, f.Attempt)
		}
	} else {
		if a.FinalState != f.State || call.Attempt != f.Attempt {
			c.fail(InvCommitted, id, "completed of attempt %d was COMMITTED as %s, but the task ended %s at attempt %d", call.Attempt, a.FinalState, f.State, f.Attempt)
		}
	}
	if call.Attempt <= len(f.Attempts) {
		if got := f.Attempts[call.Attempt-1].Outcome; got != call.Outcome {
			c.fail(InvCommitted, id, "completed of attempt %d reported %s and was COMMITTED, but the attempt's record says %q", call.Attempt, call.Outcome, got)
		}
	}
}

// events checks the task's events and returns one copy of each, by seq.
func (c *checker) events(th *TaskHistory) []api.Event {
	id := th.TaskID
	bySeq := map[int64]api.Event{}
	for _, e := range th.Events {
		c.st.Events++
		if prev, ok := bySeq[e.Seq]; ok {
			c.st.DuplicateEvents++
			if prev.EventID != e.EventID || prev.From != e.From || prev.To != e.To || prev.Attempt != e.Attempt {
				c.fail(InvEvents, id, "two different events with seq %d: %s %s→%s and %s %s→%s", e.Seq, prev.EventID, prev.From, prev.To, e.EventID, e.From, e.To)
			}
			continue
		}
		bySeq[e.Seq] = e
	}
	evs := make([]api.Event, 0, len(bySeq))
	for _, e := range bySeq {
		evs = append(evs, e)
	}
	slices.SortFunc(evs, func(a, b api.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(evs) == 0 {
		c.fail(InvEvents, id, "no event was read")
		return nil
	}
	terminal := 0
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			c.fail(InvEvents, id, "events have a gap: seq %d follows %d", e.Seq, i)
			return evs
		}
		if e.To.Terminal() {
			terminal++
		}
		if i == 0 {
			if e.From != "" || e.To != api.Pending {
				c.fail(InvEvents, id, "the first event is %q→%s, want the creation →PENDING", e.From, e.To)
			}
			continue
		}
		prev := evs[i-1]
		if e.From != prev.To {
			c.fail(InvEvents, id, "event seq %d leaves %s but seq %d entered %s", e.Seq, e.From, prev.Seq, prev.To)
		}
		if !edge(e.From, e.To) {
			c.fail(InvEvents, id, "event seq %d: %s→%s is no edge of the state machine", e.Seq, e.From, e.To)
		}
		if e.Attempt < prev.Attempt {
			c.fail(InvAttemptOrder, id, "event seq %d is of attempt %d after seq %d of attempt %d", e.Seq, e.Attempt, prev.Seq, prev.Attempt)
		}
		if prev.Outcome == api.OutcomeZombie && e.Attempt == prev.Attempt {
			c.fail(InvZombie, id, "event seq %d (%s→%s) is of attempt %d, whose lease was lost at seq %d", e.Seq, e.From, e.To, e.Attempt, prev.Seq)
		}
	}
	if terminal > 1 {
		c.fail(InvNotTerminal, id, "%d distinct events enter a terminal state", terminal)
	}
	return evs
}

// edge reports whether some event of the machine takes from to to.
func edge(from, to api.State) bool {
	for _, tos := range task.Edges[from] {
		if slices.Contains(tos, to) {
			return true
		}
	}
	return false
}

// serverTimes checks that the attempt records hold Servo's times, not a
// skewed worker's.
func (c *checker) serverTimes(id string, f *api.Task) {
	if c.h.Start.IsZero() || c.h.End.IsZero() {
		return
	}
	lo, hi := c.h.Start.Add(-time.Minute), c.h.End.Add(time.Minute)
	for _, a := range f.Attempts {
		for name, t := range map[string]*time.Time{"startedAt": a.StartedAt, "lastHeartbeatAt": a.LastHeartbeatAt, "completedAt": a.CompletedAt} {
			if t != nil && (t.Before(lo) || t.After(hi)) {
				c.fail(InvServerTime, id, "attempt %d's %s is %s, outside the run [%s, %s]: a worker's clock was trusted", a.Attempt, name, ts(*t), ts(c.h.Start), ts(c.h.End))
			}
		}
	}
}

// submits checks that each idempotency key made one task.
func (c *checker) submits() {
	ids := map[string]map[string]bool{}
	add := func(key, id string) {
		if ids[key] == nil {
			ids[key] = map[string]bool{}
		}
		ids[key][id] = true
	}
	for _, s := range c.h.Submits {
		if s.TaskID != "" {
			add(s.Key, s.TaskID)
		}
	}
	// A submit whose answer was lost (Servo crashed after its commit)
	// names no task; the task itself, delivered, names its key.
	for id, th := range c.h.Tasks {
		if th.Final != nil && th.Final.IdempotencyKey != "" {
			add(th.Final.IdempotencyKey, id)
		}
	}
	for key, set := range ids {
		if len(set) > 1 {
			c.fail(InvDuplicateTask, "", "idempotency key %q made %d tasks: %v", key, len(set), slices.Sorted(func(yield func(string) bool) {
				for id := range set {
					if !yield(id) {
						return
					}
				}
			}))
		}
	}
}

// tokens looks for every token's claims and signature segments in the log:
// the log is cut into runs of base64url characters, each looked up.
func (c *checker) tokens() {
	if len(c.h.Tokens) == 0 || len(c.h.Log) == 0 {
		return
	}
	segs := map[string]bool{}
	for _, tok := range c.h.Tokens {
		parts := strings.Split(tok, ".")
		for _, p := range parts[1:] { // the header is the same in every token
			if len(p) >= 16 {
				segs[p] = true
			}
		}
	}
	found := 0
	line := 1
	start := -1
	for i := 0; i <= len(c.h.Log); i++ {
		b := byte(' ')
		if i < len(c.h.Log) {
			b = c.h.Log[i]
		}
		if isB64URL(b) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if segs[string(c.h.Log[start:i])] {
				found++
				if found <= 5 {
					c.fail(InvTokenInLog, "", "log line %d holds a task token", line)
				}
			}
			start = -1
		}
		if b == '\n' {
			line++
		}
	}
	if found > 5 {
		c.fail(InvTokenInLog, "", "%d more token segments in the log", found-5)
	}
}

func isB64URL(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_'
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// Describe prints the whole history of one task: its calls, deliveries
// and events in time order, then its final state.
func (h *History) Describe(id string) string {
	th := h.Tasks[id]
	if th == nil {
		return "task " + id + ": no history\n"
	}
	type line struct {
		at time.Time
		s  string
	}
	var ls []line
	for _, d := range th.Deliveries {
		ls = append(ls, line{d.At, fmt.Sprintf("delivered attempt %d", d.Attempt)})
	}
	for _, c := range th.Calls {
		ans := fmt.Sprintf("%d %s %s", c.Status, c.Answer.Disposition, cmp.Or(c.Answer.Error, c.Code))
		if c.Status == 0 {
			ans = "transport error: " + c.TransportErr
		}
		extra := ""
		if c.Kind == "completed" {
			extra = fmt.Sprintf(" outcome=%s → finalState=%s retry=%v next=%d", c.Outcome, c.Answer.FinalState, c.Answer.RetryScheduled, c.Answer.NextAttempt)
		}
		ls = append(ls, line{c.Sent, fmt.Sprintf("%s attempt=%d worker=%s: %s in %v%s", c.Kind, c.Attempt, c.WorkerID, ans, c.Received.Sub(c.Sent).Round(time.Millisecond), extra)})
	}
	for _, s := range th.Slot {
		what := "not waiting for a run slot"
		if s.Waiting {
			what = "waiting for a run slot"
		}
		ls = append(ls, line{s.Sent, fmt.Sprintf("read: %s, %s (answered in %v)", s.State, what, s.Received.Sub(s.Sent).Round(time.Millisecond))})
	}
	for _, e := range th.Events {
		ls = append(ls, line{e.OccurredAt, fmt.Sprintf("event seq=%d attempt=%d %s→%s %s outcome=%s next=%d id=%s", e.Seq, e.Attempt, e.From, e.To, e.Reason, e.Outcome, e.NextAttempt, e.EventID)})
	}
	slices.SortStableFunc(ls, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	fmt.Fprintf(&b, "--- history of %s ---\n", id)
	for _, l := range ls {
		fmt.Fprintf(&b, "  %s %s\n", ts(l.at), l.s)
	}
	if f := th.Final; f != nil {
		fmt.Fprintf(&b, "  final: %s reason=%s attempt=%d worker=%s priority=%d created=%s\n", f.State, f.Reason, f.Attempt, f.Worker, task.PriorityOf(f.Priority), ts(f.CreatedAt))
		for _, a := range f.Attempts {
			fmt.Fprintf(&b, "    attempt %d: outcome=%s worker=%s\n", a.Attempt, a.Outcome, a.WorkerID)
		}
	} else {
		b.WriteString("  final: unknown\n")
	}
	return b.String()
}

// Report prints the violations, each followed by its task's whole history
// (once per task).
func Report(h *History, vs []Violation) string {
	var b strings.Builder
	shown := map[string]bool{}
	for _, v := range vs {
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
		if v.TaskID != "" && !shown[v.TaskID] {
			shown[v.TaskID] = true
			b.WriteString(h.Describe(v.TaskID))
		}
	}
	return b.String()
}
