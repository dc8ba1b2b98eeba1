package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
)

// run is one attempt in this process: the protocol around one call of the
// Func.
type run struct {
	h   *handler
	env api.Envelope
	log *slog.Logger
	t   *Task

	// done is closed when status and ans are final.
	done   chan struct{}
	status int
	ans    answer

	// flushCh asks the heartbeat loop for an early heartbeat.
	flushCh chan struct{}

	mu         sync.Mutex
	tok        string
	tokExp     time.Time
	cancelFn   context.CancelCauseFunc
	stop       error     // why the attempt lost its authority; nothing is reported after it
	cancelSeen bool      // Servo said shouldCancel
	lastAck    time.Time // when the last request Servo acknowledged was sent (`started`, a heartbeat)
	// pace is the last acknowledged answer's nextHeartbeatInMs: how long
	// the next plain heartbeat may wait (0: the interval; an older Servo).
	pace time.Duration

	// ranFor and category are for the metrics: how long the Func ran, and
	// the error category it failed with.
	ranFor   time.Duration
	category string
	// claimed: the attempt came from a pull-pool claim, which started it;
	// claimedAt is when that claim's answer arrived.
	claimed   bool
	claimedAt time.Time
	// refuse, when set, is reported as the Func's error without running
	// it: an attempt claimed as Pull began to stop.
	refuse error
}

func newRun(h *handler, env api.Envelope) *run {
	log := h.cfg.logger.With("taskId", env.TaskID, "attempt", env.Attempt, "tenantId", env.TenantID,
		"runId", env.RunID, "workerId", h.cfg.workerID)
	r := &run{h: h, env: env, log: log, done: make(chan struct{}), flushCh: make(chan struct{}, 1),
		tok: env.TaskToken, tokExp: env.TokenExpiresAt}
	r.t = newTask(env, h.cfg.workerID, log, r.flush)
	return r
}

func (r *run) flush() {
	select {
	case r.flushCh <- struct{}{}:
	default:
	}
}

func (r *run) token() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tok
}

func (r *run) tokenUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tokExp
}

// adopt takes a refreshed token from a callback response.
func (r *run) adopt(resp api.CallbackResponse) {
	if resp.TaskToken == "" {
		return
	}
	exp, ok := time.Time{}, false
	if resp.TokenExpiresAt != nil {
		exp, ok = *resp.TokenExpiresAt, true
	} else {
		exp, ok = tokenExpiry(resp.TaskToken)
	}
	r.mu.Lock()
	r.tok = resp.TaskToken
	if ok {
		r.tokExp = exp
	}
	r.mu.Unlock()
	r.log.Info("adopted a refreshed task token", "tokenExpiresAt", exp)
}

// lose records that the attempt lost its authority and cancels the Func.
func (r *run) lose(cause error) {
	r.mu.Lock()
	first := r.stop == nil
	if first {
		r.stop = cause
	}
	cancel := r.cancelFn
	r.mu.Unlock()
	if first {
		r.log.Warn("attempt lost its authority: cancelling the function; nothing more will be reported", "cause", cause.Error())
	}
	if cancel != nil {
		cancel(cause)
	}
}

// acked records that Servo acknowledged a request sent at sentAt: `started`
// (or the claim) or a heartbeat answered CONTINUE. Servo counted the lease
// from when it processed the request, which is after it was sent: the
// fence is heartbeatTimeoutMs from the sending, so that a slow answer
// never lets the worker outlive the lease by its transit time. The clock
// never goes back.
func (r *run) acked(sentAt time.Time) {
	r.mu.Lock()
	if sentAt.After(r.lastAck) {
		r.lastAck = sentAt
	}
	r.mu.Unlock()
}

// paced records the pacing hint of an answer Servo acknowledged (0 when
// it carried none).
func (r *run) paced(resp api.CallbackResponse) {
	r.mu.Lock()
	r.pace = time.Duration(max(resp.NextHeartbeatInMs, 0)) * time.Millisecond
	r.mu.Unlock()
}

// plainWait is how long after the last answer a plain heartbeat waits,
// when the next heartbeat that carries something new waits wait (the
// jittered interval): Servo's hint, jittered down by up to 15%, when it is
// longer than the interval, else wait.
func (r *run) plainWait(interval, wait time.Duration) time.Duration {
	r.mu.Lock()
	pace := r.pace
	r.mu.Unlock()
	if pace <= interval {
		return wait
	}
	return max(wait, jitter(pace))
}

