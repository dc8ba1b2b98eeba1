package faults

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/servo-dev/servo/api"
)

// Worker behaviours, chosen per task by its payload's "mode". Each fault
// is applied once per task, by the first delivery that gets to it; later
// ones behave.
const (
	ModeOK               = "ok"                 // started, heartbeats, completed SUCCEEDED
	ModeFailOnce         = "fail-once"          // attempt 1 reports a retryable failure
	ModeCrashMid         = "crash-mid"          // attempt 1 goes silent after a heartbeat
	ModeCrashBeforeStart = "crash-before-start" // attempt 1 is acknowledged, then nothing
	ModeCrashAfterCommit = "crash-after-commit" // the answer to completed is lost; the worker repeats it
	ModeSkew             = "skew"               // the worker's clock is an hour off (every attempt)
	ModePause            = "pause"              // attempt 1 stops past its lease, then resumes while attempt 2 runs
	ModeDuplicate        = "duplicate"          // attempt 1 is delivered twice: two workers run it
	ModeCancelLate       = "cancel-late"        // the task is cancelled and attempt 1 stops past the cancel grace, then resumes
	ModeSlowBody         = "slow-body"          // a heartbeat's body trickles in over SlowBody; the next is on time by its receipt
	ModeDelayed          = "delayed"            // submitted with a delayed start (startDelayMs DelayedStart); the worker behaves
	// Workers that heartbeat as production's do: plainly (nothing new, so
	// that the store writes a beat only when the skip rule says so,
	// docs/contract.md §5.3), at their task's own interval.
	ModePlain        = "plain"         // at the contract's default ratio, interval = lease ÷ 3
	ModeSkipHalf     = "skip-half"     // alternately just over and just under half the lease left (interval lease ÷ 4)
	ModeSkipInterval = "skip-interval" // alternately just over and just under 1.5 intervals left (interval lease × 5/12)
	// A worker as the SDKs pace it (docs/contract.md §5.7): plain
	// heartbeats, each sent when the last answer's nextHeartbeatInMs has
	// passed since it arrived, on a task whose lease decides the hint
	// (interval lease ÷ 6, a grace of pacedGraceMs).
	ModePaced = "paced"
)

// intervalMs is the heartbeat interval a task of mode declares.
func intervalMs(mode string) int {
	switch mode {
	case ModePlain:
		return leaseMs / 3
	case ModeSkipHalf:
		return leaseMs / 4
	case ModeSkipInterval:
		return leaseMs * 5 / 12
	case ModePaced:
		return leaseMs / 6
	}
	return heartbeatMs
}

// graceMs is the cancel grace period of mode's tasks: cancelGraceMs, or
// for ModePaced pacedGraceMs, long enough that the lease bound decides the
// pacing hint (half the grace is the cancel notice's bound).
func graceMs(mode string) int {
	if mode == ModePaced {
		return pacedGraceMs
	}
	return cancelGraceMs
}

// pacedGraceMs is ModePaced's cancel grace: twice the lease.
const pacedGraceMs = 2 * leaseMs

// skipEdge is how far from the skip rule's bound the edge modes aim their
// heartbeats (by the worker's own reckoning of the lease): far enough for
// a loaded machine's latency, near enough that a rule off by a fraction
// of the lease is caught.
const skipEdge = 500 * time.Millisecond

// DelayedStart is the start delay of a ModeDelayed task.
const DelayedStart = 1500 * time.Millisecond

// Modes lists the worker behaviours of the short mode (TestFaults).
var Modes = []string{ModeOK, ModeFailOnce, ModeCrashMid, ModeCrashBeforeStart, ModeCrashAfterCommit, ModeSkew,
	ModePause, ModeDuplicate, ModeCancelLate, ModeDelayed, ModePlain, ModeSkipHalf, ModeSkipInterval, ModePaced}

// AllModes lists every worker behaviour: the long mode's. ModeSlowBody is
// in it (and in TestFaultsSlowBody), not in Modes: it holds only once the
// lease counts from the time a callback was received in full.
var AllModes = append(slices.Clone(Modes), ModeSlowBody)

