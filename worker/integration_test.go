package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// Integration tests: the SDK against the real callbacks handler, the real
// store and the Firestore emulator. Envelopes are built as the dispatcher
// builds them (task.Task.Envelope with a token from an auth.KeyRing) and
// POSTed to the worker handler as Cloud Tasks would.

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }

type stack struct {
	store *store.Store
	keys  *auth.KeyRing
	// url is the callbacks server's base URL.
	url string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	s, err := store.New(ctx, emulatortest.ProjectID(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	keys, _, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	cb, err := callbacks.NewHandler(callbacks.Config{Store: s, Keys: keys, Logger: slog.New(newLogRecorder(t))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(cb)
	t.Cleanup(srv.Close)
	return &stack{store: s, keys: keys, url: srv.URL}
}

// create stores a task as the dispatcher would (PENDING → QUEUED) with
// short timers.
func (st *stack) create(t *testing.T, payload string, mutate func(*task.Task)) task.Task {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	tk := task.Task{
		ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k",
		Worker: "it", Payload: json.RawMessage(payload),
		Timing: api.Timing{HeartbeatIntervalMs: 150, HeartbeatTimeoutMs: 10_000, CancelGracePeriodMs: 20_000},
		Retry:  api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 100, MaxBackoffMs: 200},
	}
	if mutate != nil {
		mutate(&tk)
	}
	created, _, err := st.store.Create(ctx, tk, now)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.store.Apply(ctx, created.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: time.Now().UTC()})
	if err != nil || r.Task.State != api.Queued {
		t.Fatalf("enqueue: %v %s", err, r.Task.State)
	}
	return r.Task
}

// envelope signs a token for tk's current attempt and builds its envelope
// for callbacks at base.
func (st *stack) envelope(t *testing.T, tk task.Task, base string, ttl time.Duration) api.Envelope {
	t.Helper()
	now := time.Now()
	tok, exp, err := st.keys.Sign(auth.Scope{TenantID: tk.TenantID, WorkspaceID: tk.WorkspaceID, RunID: tk.RunID, TaskID: tk.ID, Attempt: tk.Attempt}, ttl, now)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Envelope(base, tok, exp, now)
}

func (st *stack) get(t *testing.T, id string) task.Task {
	t.Helper()
	tk, err := st.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// itHandler is testHandler with a per-request timeout that outlasts a slow
// emulator on a loaded machine (a timed-out callback is retried, which is
// correct but slows the tests down).
func itHandler(t *testing.T, fn worker.Func, opts ...worker.Option) (http.Handler, *logRecorder) {
	return testHandler(t, fn, append([]worker.Option{worker.WithRequestTimeout(20 * time.Second)}, opts...)...)
}

// waitUntil polls cond (which reads the store) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	servotest.Until(t, what, cond)
}

// proxy sits between the worker and the callbacks and misbehaves on plan.
type proxy struct {
	upstream string
	plan     func(op string, n int) action
	srv      *httptest.Server

	mu     sync.Mutex
	counts map[string]int
	auths  []string
}

type action struct {
	// delay holds the request before anything else.
	delay time.Duration
	// fail answers 503 without forwarding.
	fail bool
	// closeBefore drops the connection without forwarding.
	closeBefore bool
	// closeAfter forwards (Servo processes the request), then drops the
	// connection: the answer is lost.
	closeAfter bool
}

func newProxy(t *testing.T, upstream string, plan func(op string, n int) action) *proxy {
	p := &proxy{upstream: upstream, plan: plan, counts: map[string]int{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[op]
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := path.Base(r.URL.Path)
	p.mu.Lock()
	p.counts[op]++
	n := p.counts[op]
	p.auths = append(p.auths, r.Header.Get("Authorization"))
	p.mu.Unlock()
	a := p.plan(op, n)
	hangUp := func() {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}
	if a.delay > 0 {
		time.Sleep(a.delay)
	}
	switch {
	case a.fail:
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	case a.closeBefore:
		hangUp()
		return
	}
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), http.MethodPost, p.upstream+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	if a.closeAfter {
		hangUp()
		return
	}
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	w.Write(rb)
}

func TestIntegrationHappyPath(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{"rows":3}`, nil)
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		var in struct{ Rows int }
		if err := wt.Decode(&in); err != nil {
			return nil, err
		}
		wt.Progress(50, "half way")
		if err := wt.Checkpoint(map[string]int{"step": 1}); err != nil {
			return nil, err
		}
		waitUntil(t, "the checkpoint is stored", func() bool {
			a := st.get(t, tk.ID).Attempts
			return len(a) == 1 && string(a[0].Checkpoint) == `{"step":1}`
		})
		return map[string]int{"rows": in.Rows}, nil
	}, worker.WithWorkerID("w-int"))
	status, ans := deliverEnv(t, h, st.envelope(t, tk, st.url, 0))
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Succeeded {
		t.Fatalf("answer %d %+v", status, ans)
	}
	got := st.get(t, tk.ID)
	if got.State != api.Succeeded || len(got.Attempts) != 1 {
		t.Fatalf("task %s with %d attempts", got.State, len(got.Attempts))
	}
	a := got.Attempts[0]
	if a.Outcome != api.OutcomeSucceeded || string(a.Output) != `{"rows":3}` || a.WorkerID != "w-int" ||
		a.ProgressPct == nil || *a.ProgressPct != 50 || a.Message != "half way" || string(a.Checkpoint) != `{"step":1}` ||
		a.Metrics == nil || a.Metrics.PeakMemoryBytes <= 0 || a.StartedAt == nil || a.LastHeartbeatAt == nil {
		t.Fatalf("attempt %+v", a)
	}
}

func TestIntegrationCancelMidRun(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, nil)
	var cause error
	var last json.RawMessage
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		wt.SetPhase("copying")
		for i := 0; ; i++ {
			if err := wt.Checkpoint(map[string]int{"nextPartition": i}); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				cause, last = context.Cause(ctx), wt.LastCheckpoint()
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	done := make(chan deliveryAnswer, 1)
	go func() { _, a := deliverEnv(t, h, st.envelope(t, tk, st.url, 0)); done <- a }()
	waitUntil(t, "the attempt runs and has checkpointed", func() bool {
		g := st.get(t, tk.ID)
		return g.State == api.Running && len(g.Attempts) == 1 && len(g.Attempts[0].Checkpoint) > 0
	})
	// What the dispatcher's cancel does.
	r, err := st.store.Apply(context.Background(), tk.ID, task.Event{Kind: task.EventCancel, Now: time.Now().UTC(), Reason: "user_requested"})
	if err != nil || r.Task.State != api.Cancelling {
		t.Fatalf("cancel: %v %s", err, r.Task.State)
	}
	ans := <-done
	if ans.Result != "committed" || ans.Outcome != "CANCELLED" || ans.FinalState != api.Cancelled {
		t.Fatalf("answer %+v", ans)
	}
	var ce *worker.CancelledError
	if !errors.As(cause, &ce) || ce.Reason != "user_requested" {
		t.Fatalf("cause %v", cause)
	}
	got := st.get(t, tk.ID)
	a := got.Attempts[0]
	if got.State != api.Cancelled || got.Reason != "user_requested" || a.Outcome != api.OutcomeCancelled ||
		string(a.PartialProgress) != string(last) || a.CancelledDuringPhase != "copying" {
		t.Fatalf("task %s/%s, attempt %s partialProgress %s (want %s) phase %q", got.State, got.Reason, a.Outcome, a.PartialProgress, last, a.CancelledDuringPhase)
	}
}

// A partition after `started`: heartbeats reach Servo only after the lease
// has run out. The worker fences itself when heartbeatTimeoutMs has passed
// without an acknowledgement, reports nothing, and Servo, on the late
// heartbeat, expires the attempt and schedules the next one.
func TestIntegrationHeartbeatTimeoutFencesWorker(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, func(tk *task.Task) {
		tk.Timing = api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 300, CancelGracePeriodMs: 1000}
	})
	p := newProxy(t, st.url, func(op string, _ int) action {
		if op == "heartbeat" {
			return action{delay: time.Second}
		}
		return action{}
	})
	var cause error
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return "too late", nil // must not be reported
	})
	status, ans := deliverEnv(t, h, st.envelope(t, tk, p.srv.URL, 0))
	if status != http.StatusOK || ans.Result != "lease_lost" || ans.Code != worker.CodeHeartbeatTimeout {
		t.Fatalf("answer %d %+v", status, ans)
	}
	var lost *worker.LeaseLostError
	if !errors.Is(cause, worker.ErrLeaseLost) || !errors.As(cause, &lost) || lost.Code != worker.CodeHeartbeatTimeout {
		t.Fatalf("cause %v", cause)
	}
	waitUntil(t, "Servo expires attempt 1 on the late heartbeat", func() bool {
		g := st.get(t, tk.ID)
		return len(g.Attempts) > 0 && g.Attempts[0].Outcome == api.OutcomeZombie
	})
	got := st.get(t, tk.ID)
	if got.State != api.Queued || got.Attempt != 2 {
		t.Fatalf("task %s attempt %d", got.State, got.Attempt)
	}
	if p.count("completed") != 0 || p.count("heartbeat") != 1 {
		t.Fatalf("fenced worker sent %d heartbeats, %d completed", p.count("heartbeat"), p.count("completed"))
	}
}

func TestIntegrationDuplicateDelivery(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, nil)
	release := make(chan struct{})
	var callsA, callsB atomic.Int32
	hA, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		callsA.Add(1)
		<-release
		return "a", nil
	}, worker.WithWorkerID("w-a"))
	hB, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		callsB.Add(1)
		return "b", nil
	}, worker.WithWorkerID("w-b"))
	env := st.envelope(t, tk, st.url, 0)
	done := make(chan deliveryAnswer, 1)
	go func() { _, a := deliverEnv(t, hA, env); done <- a }()
	waitUntil(t, "worker A runs the attempt", func() bool {
		g := st.get(t, tk.ID)
		return g.State == api.Running && g.Attempts[0].WorkerID == "w-a"
	})
	// Cloud Tasks delivers the same envelope again, to another instance.
	status, ans := deliverEnv(t, hB, env)
	if status != http.StatusOK || ans.Result != "not_started" || ans.Code != api.CodeAttemptAlreadyStarted || callsB.Load() != 0 {
		t.Fatalf("duplicate delivery: %d %+v, function called %d times", status, ans, callsB.Load())
	}
	close(release)
	if a := <-done; a.Result != "committed" {
		t.Fatalf("worker A: %+v", a)
	}
	got := st.get(t, tk.ID)
	if got.State != api.Succeeded || len(got.Attempts) != 1 || got.Attempts[0].WorkerID != "w-a" || string(got.Attempts[0].Output) != `"a"` || callsA.Load() != 1 {
		t.Fatalf("task %s attempts %+v", got.State, got.Attempts)
	}
}

func TestIntegrationFlakyNetworkExactlyOneCompletion(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, nil)
	p := newProxy(t, st.url, func(op string, n int) action {
		switch op {
		case "started":
			return []action{{fail: true}, {closeAfter: true}, {}}[min(n, 3)-1]
		case "heartbeat":
			switch n % 4 {
			case 1:
				return action{fail: true}
			case 2:
				return action{closeBefore: true}
			case 3:
				return action{delay: 150 * time.Millisecond, closeAfter: true}
			}
			return action{}
		case "completed":
			// Committed but the answer lost, then 503, then a dropped
			// connection, then through: Servo replays its answer.
			return []action{{closeAfter: true}, {fail: true}, {closeBefore: true}, {delay: 50 * time.Millisecond}}[min(n, 4)-1]
		}
		return action{}
	})
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		for i := range 8 {
			if err := wt.Checkpoint(map[string]int{"nextPartition": i + 1}); err != nil {
				return nil, err
			}
			wt.Progress(100*(i+1)/8, "partition")
			time.Sleep(60 * time.Millisecond)
		}
		return map[string]string{"result": "ok"}, nil
	})
	status, ans := deliverEnv(t, h, st.envelope(t, tk, p.srv.URL, 0))
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Succeeded {
		t.Fatalf("answer %d %+v", status, ans)
	}
	if p.count("started") != 3 || p.count("completed") != 4 || p.count("heartbeat") < 4 {
		t.Fatalf("calls: started %d heartbeat %d completed %d", p.count("started"), p.count("heartbeat"), p.count("completed"))
	}
	got := st.get(t, tk.ID)
	if got.State != api.Succeeded || len(got.Attempts) != 1 || got.Attempts[0].Outcome != api.OutcomeSucceeded || string(got.Attempts[0].Output) != `{"result":"ok"}` {
		t.Fatalf("task %s attempts %+v", got.State, got.Attempts)
	}
	// Exactly one completion: PENDING, QUEUED, RUNNING, SUCCEEDED, no more.
	ob, err := st.store.OutboxEntries(context.Background(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	var to []string
	for _, e := range ob {
		to = append(to, string(e.To))
	}
	if got.Seq != 4 || strings.Join(to, ",") != "PENDING,QUEUED,RUNNING,SUCCEEDED" {
		t.Fatalf("seq %d, transitions %v", got.Seq, to)
	}
}

func TestIntegrationPanic(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, func(tk *task.Task) { tk.Retry.MaxAttempts = 1 })
	h, _ := itHandler(t, func(context.Context, *worker.Task) (any, error) {
		panic("integration kaboom")
	})
	status, ans := deliverEnv(t, h, st.envelope(t, tk, st.url, 0))
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Failed {
		t.Fatalf("answer %d %+v", status, ans)
	}
	got := st.get(t, tk.ID)
	e := got.Attempts[0].Error
	if got.State != api.Failed || got.Reason != api.ReasonRetriesExhausted || got.Attempts[0].Outcome != api.OutcomeFailed || e == nil ||
		e.Category != api.CategoryUserCode || e.Message != "panic: integration kaboom" || !strings.Contains(e.StackTrace, "TestIntegrationPanic") {
		t.Fatalf("task %s/%s attempt %+v", got.State, got.Reason, got.Attempts[0])
	}
}

func TestIntegrationRetryResumesFromCheckpoint(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{"partitions":5}`, func(tk *task.Task) { tk.Timing.HeartbeatIntervalMs = 60_000; tk.Timing.HeartbeatTimeoutMs = 120_000 })
	type seen struct {
		attempt int
		resume  json.RawMessage
	}
	var runs []seen
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		runs = append(runs, seen{wt.Attempt(), wt.ResumeFrom})
		var st struct{ Next int }
		if _, err := wt.DecodeResumeFrom(&st); err != nil {
			return nil, err
		}
		if wt.Attempt() == 1 {
			// Checkpoint, then fail at once: no regular heartbeat has
			// gone out, so the SDK must store the checkpoint itself.
			if err := wt.Checkpoint(map[string]int{"next": 3}); err != nil {
				return nil, err
			}
			return nil, worker.Infrastructure(errors.New("bucket unavailable"))
		}
		return map[string]int{"from": st.Next}, nil
	})
	status, ans := deliverEnv(t, h, st.envelope(t, tk, st.url, 0))
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Queued {
		t.Fatalf("attempt 1: %d %+v", status, ans)
	}
	retry, err := st.store.GetTask(context.Background(), tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if retry.State != api.Queued || retry.Attempt != 2 || string(retry.ResumeFrom) != `{"next":3}` {
		t.Fatalf("after attempt 1: %s attempt %d resumeFrom %s", retry.State, retry.Attempt, retry.ResumeFrom)
	}
	status, ans = deliverEnv(t, h, st.envelope(t, retry, st.url, 0))
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Succeeded {
		t.Fatalf("attempt 2: %d %+v", status, ans)
	}
	if len(runs) != 2 || runs[0].resume != nil || runs[1].attempt != 2 || string(runs[1].resume) != `{"next":3}` {
		t.Fatalf("runs %+v", runs)
	}
	got := st.get(t, tk.ID)
	if got.State != api.Succeeded || len(got.Attempts) != 2 || got.Attempts[0].Error == nil ||
		got.Attempts[0].Error.Category != api.CategoryInfrastructure || string(got.Attempts[1].Output) != `{"from":3}` {
		t.Fatalf("task %s attempts %+v", got.State, got.Attempts)
	}
}

func TestIntegrationAdoptsRefreshedToken(t *testing.T) {
	st := newStack(t)
	tk := st.create(t, `{}`, func(tk *task.Task) { tk.Timing.HeartbeatIntervalMs = 200 })
	p := newProxy(t, st.url, func(string, int) action { return action{} })
	env := st.envelope(t, tk, p.srv.URL, 3*time.Second)
	h, _ := itHandler(t, func(ctx context.Context, wt *worker.Task) (any, error) {
		// Outlive the first token (and the verifier's leeway).
		for time.Now().Before(env.TokenExpiresAt.Add(auth.TaskTokenLeeway + 500*time.Millisecond)) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return "outlived", nil
	})
	status, ans := deliverEnv(t, h, env)
	if status != http.StatusOK || ans.Result != "committed" || ans.FinalState != api.Succeeded {
		t.Fatalf("answer %d %+v", status, ans)
	}
	p.mu.Lock()
	first, last := p.auths[0], p.auths[len(p.auths)-1]
	p.mu.Unlock()
	if first != "Bearer "+env.TaskToken || last == first {
		t.Fatal("the worker did not switch to the refreshed token")
	}
}