// leaseLeft is how long until heartbeatTimeout has passed since the last
// acknowledgement.
func (r *run) leaseLeft(timeout time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Until(r.lastAck.Add(timeout))
}

// watchLease fences the attempt once Servo has acknowledged nothing for
// heartbeatTimeoutMs (a network partition, Servo answering only RETRY): by
// then Servo has expired the lease, or will on the next callback or sweep,
// and the next attempt may be running. The Func is cancelled with a
// [*LeaseLostError] (code [CodeHeartbeatTimeout]), abortHB abandons the
// heartbeat in flight (its answer no longer matters), and nothing more is
// reported. The returned function stops watching; it fences too if the
// timeout has passed meanwhile. Without a heartbeatTimeoutMs nothing is
// watched.
func (r *run) watchLease(abortHB context.CancelFunc) (stop func()) {
	timeout := time.Duration(r.env.HeartbeatTimeoutMs) * time.Millisecond
	if timeout <= 0 {
		return func() {}
	}
	fence := func() {
		r.lose(&LeaseLostError{Code: CodeHeartbeatTimeout, Message: fmt.Sprintf(
			"no heartbeat acknowledged for %s (heartbeatTimeoutMs): Servo has expired the lease or will, and decides on the next attempt", timeout)})
		abortHB()
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTimer(r.leaseLeft(timeout))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if left := r.leaseLeft(timeout); left > 0 {
				t.Reset(left)
				continue
			}
			fence()
			return
		}
	}()
	return func() {
		close(quit)
		<-exited
		if r.leaseLeft(timeout) <= 0 {
			fence()
		}
	}
}

func (r *run) stopped() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// cancelBy passes Servo's cancel request to the Func (once).
func (r *run) cancelBy(reason string) {
	r.mu.Lock()
	first := !r.cancelSeen
	r.cancelSeen = true
	cancel := r.cancelFn
	r.mu.Unlock()
	if first && cancel != nil {
		r.log.Info("Servo asked to cancel the attempt; cancelling the function", "cancelReason", reason)
		cancel(&CancelledError{Reason: reason})
	}
}

func fixedBody(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }

