package callbacks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// TestMain runs the tests against one real Firestore emulator. Fuzz
// workers (the child processes of `go test -fuzz`) only run the pure fuzz
// target and start no emulator.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	emulatortest.Main(m, emulator.Firestore)
}

// env is a handler over a store of its own project on the emulator.
type env struct {
	t       testing.TB
	project string
	ctx     context.Context
	st      *store.Store
	rpc     *store.RPCCounter
	keys    *auth.KeyRing
	// keysJSON is the ring with its secret, to forge tokens in tests.
	keysJSON []byte
	clock    *servotest.Clock
	logs     *servotest.Buffer
	cfg      callbacks.Config
	h        http.Handler
}

// newEnv builds an env; mutate adjusts the handler's configuration (its
// Store, Keys, Now and Logger are already set).
func newEnv(t testing.TB, mutate func(*callbacks.Config)) *env {
	t.Helper()
	emulatortest.FirestoreHost(t) // fails clearly when no emulator runs
	e := &env{t: t, ctx: context.Background(), rpc: store.NewRPCCounter(), logs: &servotest.Buffer{}}
	var err error
	e.project = emulatortest.ProjectID(t)
	e.st, err = store.New(e.ctx, e.project, store.WithRPCCounter(e.rpc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	e.keys, e.keysJSON, err = auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	e.clock = servotest.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	e.cfg = callbacks.Config{Store: e.st, Keys: e.keys, Now: e.clock.Now, Logger: logs.New(e.logs, nil), Project: "servo-test"}
	if mutate != nil {
		mutate(&e.cfg)
	}
	e.h = newHandler(t, e.cfg)
	return e
}

// newHandler is callbacks.NewHandler; an error fails t.
func newHandler(t testing.TB, cfg callbacks.Config) http.Handler {
	t.Helper()
	h, err := callbacks.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// instance returns another handler on the same project and keys, as a
// second Cloud Functions instance would be: its own store connection,
// its own in-process state.
func (e *env) instance() http.Handler {
	e.t.Helper()
	st, err := store.New(e.ctx, e.project)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	cfg := e.cfg
	cfg.Store = st
	return newHandler(e.t, cfg)
}

// Test task timers: a 1 s interval, a 3 s lease, 1 s grace, retries after
// at most 100 ms.
var testTiming = api.Timing{HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 1000}
var testRetry = api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 100, BackoffCoefficient: 2, MaxBackoffMs: 100}

// create stores a new PENDING task at the clock's time.
func (e *env) create(mutate func(*task.Task)) task.Task {
	e.t.Helper()
	now := e.clock.Now()
	tk := task.Task{
		ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws1",
		TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{"rows":10}`), Timing: testTiming, Retry: testRetry,
	}
	if mutate != nil {
		mutate(&tk)
	}
	created, _, err := e.st.Create(e.ctx, tk, now)
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// apply applies ev (Now defaults to the clock) and returns the result.
func (e *env) apply(id string, ev task.Event) task.Result {
	e.t.Helper()
	if ev.Now.IsZero() {
		ev.Now = e.clock.Now()
	}
	r, err := e.st.Apply(e.ctx, id, ev)
	if err != nil {
		e.t.Fatalf("apply %s: %v", ev.Kind, err)
	}
	return r
}

// Builders of task states through store.Create and store.Apply.

func (e *env) queued() task.Task {
	tk := e.create(nil)
	return e.apply(tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1}).Task
}

func (e *env) running(worker string) task.Task {
	tk := e.queued()
	return e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: worker}).Task
}

func (e *env) cancelling(worker, reason string) task.Task {
	tk := e.running(worker)
	return e.apply(tk.ID, task.Event{Kind: task.EventCancel, Reason: reason}).Task
}

func (e *env) cancelledBeforeStart() task.Task {
	tk := e.queued()
	return e.apply(tk.ID, task.Event{Kind: task.EventCancel}).Task
}

func (e *env) succeeded(worker string) task.Task {
	tk := e.running(worker)
	c := completedReq(1, worker, api.OutcomeSucceeded)
	return e.apply(tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: worker, Completed: &c}).Task
}

// retried is a task whose attempt 1 failed retryably (with a checkpoint):
// QUEUED for attempt 2.
func (e *env) retried(worker string) task.Task {
	tk := e.running(worker)
	e.apply(tk.ID, task.Event{Kind: task.EventHeartbeat, Attempt: 1, WorkerID: worker,
		Heartbeat: &api.HeartbeatRequest{Attempt: 1, WorkerID: worker, Checkpoint: json.RawMessage(`{"offset":42}`)}})
	c := failedReq(1, worker, api.CategoryInfrastructure)
	r := e.apply(tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: worker, Completed: &c})
	if r.Task.State != api.Queued || r.Task.Attempt != 2 {
		e.t.Fatalf("retried: task is %s attempt %d", r.Task.State, r.Task.Attempt)
	}
	return r.Task
}

// expired is a RUNNING task whose lease ran out a second ago (it was
// started a lease and a second before the clock).
func (e *env) expired(worker string) task.Task {
	now := e.clock.Now()
	e.clock.Set(now.Add(-testTiming.HeartbeatTimeout() - time.Second))
	tk := e.running(worker)
	e.clock.Set(now)
	return tk
}

// token signs a token for tk's attempt at the clock's time.
func (e *env) token(tk task.Task, attempt int) string {
	e.t.Helper()
	return e.tokenFor(scopeOf(tk, attempt), time.Hour, e.clock.Now())
}

func (e *env) tokenFor(s auth.Scope, ttl time.Duration, at time.Time) string {
	e.t.Helper()
	tok, _, err := e.keys.Sign(s, ttl, at)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func scopeOf(tk task.Task, attempt int) auth.Scope {
	return auth.Scope{TenantID: tk.TenantID, WorkspaceID: tk.WorkspaceID, RunID: tk.RunID, TaskID: tk.ID, Attempt: attempt}
}

// Request bodies.

func startedReq(attempt int, worker string) api.StartedRequest {
	return api.StartedRequest{Attempt: attempt, WorkerID: worker}
}

func heartbeatReq(attempt int, worker string) api.HeartbeatRequest {
	p := 45
	return api.HeartbeatRequest{Attempt: attempt, WorkerID: worker, ProgressPct: &p, Message: "partition 5 of 10"}
}

func completedReq(attempt int, worker string, o api.Outcome) api.CompletedRequest {
	c := api.CompletedRequest{Attempt: attempt, WorkerID: worker, Outcome: o, Metrics: &api.Metrics{CPUTimeMs: 5}}
	switch o {
	case api.OutcomeSucceeded:
		c.Output = json.RawMessage(`{"rowCount":1000}`)
	case api.OutcomeCancelled:
		c.CancelledDuringPhase, c.PartialProgress = "processing", json.RawMessage(`{"records":5}`)
	}
	return c
}

func failedReq(attempt int, worker string, cat api.Category) api.CompletedRequest {
	c := completedReq(attempt, worker, api.OutcomeFailed)
	c.Error = &api.ErrorInfo{Category: cat, Message: "boom", StackTrace: "at main()"}
	return c
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	if b, ok := v.([]byte); ok {
		return b
	}
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// request is one HTTP request to the handler.
type request struct {
	method      string // default POST
	path        string // default /v1/tasks/{taskID}/{kind}
	taskID      string
	kind        callbacks.Kind
	contentType string // default application/json; "-" for none
	authz       string // default "Bearer " + token; "-" for none
	token       string
	body        []byte
}

// reply is the handler's answer.
type reply struct {
	status int
	header http.Header
	resp   api.CallbackResponse
	fields map[string]json.RawMessage
	raw    string
}

func (e *env) do(rq request) reply {
	e.t.Helper()
	return serve(e.t, e.h, rq)
}

func (rq request) httpRequest() *http.Request {
	method, path, ct, authz := rq.method, rq.path, rq.contentType, rq.authz
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = callbacks.PathPrefix + rq.taskID + "/" + string(rq.kind)
	}
	if ct == "" {
		ct = "application/json"
	}
	if authz == "" {
		authz = "Bearer " + rq.token
	}
	r := httptest.NewRequest(method, path, bytes.NewReader(rq.body))
	if ct != "-" {
		r.Header.Set("Content-Type", ct)
	}
	if authz != "-" {
		r.Header.Set("Authorization", authz)
	}
	return r
}

func serve(t testing.TB, h http.Handler, rq request) reply {
	t.Helper()
	rp, err := serveErr(h, rq)
	if err != nil {
		t.Fatal(err)
	}
	return rp
}

// serveErr is serve for goroutines other than the test's.
func serveErr(h http.Handler, rq request) (reply, error) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, rq.httpRequest())
	return parseReply(w.Code, w.Header(), w.Body.Bytes())
}

func parseReply(status int, h http.Header, body []byte) (reply, error) {
	rp := reply{status: status, header: h, raw: string(body)}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		return rp, fmt.Errorf("status %d: Content-Type %q, body %s", status, ct, body)
	}
	if err := json.Unmarshal(body, &rp.resp); err != nil {
		return rp, fmt.Errorf("status %d: body %q: %w", status, body, err)
	}
	if err := json.Unmarshal(body, &rp.fields); err != nil {
		return rp, err
	}
	if _, ok := rp.fields["serverTime"]; !ok || rp.resp.ServerTime.IsZero() {
		return rp, fmt.Errorf("status %d: no serverTime in %s", status, body)
	}
	if _, ok := rp.fields["disposition"]; !ok {
		return rp, fmt.Errorf("status %d: no disposition in %s", status, body)
	}
	return rp, nil
}

// post sends a callback of kind for tk with tok and body.
func (e *env) post(kind callbacks.Kind, taskID, tok string, body any) reply {
	e.t.Helper()
	return e.do(request{kind: kind, taskID: taskID, token: tok, body: mustJSON(e.t, body)})
}

// httpPost sends a callback over HTTP to base; it may run on any
// goroutine (it does not touch the test).
func httpPost(client *http.Client, base string, kind callbacks.Kind, taskID, tok string, body any) (reply, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(base, "/")+callbacks.PathPrefix+taskID+"/"+string(kind), bytes.NewReader(b))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	rb, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return parseReply(res.StatusCode, res.Header, rb)
}

// snapshot is everything a callback may write for a task.
type snapshot struct {
	Task     task.Task
	Attempts []task.Attempt
	Outbox   []store.OutboxEntry
}

func (e *env) snapshot(id string) snapshot {
	e.t.Helper()
	var s snapshot
	var err error
	if s.Task, err = e.st.GetTask(e.ctx, id); err != nil && err != store.ErrNotFound {
		e.t.Fatal(err)
	}
	if s.Attempts, err = e.st.Attempts(e.ctx, id); err != nil && err != store.ErrNotFound {
		e.t.Fatal(err)
	}
	if s.Outbox, err = e.st.OutboxEntries(e.ctx, id); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func sameSnapshot(a, b snapshot) bool { return reflect.DeepEqual(a, b) }

// outboxTransitions lists "FROM>TO" for a task's outbox, in order.
func (e *env) outboxTransitions(id string) []string {
	e.t.Helper()
	entries, err := e.st.OutboxEntries(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, len(entries))
	for i, en := range entries {
		out[i] = string(en.From) + ">" + string(en.To)
	}
	return out
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