// Timings of the worker faults.
const (
	// PauseFor is how long a paused attempt stops calling: past its lease
	// (leaseMs) and the sweeper's pass, so that the next attempt runs when
	// it resumes.
	PauseFor = leaseMs*time.Millisecond + 3*time.Second
	// pausedNextHeartbeats is how many heartbeats the later attempts of a
	// paused task make, so that the next attempt still runs when the paused
	// one resumes.
	pausedNextHeartbeats = 25
	// cancelGraceMs is every task's cancel grace period; a late attempt
	// resumes CancelLateFor after its cancel was accepted.
	cancelGraceMs = 1000
	CancelLateFor = cancelGraceMs*time.Millisecond + 2*time.Second
	// SlowBody is how long the slow heartbeat's body takes to arrive.
	SlowBody = 3 * time.Second
)

// Payload is what the harness puts in each task.
type Payload struct {
	Mode       string `json:"mode"`
	Heartbeats int    `json:"heartbeats"`
	// Skew is the worker's clock offset in ms (ModeSkew).
	SkewMs int64 `json:"skewMs,omitempty"`
}

// Recorder collects a run's history; safe for concurrent use.
type Recorder struct {
	mu sync.Mutex
	h  History
	// OnCall, if set, is called with each call (for the steady-load figures
	// and the recovery times).
	OnCall func(Call)
}

// Call records one call.
func (r *Recorder) Call(c Call) {
	r.mu.Lock()
	if c.Kind == KindSubmit {
		r.h.Submits = append(r.h.Submits, c)
	}
	if c.TaskID != "" {
		th := r.h.Task(c.TaskID)
		th.Calls = append(th.Calls, c)
	}
	f := r.OnCall
	r.mu.Unlock()
	if f != nil {
		f(c)
	}
}

func (r *Recorder) delivery(d Delivery, tok string, interval, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	th := r.h.Task(d.TaskID)
	th.Deliveries = append(th.Deliveries, d)
	th.Interval, th.CancelGrace = interval, grace
	r.h.Tokens = append(r.h.Tokens, tok)
}

func (r *Recorder) token(tok string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Tokens = append(r.h.Tokens, tok)
}

// With runs f with the history locked.
func (r *Recorder) With(f func(h *History)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.h)
}

// Fleet is a pool of simulated conforming workers behind one HTTP
// endpoint, as Cloud Tasks pushes envelopes to a worker: each delivery is
// acknowledged at once and worked on in its own goroutine, reporting to the
// callbacks over HTTP, retrying transport errors and 503 with the same
// body, and recording every request and answer.
type Fleet struct {
	rec    *Recorder
	http   *http.Client
	srv    *http.Server
	url    string
	seq    atomic.Int64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// GiveUp bounds how long one callback is retried.
	GiveUp time.Duration
	// Injected counts the worker faults applied, by mode.
	injected sync.Map // mode → *atomic.Int64
	applied  sync.Map // task id → true once its fault was applied
}

// NewFleet starts the fleet's endpoint on a free port of 127.0.0.1.
func NewFleet(rec *Recorder) (*Fleet, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fleet{rec: rec, url: "http://" + lis.Addr().String() + "/", ctx: ctx, cancel: cancel, GiveUp: 2 * time.Minute,
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.deliver), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(lis) }()
	return f, nil
}

// URL is the workers' endpoint.
func (f *Fleet) URL() string { return f.url }

// Close stops the endpoint and every worker.
func (f *Fleet) Close() {
	f.cancel()
	_ = f.srv.Close()
	f.wg.Wait()
}