// execute runs the attempt: started, the Func with heartbeats, completed.
// It returns the answer to Cloud Tasks.
func (r *run) execute(ctx context.Context) (int, answer) {
	// Cloud Tasks closing the connection does not end the attempt.
	ctx = context.WithoutCancel(ctx)
	cfg := &r.h.cfg
	startedAt := cfg.now().UTC()
	body, err := json.Marshal(api.StartedRequest{Attempt: r.env.Attempt, WorkerID: cfg.workerID, StartedAt: &startedAt})
	if err != nil {
		return http.StatusInternalServerError, answer{Result: resultInternal, Detail: err.Error()}
	}
	startUntil := func() time.Time {
		return minTime(startedAt.Add(cfg.startRetryWindow), r.tokenUntil())
	}
	var rep reply
	if r.claimed {
		// A pull-pool claim was the attempt's `started`.
		rep.status, rep.disp = http.StatusOK, api.Continue
	} else {
		rep, err = r.post(ctx, opStarted, fixedBody(body), startUntil, nil)
	}
	if err != nil {
		r.log.ErrorContext(ctx, "could not reach Servo to start the attempt; answering 503 so Cloud Tasks redelivers it", "error", err)
		return http.StatusServiceUnavailable, answer{Result: resultUnreachable, Detail: err.Error()}
	}
	r.adopt(rep.resp)
	switch rep.disp {
	case api.Continue:
		if r.claimed {
			r.acked(r.claimedAt)
		} else {
			r.acked(rep.sentAt)
		}
		r.paced(rep.resp)
	case api.Cancel:
		r.log.InfoContext(ctx, "Servo declined the attempt; the function is not run",
			"status", rep.status, "code", rep.resp.Error, "state", rep.resp.State, "message", rep.resp.Message)
		return http.StatusOK, answer{Result: resultNotStarted, Code: rep.resp.Error, FinalState: rep.resp.State}
	default:
		r.log.ErrorContext(ctx, "Servo rejected `started`; the function is not run (protocol error, not retried)",
			"status", rep.status, "code", rep.resp.Error, "field", rep.resp.Field, "message", rep.resp.Message)
		return http.StatusOK, answer{Result: resultRejected, Code: rep.resp.Error, Detail: rep.resp.Message}
	}

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if d := r.env.Deadline; d != nil {
		var stopDeadline context.CancelFunc
		fnCtx, stopDeadline = context.WithDeadlineCause(fnCtx, *d, ErrDeadlineExceeded)
		defer stopDeadline()
	}
	r.mu.Lock()
	r.cancelFn = cancel
	r.mu.Unlock()

	stopHB := make(chan struct{})
	hbDone := make(chan struct{})
	hbCtx, abortHB := context.WithCancel(ctx)
	defer abortHB()
	go func() {
		defer close(hbDone)
		r.heartbeatLoop(hbCtx, stopHB)
	}()
	stopWatch := r.watchLease(abortHB)
	m := startMeter()
	ranFrom := time.Now()
	var (
		out  any
		ferr error
		pnc  *panicked
	)
	if r.refuse != nil {
		r.log.WarnContext(ctx, "attempt not started: "+r.refuse.Error())
		ferr = r.refuse
	} else {
		r.log.InfoContext(ctx, "attempt started")
		out, ferr, pnc = invoke(fnCtx, r.h.fn, r.t)
	}
	r.ranFor = time.Since(ranFrom)
	// Why the Func's context ended, as the Func saw it (a cancel request
	// answered after it returned does not count).
	cause := context.Cause(fnCtx)
	metrics := m.finish()
	// No new heartbeat; one in flight finishes (its answer counts: a 410
	// means nothing may be reported), unless the lease runs out meanwhile.
	close(stopHB)
	<-hbDone
	stopWatch()

	if stop := r.stopped(); stop != nil {
		return http.StatusOK, lostAnswer(stop)
	}
	req := outcome(cause, out, ferr, pnc, r.t)
	completedAt := cfg.now().UTC()
	req.Attempt, req.WorkerID, req.CompletedAt, req.Metrics = r.env.Attempt, cfg.workerID, &completedAt, metrics
	if req.Error != nil {
		r.category = string(req.Error.Category)
	}
	if pnc != nil {
		r.log.ErrorContext(ctx, "the function panicked", "panic", req.Error.Message)
	}
	if req.Outcome == api.OutcomeFailed && r.t.dirty() {
		// Store the last checkpoint first: a retry resumes from it.
		if !r.heartbeatOnce(ctx, nil) {
			if stop := r.stopped(); stop != nil {
				return http.StatusOK, lostAnswer(stop)
			}
		}
	}
	body, err = json.Marshal(req)
	if err != nil {
		return http.StatusInternalServerError, answer{Result: resultInternal, Detail: err.Error()}
	}
	rep, err = r.post(ctx, opCompleted, fixedBody(body), r.tokenUntil, nil)
	if err != nil {
		// Servo may have committed a try whose answer was lost; the
		// redelivery is settled by Servo (409 or 410 at started).
		r.log.ErrorContext(ctx, "could not report `completed`; answering 503 so Cloud Tasks redelivers", "outcome", req.Outcome, "error", err)
		return http.StatusServiceUnavailable, answer{Result: resultUnreachable, Outcome: string(req.Outcome), Detail: err.Error()}
	}
	switch rep.disp {
	case api.Committed:
		r.log.InfoContext(ctx, "attempt reported", "outcome", req.Outcome, "finalState", rep.resp.FinalState,
			"retryScheduled", rep.resp.RetryScheduled, "nextAttempt", rep.resp.NextAttempt)
		return http.StatusOK, answer{Result: resultCommitted, Outcome: string(req.Outcome), FinalState: rep.resp.FinalState}
	case api.Cancel:
		r.log.WarnContext(ctx, "Servo discarded the attempt's result: the attempt had no authority any more",
			"outcome", req.Outcome, "status", rep.status, "code", rep.resp.Error, "message", rep.resp.Message)
		return http.StatusOK, answer{Result: resultDiscarded, Outcome: string(req.Outcome), Code: rep.resp.Error}
	default:
		r.log.ErrorContext(ctx, "Servo rejected `completed` (protocol error, not retried)", "outcome", req.Outcome,
			"status", rep.status, "code", rep.resp.Error, "field", rep.resp.Field, "message", rep.resp.Message)
		return http.StatusOK, answer{Result: resultRejected, Outcome: string(req.Outcome), Code: rep.resp.Error, Detail: rep.resp.Message}
	}
}

