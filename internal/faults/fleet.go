package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
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
)

// Modes lists the worker behaviours.
var Modes = []string{ModeOK, ModeFailOnce, ModeCrashMid, ModeCrashBeforeStart, ModeCrashAfterCommit, ModeSkew}

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

func (r *Recorder) delivery(d Delivery, tok string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	th := r.h.Task(d.TaskID)
	th.Deliveries = append(th.Deliveries, d)
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
	f.rec.delivery(Delivery{TaskID: env.TaskID, Attempt: env.Attempt, At: time.Now()}, env.TaskToken)
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
}

func (f *Fleet) work(env api.Envelope) {
	var p Payload
	_ = json.Unmarshal(env.Payload, &p)
	w := &worker{f: f, env: env, id: fmt.Sprintf("w%d", f.seq.Add(1)), token: env.TaskToken, skew: time.Duration(p.SkewMs) * time.Millisecond}
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
	once(ModeSkew) // counted once; every attempt of the task is skewed
	if once(ModeCrashBeforeStart) {
		return
	}
	if !w.send("started", api.StartedRequest{Attempt: env.Attempt, WorkerID: w.id, StartedAt: w.now()}) {
		return
	}
	interval := time.Duration(env.HeartbeatIntervalMs) * time.Millisecond
	for i := range p.Heartbeats {
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(interval):
		}
		pct := (i + 1) * 100 / (p.Heartbeats + 1)
		cp, _ := json.Marshal(map[string]int{"done": i + 1})
		if !w.send("heartbeat", api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: w.id, HeartbeatAt: w.now(), ProgressPct: &pct, Checkpoint: cp}) {
			return
		}
		if once(ModeCrashMid) {
			return
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
	if c, ok := body.(api.CompletedRequest); ok {
		outcome = c.Outcome
	}
	giveUp := time.Now().Add(w.f.GiveUp)
	backoff := 100 * time.Millisecond
	for {
		c := Call{TaskID: w.env.TaskID, Kind: kind, Attempt: w.env.Attempt, WorkerID: w.id, Outcome: outcome, Sent: time.Now()}
		req, _ := http.NewRequestWithContext(w.f.ctx, http.MethodPost, url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+w.token)
		res, err := w.f.http.Do(req)
		c.Received = time.Now()
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

func ptrTo[T any](v T) *T { return &v }