// Injected returns how many deliveries met each worker fault.
func (f *Fleet) Injected() map[string]int64 {
	out := map[string]int64{}
	f.injected.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (f *Fleet) count(mode string) {
	v, _ := f.injected.LoadOrStore(mode, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (f *Fleet) deliver(w http.ResponseWriter, r *http.Request) {
	var env api.Envelope
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&env); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.rec.delivery(Delivery{TaskID: env.TaskID, Attempt: env.Attempt, At: time.Now()}, env.TaskToken,
		time.Duration(env.HeartbeatIntervalMs)*time.Millisecond, time.Duration(env.CancelGracePeriodMs)*time.Millisecond)
	w.WriteHeader(http.StatusOK)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.work(env)
	}()
}

// worker is one attempt being worked on.
type worker struct {
	f     *Fleet
	env   api.Envelope
	id    string
	token string
	skew  time.Duration
	// slow, when set, trickles the next request's body over that long;
	// bodyDone is when the last request's body was sent in full.
	slow     time.Duration
	bodyDone time.Time
	// cancel is set once an answer said shouldCancel.
	cancel bool
	// hint is the last accepted answer's nextHeartbeatInMs (0: none),
	// answered when it arrived.
	hint     time.Duration
	answered time.Time
}

// plainWait is how long a plain heartbeat waits from now, as the SDKs
// pace it (docs/contract.md §5.7): until the last answer's hint has
// passed since it arrived, when the hint is longer than interval; else
// interval from now.
func (w *worker) plainWait(interval time.Duration) time.Duration {
	if w.hint <= interval {
		return interval
	}
	return max(time.Until(w.answered.Add(w.hint)), 0)
}

func (f *Fleet) work(env api.Envelope) {
	var p Payload
	_ = json.Unmarshal(env.Payload, &p)
	// once reports whether mode's fault is to be applied now (it is the
	// task's, and was not applied yet), and counts it.
	once := func(mode string) bool {
		if p.Mode != mode {
			return false
		}
		if _, done := f.applied.LoadOrStore(env.TaskID, true); done {
			return false
		}
		f.count(mode)
		return true
	}
	once(ModeSkew)    // counted once; every attempt of the task is skewed
	once(ModeDelayed) // counted once; the worker behaves (the delay is the submit's)
	switch p.Mode {
	case ModePlain, ModeSkipHalf, ModeSkipInterval, ModePaced:
		once(p.Mode) // counted once; every attempt heartbeats so
		f.newWorker(env, p).runPlain(p)
		return
	}
	if once(ModeCrashBeforeStart) {
		return
	}
	if once(ModeDuplicate) {
		// A second delivery of the same attempt, as Cloud Tasks may make:
		// another worker runs it too; one of the two gets
		// attempt_already_started.
		f.wg.Go(func() { f.newWorker(env, p).run(p, func(string) bool { return false }) })
	}
	f.newWorker(env, p).run(p, once)
}

func (f *Fleet) newWorker(env api.Envelope, p Payload) *worker {
	return &worker{f: f, env: env, id: fmt.Sprintf("w%d", f.seq.Add(1)), token: env.TaskToken, skew: time.Duration(p.SkewMs) * time.Millisecond}
}

// sleep waits d, or until the fleet closes (false).
func (f *Fleet) sleep(d time.Duration) bool {
	select {
	case <-f.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run works one attempt: started, heartbeats, completed, with the faults
// once allows applied.
func (w *worker) run(p Payload, once func(string) bool) {
	f, env := w.f, w.env
	if !w.send("started", api.StartedRequest{Attempt: env.Attempt, WorkerID: w.id, StartedAt: w.now()}) {
		return
	}
	interval := time.Duration(env.HeartbeatIntervalMs) * time.Millisecond
	beats := p.Heartbeats
	if p.Mode == ModePause && env.Attempt > 1 {
		beats = pausedNextHeartbeats
	}
	var slowDone time.Time // when the slow heartbeat's body was sent in full
	for i := range beats {
		// Every other heartbeat is plain (below): it waits for the
		// pacing hint, as the SDKs do.
		wait := interval
		if i%2 == 1 {
			wait = w.plainWait(interval)
		}
		if !slowDone.IsZero() {
			// On time by the contract's rule (the lease counts from the
			// receipt of the previous heartbeat in full), late by its first
			// byte.
			wait = time.Until(slowDone.Add(time.Duration(env.HeartbeatTimeoutMs)*time.Millisecond - 2*time.Second))
			slowDone = time.Time{}
		}
		if !f.sleep(wait) {
			return
		}
		// Every other heartbeat reports progress and a checkpoint; the
		// others are plain, which the store writes only when less than
		// half the lease is left (the lease invariant follows that rule).
		hb := api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: w.id, HeartbeatAt: w.now()}
		if i%2 == 0 {
			pct := (i + 1) * 100 / (beats + 1)
			hb.ProgressPct = &pct
			hb.Checkpoint, _ = json.Marshal(map[string]int{"done": i + 1})
		}
		if i == 0 && once(ModeSlowBody) {
			w.slow = SlowBody
		}
		ok := w.send("heartbeat", hb)
		if w.slow > 0 {
			w.slow, slowDone = 0, w.bodyDone
		}
		if !ok {
			return
		}
		if w.cancel {
			w.send("completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: w.id, Outcome: api.OutcomeCancelled, CompletedAt: w.now()})
			return
		}
		if once(ModeCrashMid) {
			return
		}
		if once(ModePause) && !f.sleep(PauseFor) {
			return
		}
		if once(ModeCancelLate) {
			// The task is cancelled while the worker is busy; it comes back
			// past the grace period.
			if !f.cancelTask(env) || !f.sleep(CancelLateFor) {
				return
			}
		}
	}
	done := api.CompletedRequest{Attempt: env.Attempt, WorkerID: w.id, Outcome: api.OutcomeSucceeded, CompletedAt: w.now(), Output: json.RawMessage(`{"ok":true}`)}
	if once(ModeFailOnce) {
		done.Outcome = api.OutcomeFailed
		done.Output = nil
		done.Error = &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "transient", Retryable: ptrTo(true)}
	}
	if once(ModeCrashAfterCommit) {
		// The answer is lost: the worker crashes as it arrives, restarts
		// and, not knowing whether it was committed, reports again.
		w.send("completed", done)
	}
	w.send("completed", done)
}

// runPlainBeats is how many plain heartbeats an attempt of the plain modes
// sends: past two leases, so that a lease the skip rule (or the pacing
// hint) let lapse shows.
const runPlainBeats = 6

// runPlain works one attempt of the plain modes: started, plain
// heartbeats, completed. ModePlain beats at the task's interval; the edge
// modes beat by the contract's reckoning of the lease, in rounds of three:
// just over the skip rule's bound (not written), just under it (written),
// then a little after the lease before that renewal ran out (on time only
// if the beat before was written). ModePaced beats when the last answer's
// pacing hint has passed since it arrived (ModePlain ignores the hint, as
// an older SDK does).
func (w *worker) runPlain(p Payload) {
	f, env := w.f, w.env
	if !w.send("started", api.StartedRequest{Attempt: env.Attempt, WorkerID: w.id, StartedAt: w.now()}) {
		return
	}
	lease := time.Duration(env.HeartbeatTimeoutMs) * time.Millisecond
	interval := time.Duration(env.HeartbeatIntervalMs) * time.Millisecond
	bound := max(lease/2, interval+interval/2) // a plain beat is written with less left
	exp := w.bodyDone.Add(lease)
	var before time.Time // the lease's end before the last written beat
	for i := range runPlainBeats {
		at := time.Now().Add(interval)
		if p.Mode == ModePaced {
			at = time.Now().Add(w.plainWait(interval))
		} else if p.Mode != ModePlain {
			switch i % 3 {
			case 0:
				at = exp.Add(-bound - skipEdge)
			case 1:
				at = exp.Add(-bound + skipEdge)
			case 2:
				at = before.Add(2 * skipEdge)
			}
		}
		if !f.sleep(time.Until(at)) {
			return
		}
		if !w.send("heartbeat", api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: w.id, HeartbeatAt: w.now()}) {
			return
		}
		if w.cancel {
			w.send("completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: w.id, Outcome: api.OutcomeCancelled, CompletedAt: w.now()})
			return
		}
		if left := exp.Sub(w.bodyDone); left <= lease/2 || left < interval+interval/2 {
			before, exp = exp, w.bodyDone.Add(lease)
		}
	}
	w.send("completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: w.id, Outcome: api.OutcomeSucceeded, CompletedAt: w.now(), Output: json.RawMessage(`{"ok":true}`)})
}

// cancelTask asks Servo's API to cancel the task, as a client does,
// retrying 503 and transport errors; it reports whether the cancel was
// accepted.
func (f *Fleet) cancelTask(env api.Envelope) bool {
	url := env.CallbackBaseURL + "/v1/tasks/" + env.TaskID + "/cancel"
	backoff := 200 * time.Millisecond
	giveUp := time.Now().Add(f.GiveUp)
	for {
		c := Call{TaskID: env.TaskID, Kind: KindCancel, Attempt: env.Attempt, Sent: time.Now()}
		c.FirstSent, c.BodyDone = c.Sent, c.Sent
		req, _ := http.NewRequestWithContext(f.ctx, http.MethodPost, url, bytes.NewReader([]byte(`{}`)))
		req.Header.Set("Content-Type", "application/json")
		res, err := f.http.Do(req)
		c.Received = time.Now()
		if err != nil {
			if f.ctx.Err() != nil {
				return false
			}
			c.TransportErr = err.Error()
		} else {
			c.Status, c.RetryAfter = res.StatusCode, res.Header.Get("Retry-After")
			var e struct{ Error string }
			_ = json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&e)
			res.Body.Close()
			c.Code = e.Error
		}
		f.rec.Call(c)
		if c.Status != 0 && c.Status != http.StatusServiceUnavailable {
			return c.Status/100 == 2
		}
		if time.Now().After(giveUp) || !f.sleep(backoff) {
			return false
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (w *worker) now() *time.Time {
	t := time.Now().Add(w.skew).UTC()
	return &t
}

// send posts one callback until it is answered with something other than
// 503 or a transport error (or GiveUp passes), recording every try. It
// reports whether the worker should go on.
func (w *worker) send(kind string, body any) bool {
	b, _ := json.Marshal(body)
	url := w.env.CallbackBaseURL + "/v1/tasks/" + w.env.TaskID + "/" + kind
	var outcome api.Outcome
	plain := false
	switch c := body.(type) {
	case api.CompletedRequest:
		outcome = c.Outcome
	case api.HeartbeatRequest:
		plain = c.ProgressPct == nil && len(c.Checkpoint) == 0 && c.Message == ""
	}
	giveUp := time.Now().Add(w.f.GiveUp)
	backoff := 100 * time.Millisecond
	var first time.Time
	for {
		c := Call{TaskID: w.env.TaskID, Kind: kind, Attempt: w.env.Attempt, WorkerID: w.id, Outcome: outcome, Plain: plain, Sent: time.Now()}
		first = cmp.Or(first, c.Sent)
		c.FirstSent, c.BodyDone = first, c.Sent
		var body io.Reader = bytes.NewReader(b)
		var tr *trickle
		if w.slow > 0 {
			tr = &trickle{b: b, every: w.slow / time.Duration(len(b)+1)}
			body = tr
		}
		req, _ := http.NewRequestWithContext(w.f.ctx, http.MethodPost, url, body)
		req.ContentLength = int64(len(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+w.token)
		res, err := w.f.http.Do(req)
		c.Received = time.Now()
		if tr != nil {
			if ns := tr.done.Load(); ns != 0 {
				c.BodyDone = time.Unix(0, ns)
			}
		}
		w.bodyDone = c.BodyDone
		wait := backoff
		if err != nil {
			if w.f.ctx.Err() != nil {
				return false
			}
			c.TransportErr = err.Error()
		} else {
			c.Status = res.StatusCode
			c.RetryAfter = res.Header.Get("Retry-After")
			raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
			res.Body.Close()
			if err := json.Unmarshal(raw, &c.Answer); err != nil {
				c.Answer.Message = "undecodable answer: " + string(raw)
			}
			if secs, err := strconv.Atoi(c.RetryAfter); err == nil && c.Status == http.StatusServiceUnavailable {
				wait = time.Duration(secs) * time.Second
			}
		}
		w.f.rec.Call(c)
		if c.Status != 0 && c.Status != http.StatusServiceUnavailable {
			if c.Answer.TaskToken != "" {
				w.token = c.Answer.TaskToken
				w.f.rec.token(c.Answer.TaskToken)
			}
			if c.Answer.ShouldCancel != nil && *c.Answer.ShouldCancel {
				w.cancel = true
			}
			if c.Status == http.StatusOK {
				w.hint, w.answered = time.Duration(c.Answer.NextHeartbeatInMs)*time.Millisecond, c.Received
			}
			return c.Status == http.StatusOK && c.Answer.Disposition != api.Committed
		}
		if time.Now().After(giveUp) {
			return false // as good as a crash: the lease will run out
		}
		select {
		case <-w.f.ctx.Done():
			return false
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// trickle is a request body sent one byte every so often; done is set
// (Unix ns) when its last byte was read, by the transport's goroutine.
type trickle struct {
	b     []byte
	every time.Duration
	done  atomic.Int64
}

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	time.Sleep(t.every)
	p[0] = t.b[0]
	t.b = t.b[1:]
	if len(t.b) == 0 {
		t.done.Store(time.Now().UnixNano())
	}
	return 1, nil
}

func ptrTo[T any](v T) *T { return &v }
