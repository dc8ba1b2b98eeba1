package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/worker"
)

// This file holds the in-test HTTP server used by the protocol unit tests:
// a scripted stand-in for Servo's callbacks that records what the SDK sent.
// The integration tests (integration_test.go) use the real callbacks.

type call struct {
	op          string
	auth        string
	traceparent string
	body        []byte
	at          int // sequence number across all ops
}

type fakeAnswer struct {
	status int
	resp   api.CallbackResponse
	// hijack closes the connection without an answer.
	hijack bool
	// hang never answers: it holds the request until the client gives up
	// (or the test ends).
	hang bool
	// raw replaces the JSON body (a proxy's error page).
	raw    string
	header map[string]string
}

type fakeServo struct {
	t   testing.TB
	srv *httptest.Server

	mu    sync.Mutex
	calls []call
	// respond scripts the answer to the n-th (from 1) call of op; a zero
	// answer (status 0) means the default: accept.
	respond func(op string, n int, body []byte) fakeAnswer
	// seen is signalled (non-blocking) after each recorded call.
	seen chan call
	// closing ends hanging requests when the test ends.
	closing chan struct{}
}

func newFake(t testing.TB, respond func(op string, n int, body []byte) fakeAnswer) *fakeServo {
	t.Helper()
	f := &fakeServo{t: t, respond: respond, seen: make(chan call, 1024), closing: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.closing) }) // runs first: Close waits for hanging requests
	return f
}

func (f *fakeServo) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.Method != http.MethodPost || len(parts) != 4 || parts[0] != "v1" || parts[1] != "tasks" {
		http.Error(w, "bad path", http.StatusNotFound)
		return
	}
	op := parts[3]
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	n := 1
	for _, c := range f.calls {
		if c.op == op {
			n++
		}
	}
	c := call{op: op, auth: r.Header.Get("Authorization"), traceparent: r.Header.Get("Traceparent"), body: body, at: len(f.calls)}
	f.calls = append(f.calls, c)
	respond := f.respond
	f.mu.Unlock()
	select {
	case f.seen <- c:
	default:
	}
	var a fakeAnswer
	if respond != nil {
		a = respond(op, n, body)
	}
	if a.hang {
		select {
		case <-r.Context().Done():
		case <-f.closing:
		}
		return
	}
	if a.hijack {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if a.status == 0 {
		a = accept(op)
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	if a.raw != "" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(a.status)
		io.WriteString(w, a.raw)
		return
	}
	a.resp.ServerTime = time.Now().UTC()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	json.NewEncoder(w).Encode(a.resp)
}

func accept(op string) fakeAnswer {
	switch op {
	case "completed":
		return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Committed, FinalState: api.Succeeded}}
	case "heartbeat":
		no := false
		return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Continue, ShouldCancel: &no}}
	}
	return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Continue}}
}

func refuse(status int, code string, d api.Disposition) fakeAnswer {
	return fakeAnswer{status: status, resp: api.CallbackResponse{Disposition: d, Error: code, Message: code}}
}

// ops returns the recorded calls of op (all calls for "").
func (f *fakeServo) ops(op string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if op == "" || c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// waitFor waits until a call satisfying ok is recorded (or fails the test
// after a generous timeout).
func (f *fakeServo) waitFor(ok func(call) bool) call {
	f.t.Helper()
	for _, c := range f.ops("") {
		if ok(c) {
			return c
		}
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case c := <-f.seen:
			if ok(c) {
				return c
			}
		case <-timeout:
			f.t.Fatal("the expected callback never arrived")
		}
	}
}

func (f *fakeServo) envelope() api.Envelope {
	return api.Envelope{
		TaskID: "task_01UNIT", RunID: "run_01UNIT", TaskKey: "k", TenantID: "acme", WorkspaceID: "ws", Attempt: 1,
		Worker: "unit", Payload: json.RawMessage(`{"rows":3}`), EnqueuedAt: time.Now().UTC(),
		CallbackBaseURL: f.srv.URL, TaskToken: "tok-1", TokenExpiresAt: time.Now().Add(time.Minute).UTC(),
		// A timeout far above the interval: only the tests of the
		// heartbeat-timeout fence set one that can run out.
		HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 5_000, CancelGracePeriodMs: 1000,
	}
}

// logRecorder is a slog.Handler that keeps the lines (message and
// attributes), so tests can wait for a line and check what lines carry, and
// writes them to the test log while the test runs.
type logRecorder struct {
	*logSink
	attrs []slog.Attr
}

type logSink struct {
	mu    sync.Mutex
	t     *testing.T
	done  bool
	lines []logLine
	ch    chan string
}

type logLine struct {
	msg   string
	attrs map[string]string
	text  string
}

func newLogRecorder(t *testing.T) *logRecorder {
	s := &logSink{t: t, ch: make(chan string, 1024)}
	t.Cleanup(func() { s.mu.Lock(); s.done = true; s.mu.Unlock() })
	return &logRecorder{logSink: s}
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{logSink: l.logSink, attrs: append(append([]slog.Attr(nil), l.attrs...), as...)}
}

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := logLine{msg: r.Message, attrs: map[string]string{}}
	var b bytes.Buffer
	b.WriteString(r.Level.String() + " " + r.Message)
	add := func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		b.WriteString(" " + a.String())
		return true
	}
	for _, a := range l.attrs {
		add(a)
	}
	r.Attrs(add)
	line.text = b.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(line.text)
	}
	l.lines = append(l.lines, line)
	select {
	case l.ch <- r.Message:
	default:
	}
	return nil
}

func (l *logRecorder) all() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logLine(nil), l.lines...)
}

func (l *logRecorder) waitFor(t *testing.T, substr string) {
	t.Helper()
	for _, line := range l.all() {
		if strings.Contains(line.msg, substr) {
			return
		}
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-l.ch:
			if strings.Contains(m, substr) {
				return
			}
		case <-timeout:
			t.Fatalf("log line %q never appeared", substr)
		}
	}
}

type deliveryAnswer struct {
	TaskID     string    `json:"taskId"`
	Attempt    int       `json:"attempt"`
	WorkerID   string    `json:"workerId"`
	Result     string    `json:"result"`
	Code       string    `json:"code"`
	Outcome    string    `json:"outcome"`
	FinalState api.State `json:"finalState"`
	Detail     string    `json:"detail"`
}

// deliver posts body to h as Cloud Tasks would and returns the answer.
func deliver(t *testing.T, h http.Handler, body []byte, header ...string) (int, deliveryAnswer) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Google-Cloud-Tasks")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var a deliveryAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer is not JSON: %q", rec.Body.String())
	}
	return rec.Code, a
}

func deliverEnv(t *testing.T, h http.Handler, env api.Envelope) (int, deliveryAnswer) {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return deliver(t, h, b)
}

// testHandler is worker.Handler with fast retries and a recording logger.
func testHandler(t *testing.T, fn worker.Func, opts ...worker.Option) (http.Handler, *logRecorder) {
	logs := newLogRecorder(t)
	base := []worker.Option{worker.WithWorkerID("w-1"), worker.WithLogger(slog.New(logs)),
		worker.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), worker.WithRequestTimeout(2 * time.Second)}
	return worker.Handler(fn, append(base, opts...)...), logs
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