func lostAnswer(stop error) answer {
	switch e := stop.(type) {
	case *RejectedError:
		return answer{Result: resultRejected, Code: e.Code, Detail: e.Error()}
	case *LeaseLostError:
		return answer{Result: resultLeaseLost, Code: e.Code, Detail: e.Error()}
	}
	return answer{Result: resultLeaseLost, Detail: stop.Error()}
}

// heartbeatLoop sends heartbeats, until ctx ends or the attempt loses its
// authority, or stop closes: every interval (jittered down by up to 15%)
// while the progress or the message changed, early after a checkpoint (at
// most every interval/4), and otherwise — a plain heartbeat, nothing new
// to say — only once Servo's pacing hint (nextHeartbeatInMs of the last
// answer, docs/contract.md §5.7) has passed since that answer, when it is
// longer than the interval. Without a hint (an older Servo) every
// heartbeat comes at the interval.
func (r *run) heartbeatLoop(ctx context.Context, stop <-chan struct{}) {
	interval := time.Duration(r.env.HeartbeatIntervalMs) * time.Millisecond
	gap := interval / 4
	last := time.Now()
	wait := jitter(interval)
	next, plainAt := last.Add(wait), last.Add(r.plainWait(interval, wait))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-r.flushCh:
			early := last.Add(gap)
			if now := time.Now(); early.Before(now) {
				early = now
			}
			if early.Before(next) {
				next = early
				t.Reset(time.Until(next))
			}
			continue
		case <-t.C:
		}
		if now := time.Now(); now.Before(plainAt) && !r.t.changed() {
			// Nothing new: wait for the hint, looking again every
			// interval in case the progress changes.
			next = now.Add(jitter(interval))
			if plainAt.Before(next) {
				next = plainAt
			}
			t.Reset(time.Until(next))
			continue
		}
		if !r.heartbeatOnce(ctx, stop) {
			return
		}
		last, wait = time.Now(), jitter(interval)
		next, plainAt = last.Add(wait), last.Add(r.plainWait(interval, wait))
		t.Reset(time.Until(next))
	}
}

func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Float64()*0.15*float64(d))
}

// heartbeatOnce sends one heartbeat with the latest progress and any
// unstored checkpoint, retrying until the token expires or stop closes. It
// reports whether the attempt may go on; when it may not, either it was
// stopped or the attempt lost its authority (r.stopped() says why).
func (r *run) heartbeatOnce(ctx context.Context, stop <-chan struct{}) bool {
	var version beat
	body := func() ([]byte, error) {
		req, v := r.t.heartbeat(r.env.Attempt, r.h.cfg.workerID, r.h.cfg.now().UTC())
		version = v
		return json.Marshal(req)
	}
	rep, err := r.post(ctx, opHeartbeat, body, r.tokenUntil, stop)
	r.h.inst.recordHeartbeat(ctx, err == nil)
	if err != nil {
		if errors.Is(err, errStopped) || ctx.Err() != nil {
			return false
		}
		r.lose(&LeaseLostError{Code: CodeServoUnreachable, Message: "Servo could not be reached before the task token expired: " + err.Error()})
		return false
	}
	r.adopt(rep.resp)
	switch rep.disp {
	case api.Continue:
		r.acked(rep.sentAt)
		r.paced(rep.resp)
		r.t.acked(version)
		if rep.resp.ShouldCancel != nil && *rep.resp.ShouldCancel {
			r.cancelBy(rep.resp.CancelReason)
		}
		return true
	case api.Cancel:
		r.lose(&LeaseLostError{Status: rep.status, Code: rep.resp.Error, Message: rep.resp.Message})
	default:
		r.lose(&RejectedError{Op: opHeartbeat, Status: rep.status, Code: rep.resp.Error, Field: rep.resp.Field, Message: rep.resp.Message})
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
