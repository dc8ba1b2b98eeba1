package sdkcontract_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/sdkbuild"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// sdk is one SDK under contract: how to run its contract worker.
type sdk struct {
	name string
	// argv returns the contract worker's command (before the mode), after
	// any build; it fails the test when a tool is missing.
	argv func(t *testing.T) []string
	// newTrace: the SDK starts a trace of its own for an attempt that
	// arrived without one (pull, job), so that every callback carries a
	// traceparent. The Go SDK's callbacks carry one whenever there is a
	// trace to continue (every push delivery; pull and job with an
	// OpenTelemetry tracer provider).
	newTrace bool
}

var sdks = []sdk{
	{"go", goWorker, false},
	{"python", pythonWorker, true},
	// The same scenarios with an async def handler (the SDK runs it on an
	// event loop of its own; a cancel is asyncio.CancelledError).
	{"python-async", func(t *testing.T) []string { return append(pythonWorker(t), "--async") }, true},
	{"typescript", nodeWorker, true},
}

func goWorker(t *testing.T) []string {
	bin := filepath.Join(t.TempDir(), "goworker")
	if out, err := exec.Command("go", "build", "-o", bin, "./workers/goworker").CombinedOutput(); err != nil {
		t.Fatalf("build the Go contract worker: %v\n%s", err, out)
	}
	return []string{bin}
}

func pythonWorker(t *testing.T) []string {
	servotest.TrackFiles(t, "../../sdk/python/servo_worker", ".py")
	servotest.TrackFiles(t, "workers", ".py")
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not installed: the Python SDK's contract test needs it; install the Debian package python3 (apt-get install python3), Python >= 3.10")
	}
	if out, err := exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 10))").CombinedOutput(); err != nil {
		t.Fatalf("%s is older than 3.10 (%v %s): install Python >= 3.10", p, err, out)
	}
	abs, _ := filepath.Abs("workers/contract.py")
	return []string{p, abs}
}

// nodeWorker builds the TypeScript SDK (package sdkbuild: npm ci when
// node_modules is absent, then tsc) and returns the Node contract worker.
func nodeWorker(t *testing.T) []string {
	servotest.TrackFiles(t, "workers", ".mjs")
	node := sdkbuild.TypeScript(t)
	abs, _ := filepath.Abs("workers/contract.mjs")
	return []string{node, abs}
}

// proc is a contract worker process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs argv with mode args; out gets stdout and stderr. It returns
// the first stdout line when ready is set (the push worker's address).
func start(t *testing.T, argv []string, out *servotest.Buffer, ready bool, args ...string) (*proc, string) {
	t.Helper()
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "K_SERVICE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() {
			if n == 0 {
				first <- sc.Text()
			}
			n++
			fmt.Fprintln(out, sc.Text())
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	if !ready {
		return p, ""
	}
	select {
	case line := <-first:
		return p, strings.TrimSuffix(strings.TrimPrefix(line, "listening on "), "/")
	case <-p.done:
		t.Fatalf("%v exited at start:\n%s", argv, out)
	case <-time.After(90 * time.Second): // a loaded machine starts Python slowly
		t.Fatalf("%v did not start:\n%s", argv, out)
	}
	return nil, ""
}

// Faults the proxy injects into one task's first attempt.
const (
	faultNone      = ""
	faultGone      = "heartbeat-410"      // heartbeats after the first: 410 task_expired
	faultSilence   = "heartbeat-silence"  // heartbeats after the first are never answered
	faultRetry     = "completed-503"      // the first `completed`: 503 RETRY, Retry-After 1
	faultRejected  = "completed-rejected" // `completed`: 500 REJECTED
	faultDuplicate = "deliver-twice"      // the push delivery is sent twice at once
	// The paced-heartbeat scenarios (docs/contract.md §5.7): the first
	// attempt's envelope carries a token of shortTokenTTL (signed with the
	// stack's keys, for the same scope), which expires during the task
	// unless a heartbeat refreshes it; with faultIgnoreHint its answers
	// also lose nextHeartbeatInMs, as an older Servo's would, so the
	// worker heartbeats at its interval.
	faultShortToken = "short-token"
	faultIgnoreHint = "short-token+no-hint"
	callbackPrefix  = "/cb"
	claimPrefix     = "/api"
	deliverPath     = "/deliver"
	devIdentityName = "X-Servo-Dev-Identity"
)

// proxy stands between the contract workers and Servo: push deliveries go
// through it to the worker, claims and callbacks through it to the stack;
// every envelope's callbackBaseUrl is rewritten to it. It injects each
// task's fault (by task key) and counts the callbacks.
type proxy struct {
	srv    *httptest.Server
	stack  string        // the stack's URL
	worker string        // the push worker's URL
	ring   *auth.KeyRing // the stack's task-token keys

	mu      sync.Mutex
	faults  map[string]string // task key → fault
	keys    map[string]string // task id → task key
	calls   map[string][][]byte
	answers map[string][]string // task id → push answers (status result)
	traces  map[string][]string // task id/attempt → the callbacks' traceparents
	// delivered is the traceparent of each attempt's push delivery.
	delivered map[string]string
	// pools are the claims seen per pool.
	pools map[string]*poolClaims
	// cbAnswers are the callbacks' answers as the worker got them, per
	// task id/attempt.
	cbAnswers map[string][]cbAnswer
	// shortTokens are the short tokens handed out, per task id/attempt,
	// and when they expire.
	shortTokens map[string]time.Time
}

// cbAnswer is one callback's answer, as the proxy passed it on.
type cbAnswer struct {
	op     string
	status int
	resp   api.CallbackResponse // before any hint was taken out
	at     time.Time            // when the proxy passed it on
	auth   string               // the request's Authorization
}

// answersOf returns the task's attempt's callback answers.
func (p *proxy) answersOf(id string, attempt int) []cbAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]cbAnswer(nil), p.cbAnswers[fmt.Sprintf("%s/%d", id, attempt)]...)
}

// poolClaims are the claims the proxy has seen for one pool.
type poolClaims struct {
	open      int // claims in flight
	abandoned int // claims whose worker hung up before their answer
	// cutShort counts answers begun (status and headers sent) whose worker
	// hung up before their body: an attempt claimed that way is lost until
	// its lease runs out.
	cutShort int
	claimed  []string // the task ids answered, in order
	// hold, when set, applies to the pool's next claimed answer: its status
	// and headers are sent at once, its body only when release closes.
	hold *heldAnswer
}

type heldAnswer struct {
	held    chan string // the held answer's task id
	release chan struct{}
}

func newProxy(t *testing.T) *proxy {
	p := &proxy{faults: map[string]string{}, keys: map[string]string{}, calls: map[string][][]byte{}, answers: map[string][]string{},
		traces: map[string][]string{}, delivered: map[string]string{}, pools: map[string]*poolClaims{},
		cbAnswers: map[string][]cbAnswer{}, shortTokens: map[string]time.Time{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) fault(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults[p.keys[id]]
}

// count is how many `op` callbacks attempt made for the task, and their bodies.
func (p *proxy) count(id string, attempt int, op string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[fmt.Sprintf("%s/%d/%s", id, attempt, op)]
}

// rewrite records an envelope's task key and points its callbacks here;
// a short-token task's first attempt gets a token of shortTokenTTL.
func (p *proxy) rewrite(env map[string]any) {
	id, _ := env["taskId"].(string)
	key, _ := env["taskKey"].(string)
	attempt, _ := env["attempt"].(float64)
	p.mu.Lock()
	p.keys[id] = key
	short := strings.HasPrefix(p.faults[key], faultShortToken) && attempt == 1
	p.mu.Unlock()
	env["callbackBaseUrl"] = p.srv.URL + callbackPrefix
	if !short {
		return
	}
	str := func(k string) string { v, _ := env[k].(string); return v }
	tok, exp, err := p.ring.Sign(auth.Scope{TenantID: str("tenantId"), WorkspaceID: str("workspaceId"), RunID: str("runId"),
		TaskID: id, Attempt: 1}, shortTokenTTL, time.Now())
	if err != nil {
		panic(err) // a ring the test generated signs
	}
	env["taskToken"], env["tokenExpiresAt"] = tok, exp.UTC().Format(time.RFC3339Nano)
	p.mu.Lock()
	p.shortTokens[id+"/1"] = exp
	p.mu.Unlock()
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.URL.Path == deliverPath:
		p.deliver(w, r, body)
	case strings.HasPrefix(r.URL.Path, claimPrefix+"/"):
		p.claim(w, r, body)
	case strings.HasPrefix(r.URL.Path, callbackPrefix+"/"):
		p.callback(w, r, body)
	default:
		http.NotFound(w, r)
	}
}

func (p *proxy) forward(r *http.Request, url string, body []byte) (int, http.Header, []byte, error) {
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, url, bytes.NewReader(body))
	for _, h := range []string{"Content-Type", "Authorization", "Traceparent", devIdentityName} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, err
}

func reply(w http.ResponseWriter, status int, h http.Header, b []byte) {
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v := h.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(status)
	w.Write(b)
}

func (p *proxy) deliver(w http.ResponseWriter, r *http.Request, body []byte) {
	var env map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.rewrite(env)
	b, _ := json.Marshal(env)
	id, _ := env["taskId"].(string)
	// The delivery's trace, which every callback must continue.
	if r.Header.Get("Traceparent") == "" {
		r.Header.Set("Traceparent", fmt.Sprintf("00-%016x%016x-%016x-01", rand.Uint64(), rand.Uint64(), rand.Uint64()|1))
	}
	attempt, _ := env["attempt"].(float64)
	p.mu.Lock()
	p.delivered[fmt.Sprintf("%s/%d", id, int(attempt))] = r.Header.Get("Traceparent")
	p.mu.Unlock()
	n := 1
	if p.fault(id) == faultDuplicate {
		n = 2
	}
	type res struct {
		status int
		h      http.Header
		b      []byte
		err    error
	}
	out := make(chan res, n)
	for range n {
		go func() {
			s, h, rb, err := p.forward(r, p.worker+"/", b)
			out <- res{s, h, rb, err}
		}()
	}
	var first res
	for i := range n {
		x := <-out
		var a struct{ Result string }
		_ = json.Unmarshal(x.b, &a)
		p.mu.Lock()
		p.answers[id] = append(p.answers[id], fmt.Sprintf("%d %s", x.status, a.Result))
		p.mu.Unlock()
		if i == 0 {
			first = x
		}
	}
	if first.err != nil {
		http.Error(w, first.err.Error(), http.StatusBadGateway)
		return
	}
	reply(w, first.status, first.h, first.b)
}

// poolLocked is pool's record; p.mu is held.
func (p *proxy) poolLocked(pool string) *poolClaims {
	pc := p.pools[pool]
	if pc == nil {
		pc = &poolClaims{}
		p.pools[pool] = pc
	}
	return pc
}

// claims returns a copy of pool's record.
func (p *proxy) claims(pool string) poolClaims {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := *p.poolLocked(pool)
	pc.claimed = append([]string(nil), pc.claimed...)
	return pc
}

// holdNext holds the body of pool's next claimed answer (see poolClaims.hold).
func (p *proxy) holdNext(pool string) *heldAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &heldAnswer{held: make(chan string, 1), release: make(chan struct{})}
	p.poolLocked(pool).hold = h
	return h
}

func (p *proxy) claim(w http.ResponseWriter, r *http.Request, body []byte) {
	// /api/v1/pools/{pool}/claim
	pool := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, claimPrefix+"/v1/pools/"), "/claim")
	p.mu.Lock()
	p.poolLocked(pool).open++
	p.mu.Unlock()
	// Forwarded under the worker's request: a worker that hangs up
	// abandons the claim at the stack too.
	status, h, b, err := p.forward(r, p.stack+strings.TrimPrefix(r.URL.Path, claimPrefix), body)
	p.mu.Lock()
	pc := p.poolLocked(pool)
	pc.open--
	if r.Context().Err() != nil {
		pc.abandoned++
	}
	p.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var cr map[string]any
	var hold *heldAnswer
	if status == http.StatusOK && json.Unmarshal(b, &cr) == nil {
		if env, ok := cr["envelope"].(map[string]any); ok {
			p.rewrite(env)
			b, _ = json.Marshal(cr)
			id, _ := env["taskId"].(string)
			p.mu.Lock()
			pc.claimed = append(pc.claimed, id)
			hold, pc.hold = pc.hold, nil
			p.mu.Unlock()
			if hold != nil {
				hold.held <- id
			}
		}
	}
	if hold == nil {
		reply(w, status, h, b)
		return
	}
	// The answer begins now; its body (the envelope) comes on release.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.(http.Flusher).Flush()
	select {
	case <-hold.release:
		w.Write(b)
	case <-r.Context().Done():
		p.mu.Lock()
		pc.cutShort++
		p.mu.Unlock()
	}
}

func (p *proxy) callback(w http.ResponseWriter, r *http.Request, body []byte) {
	path := strings.TrimPrefix(r.URL.Path, callbackPrefix)
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) != 4 {
		http.NotFound(w, r)
		return
	}
	id, op := parts[2], parts[3]
	var a struct{ Attempt int }
	_ = json.Unmarshal(body, &a)
	k := fmt.Sprintf("%s/%d/%s", id, a.Attempt, op)
	p.mu.Lock()
	p.calls[k] = append(p.calls[k], body)
	n := len(p.calls[k])
	p.traces[fmt.Sprintf("%s/%d", id, a.Attempt)] = append(p.traces[fmt.Sprintf("%s/%d", id, a.Attempt)], r.Header.Get("Traceparent"))
	p.mu.Unlock()
	if a.Attempt == 1 {
		servo := func(status int, code string, d api.Disposition) {
			w.Header().Set("Content-Type", "application/json")
			if d == api.Retry {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(api.CallbackResponse{Disposition: d, Error: code, Message: code + " (injected by the contract test's proxy)"})
		}
		switch f := p.fault(id); {
		case f == faultGone && op == "heartbeat" && n > 1:
			servo(http.StatusGone, "task_expired", api.Cancel)
			return
		case f == faultSilence && op == "heartbeat" && n > 1:
			<-r.Context().Done()
			return
		case f == faultRetry && op == "completed" && n == 1:
			servo(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
			return
		case f == faultRejected && op == "completed":
			servo(http.StatusInternalServerError, "internal", api.Rejected)
			return
		}
	}
	status, h, b, err := p.forward(r, p.stack+path, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var resp api.CallbackResponse
	_ = json.Unmarshal(b, &resp)
	if a.Attempt == 1 && p.fault(id) == faultIgnoreHint {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			delete(m, "nextHeartbeatInMs")
			b, _ = json.Marshal(m)
		}
	}
	p.mu.Lock()
	ak := fmt.Sprintf("%s/%d", id, a.Attempt)
	p.cbAnswers[ak] = append(p.cbAnswers[ak], cbAnswer{op: op, status: status, resp: resp, at: time.Now(), auth: r.Header.Get("Authorization")})
	p.mu.Unlock()
	reply(w, status, h, b)
}

// env is one SDK's stack, proxy and workers.
type env struct {
	t     *testing.T
	stack *devstack.Stack
	proxy *proxy
	out   *servotest.Buffer
}

// api is t's client of the stack's API: the scenarios share e and run in
// parallel.
func (e *env) api(t *testing.T) stacktest.API { return stacktest.NewAPI(t, e.stack) }

func (e *env) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	return e.api(t).Do(method, path, body)
}

// submit posts a task for worker with fast timers; fault is injected into
// its first attempt.
func (e *env) submit(t *testing.T, worker, key, fault string, payload map[string]any) string {
	t.Helper()
	return e.submitTimed(t, worker, key, fault, payload, nil)
}

// fastTimers are the timers of most scenarios.
var fastTimers = map[string]any{"heartbeatIntervalMs": 300, "heartbeatTimeoutMs": 3000, "cancelGracePeriodMs": 5000}

// submitTimed is submit with the task's heartbeatIntervalMs,
// heartbeatTimeoutMs and cancelGracePeriodMs (nil: fastTimers).
func (e *env) submitTimed(t *testing.T, worker, key, fault string, payload map[string]any, timers map[string]any) string {
	t.Helper()
	e.proxy.mu.Lock()
	e.proxy.faults[key] = fault
	e.proxy.mu.Unlock()
	if timers == nil {
		timers = fastTimers
	}
	body := map[string]any{
		"tenantId": "acme", "workspaceId": "ws", "taskKey": key, "worker": worker, "payload": payload,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}
	for k, v := range timers {
		body[k] = v
	}
	return e.api(t).Submit(body).TaskID
}

func (e *env) get(t *testing.T, id string) api.Task {
	t.Helper()
	return e.api(t).Task(id)
}

func (e *env) waitFor(t *testing.T, id, what string, ok func(api.Task) bool) api.Task {
	t.Helper()
	return e.api(t).WaitFor(id, what, ok)
}

func (e *env) waitState(t *testing.T, id string, s api.State) api.Task {
	t.Helper()
	return e.api(t).WaitState(id, s)
}

// runs counts the contract workers' "RUN id attempt" lines: handler calls.
func (e *env) runs(id string, attempt int) int {
	return strings.Count(e.out.String(), fmt.Sprintf("RUN %s %d\n", id, attempt))
}

// ranAny counts out's handler calls for the task, any attempt.
func ranAny(out *servotest.Buffer, id string) int {
	return strings.Count(out.String(), fmt.Sprintf("RUN %s ", id))
}

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$`)

// checkTraces: every callback of the task's attempts carried a W3C
// traceparent (when must), continuing the push delivery's trace.
func (e *env) checkTraces(t *testing.T, id string, attempts int, must bool) {
	t.Helper()
	for a := 1; a <= attempts; a++ {
		k := fmt.Sprintf("%s/%d", id, a)
		e.proxy.mu.Lock()
		traces, delivered := append([]string(nil), e.proxy.traces[k]...), e.proxy.delivered[k]
		e.proxy.mu.Unlock()
		if len(traces) == 0 {
			t.Fatalf("no callbacks recorded for attempt %d of task %s", a, id)
		}
		want := ""
		if m := traceparentRE.FindStringSubmatch(delivered); m != nil {
			want = m[1]
		}
		for i, tp := range traces {
			m := traceparentRE.FindStringSubmatch(tp)
			switch {
			case m == nil && !must && tp == "":
			case m == nil:
				t.Fatalf("attempt %d: callback %d of %d carried traceparent %q, want a W3C traceparent", a, i+1, len(traces), tp)
			case want != "" && m[1] != want:
				t.Fatalf("attempt %d: callback %d carried trace %s, want the delivery's %s", a, i+1, m[1], want)
			}
		}
	}
}

type output struct {
	Attempt     int `json:"attempt"`
	ResumedFrom int `json:"resumedFrom"`
	Processed   int `json:"processed"`
}

func outputOf(t *testing.T, a api.Attempt) output {
	t.Helper()
	return stacktest.AttemptOutput[output](t, a)
}

func checkpointed(v api.Task) bool {
	return v.State == api.Running && len(v.Attempts) > 0 && len(v.Attempts[len(v.Attempts)-1].Checkpoint) > 0
}

// scenario is one row of the contract.
type scenario struct {
	name  string
	modes []string // push, pull, job
	fault string
	// payload of the contract worker: steps, stepMs, failAttempts (with
	// failCategory, default INFRASTRUCTURE), crashAttempts.
	payload map[string]any
	// timers: the task's heartbeat interval, timeout and cancel grace
	// (nil: fastTimers).
	timers map[string]any
	// pool: the pull pool of its pull mode ("": pool).
	pool  string
	check func(t *testing.T, e *env, mode, id string)
}

// succeededAfterLostFirst: attempt 1 lost its lease and reported nothing;
// Servo's lease expiry retried it and attempt 2 succeeded.
func succeededAfterLostFirst(t *testing.T, e *env, _ string, id string) {
	v := e.waitState(t, id, api.Succeeded)
	if len(v.Attempts) != 2 || v.Attempts[1].Outcome != api.OutcomeSucceeded {
		t.Fatalf("want attempt 1 expired and attempt 2 succeeded: %s", stacktest.Attempts(v))
	}
	if n := len(e.proxy.count(id, 1, "completed")); n != 0 {
		t.Fatalf("attempt 1 reported `completed` %d times after losing its lease", n)
	}
}

var scenarios = []scenario{
	{name: "happy path", modes: []string{"push", "pull", "job"}, payload: map[string]any{"steps": 4, "stepMs": 20},
		check: func(t *testing.T, e *env, _ string, id string) {
			v := e.waitState(t, id, api.Succeeded)
			if len(v.Attempts) != 1 || outputOf(t, v.Attempts[0]) != (output{Attempt: 1, Processed: 4}) {
				t.Fatalf("attempts %s", stacktest.Attempts(v))
			}
		}},
	{name: "retry with checkpoint", modes: []string{"push", "pull", "job"}, payload: map[string]any{"steps": 6, "stepMs": 20, "failAttempts": 1},
		check: func(t *testing.T, e *env, _ string, id string) {
			v := e.waitState(t, id, api.Succeeded)
			if len(v.Attempts) != 2 || v.Attempts[0].Error == nil || v.Attempts[0].Error.Category != api.CategoryInfrastructure {
				t.Fatalf("attempts %s", stacktest.Attempts(v))
			}
			if string(v.Attempts[0].Checkpoint) != `{"next":3}` {
				t.Fatalf("attempt 1 checkpoint %s, want {\"next\":3} (flushed before completed)", v.Attempts[0].Checkpoint)
			}
			if o := outputOf(t, v.Attempts[1]); o != (output{Attempt: 2, ResumedFrom: 3, Processed: 3}) {
				t.Fatalf("attempt 2 did not resume from the checkpoint: %+v", o)
			}
		}},
	{name: "cancel", modes: []string{"push", "pull", "job"}, payload: map[string]any{"steps": 600, "stepMs": 100},
		check: func(t *testing.T, e *env, _ string, id string) {
			e.waitFor(t, id, "a stored checkpoint", checkpointed)
			if status, out := e.do(t, "POST", "/v1/tasks/"+id+"/cancel", map[string]any{"reason": "user_requested"}); status != http.StatusOK {
				t.Fatalf("cancel: %d %s", status, out)
			}
			v := e.waitState(t, id, api.Cancelled)
			a := v.Attempts[len(v.Attempts)-1]
			if len(v.Attempts) != 1 || a.Outcome != api.OutcomeCancelled || a.CancelledDuringPhase != "processing" || !bytes.Contains(a.PartialProgress, []byte("next")) {
				t.Fatalf("attempts %s phase %q partial %s", stacktest.Attempts(v), a.CancelledDuringPhase, a.PartialProgress)
			}
		}},
	{name: "lease lost by 410", modes: []string{"push", "pull"}, fault: faultGone, payload: map[string]any{"steps": 40, "stepMs": 100},
		check: succeededAfterLostFirst},
	{name: "lease lost by silence", modes: []string{"push", "pull"}, fault: faultSilence, payload: map[string]any{"steps": 40, "stepMs": 100},
		check: succeededAfterLostFirst},
	{name: "503 RETRY then success", modes: []string{"push", "pull"}, fault: faultRetry, payload: map[string]any{"steps": 2, "stepMs": 20},
		check: func(t *testing.T, e *env, _ string, id string) {
			v := e.waitState(t, id, api.Succeeded)
			calls := e.proxy.count(id, 1, "completed")
			if len(v.Attempts) != 1 || len(calls) != 2 || !bytes.Equal(calls[0], calls[1]) {
				t.Fatalf("attempts %s; %d completed calls (want 2 with the same body): %q", stacktest.Attempts(v), len(calls), calls)
			}
		}},
	{name: "REJECTED final", modes: []string{"push", "pull"}, fault: faultRejected, payload: map[string]any{"steps": 2, "stepMs": 20},
		check: func(t *testing.T, e *env, _ string, id string) {
			// Attempt 1's `completed` is refused for good: never sent
			// again; the lease runs out and attempt 2 succeeds.
			v := e.waitState(t, id, api.Succeeded)
			if n := len(e.proxy.count(id, 1, "completed")); len(v.Attempts) != 2 || n != 1 {
				t.Fatalf("attempts %s; attempt 1 sent `completed` %d times (want 1: REJECTED is final)", stacktest.Attempts(v), n)
			}
		}},
	{name: "duplicate delivery", modes: []string{"push"}, fault: faultDuplicate, payload: map[string]any{"steps": 10, "stepMs": 50},
		check: func(t *testing.T, e *env, _ string, id string) {
			v := e.waitState(t, id, api.Succeeded)
			// The worker answers each delivery once its `completed` is
			// committed: the task can read SUCCEEDED before the answers
			// are back through the proxy.
			var answers []string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				e.proxy.mu.Lock()
				answers = append([]string(nil), e.proxy.answers[id]...)
				e.proxy.mu.Unlock()
				if len(answers) >= 2 || time.Now().After(deadline) {
					break
				}
			}
			if len(v.Attempts) != 1 || e.runs(id, 1) != 1 || len(answers) != 2 || answers[0] != "200 committed" || answers[1] != answers[0] {
				t.Fatalf("attempts %s; %d handler runs of attempt 1 (want 1); answers %q (want two 200 committed)", stacktest.Attempts(v), e.runs(id, 1), answers)
			}
		}},
	{name: "job crash", modes: []string{"job"}, payload: map[string]any{"steps": 8, "stepMs": 50, "crashAttempts": 1},
		check: func(t *testing.T, e *env, _ string, id string) {
			v := e.waitState(t, id, api.Succeeded)
			if len(v.Attempts) != 2 || v.Attempts[0].Outcome == api.OutcomeSucceeded {
				t.Fatalf("attempts %s", stacktest.Attempts(v))
			}
			if o := outputOf(t, v.Attempts[1]); o.Attempt != 2 || o.ResumedFrom == 0 || o.ResumedFrom+o.Processed != 8 {
				t.Fatalf("attempt 2 did not resume from the crashed attempt's checkpoint: %+v", o)
			}
		}},
}

// TestSDKContract runs the scenario table for every SDK in every mode it
// supports, against the real local stack.
func TestSDKContract(t *testing.T) {
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel() // each SDK has its own stack, project and workers
			argv := s.argv(t)
			out := &servotest.Buffer{}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("%s contract workers' output (tail):\n%s", s.name, tail(out.String(), 150))
				}
			})
			px := newProxy(t)
			ring, _, err := auth.GenerateKeyRing("k1")
			if err != nil {
				t.Fatal(err)
			}
			px.ring = ring
			_, px.worker = start(t, argv, out, true, "push", "0")
			s2 := stacktest.Start(t, devstack.Options{
				SweepEvery: 200 * time.Millisecond, Workers: map[string]string{"push": px.srv.URL + deliverPath},
				PullPools:  map[string][]string{"pool": nil, stopPool: nil, stopRacePool: nil, pacedPool: nil},
				JobWorkers: map[string]string{"job": strings.Join(argv, " ") + " job"},
				Keys:       ring,
			})
			px.stack = s2.URL
			e := &env{t: t, stack: s2, proxy: px, out: out}
			// Two pull workers on the same pool: every pull scenario is also
			// a claim race.
			start(t, argv, out, false, "pull", px.srv.URL+claimPrefix, "pool")
			start(t, argv, out, false, "pull", px.srv.URL+claimPrefix, "pool")
			// The paced scenarios' long tasks have a pool of their own, so
			// that they hold none of the other scenarios' claim slots.
			start(t, argv, out, false, "pull", px.srv.URL+claimPrefix, pacedPool)
			start(t, argv, out, false, "pull", px.srv.URL+claimPrefix, pacedPool)
			workers := map[string]string{"push": "push", "pull": "pool", "job": "job"}
			t.Run("scenarios", func(t *testing.T) {
				for i, sc := range scenarios {
					for _, mode := range sc.modes {
						t.Run(sc.name+"/"+mode, func(t *testing.T) {
							t.Parallel()
							w := workers[mode]
							if mode == "pull" && sc.pool != "" {
								w = sc.pool
							}
							id := e.submitTimed(t, w, fmt.Sprintf("%s-%s-%d", s.name, mode, i), sc.fault, sc.payload, sc.timers)
							sc.check(t, e, mode, id)
							if mode != "job" { // job callbacks go to the stack directly
								e.checkTraces(t, id, len(e.get(t, id).Attempts), mode == "push" || s.newTrace)
							}
						})
					}
				}
				t.Run("SIGTERM with a claim open/pull", func(t *testing.T) {
					t.Parallel()
					sigtermOpenClaim(t, e, argv, s.name)
				})
				t.Run("SIGTERM with a claim answered/pull", func(t *testing.T) {
					t.Parallel()
					sigtermClaimAnswered(t, e, argv, s.name)
				})
				t.Run("pull claim race/pull", func(t *testing.T) {
					t.Parallel()
					var ids []string
					for i := range 8 {
						ids = append(ids, e.submit(t, "pool", fmt.Sprintf("%s-race-%d", s.name, i), faultNone, map[string]any{"steps": 2, "stepMs": 50}))
					}
					for _, id := range ids {
						v := e.waitState(t, id, api.Succeeded)
						if len(v.Attempts) != 1 || e.runs(id, 1) != 1 {
							t.Fatalf("task %s: attempts %s, %d handler runs (want 1 each)", id, stacktest.Attempts(v), e.runs(id, 1))
						}
					}
				})
			})
		})
	}
}

// TestJobWithoutEnvelopeExitsNonZero: a job worker started without an
// envelope exits 1 (worker.RunJob's ErrNoEnvelope), in every SDK.
func TestJobWithoutEnvelopeExitsNonZero(t *testing.T) {
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			argv := s.argv(t)
			cmd := exec.Command(argv[0], append(argv[1:], "job")...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, api.EnvelopeEnv+"=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1:\n%s", err, out)
			}
		})
	}
}

// SIGTERM scenarios (docs/contract.md §10, §14): a pull worker told to
// stop starts no attempt it cannot finish. Each runs its own workers on a
// pool of its own, the first with a long-poll (30 s) that would still be
// open when the task comes.
const (
	stopPool     = "stop"      // the claim open at SIGTERM
	stopRacePool = "stop-race" // a claim answered as SIGTERM comes
	stopLongPoll = "30000"     // the first worker's maxWaitMs
	stopGrace    = "30000"     // its grace period, ms
)

// worker is one contract worker process of a SIGTERM scenario, with its
// own output.
type worker struct {
	name string
	p    *proc
	out  *servotest.Buffer
}

func startWorker(t *testing.T, argv []string, name string, args ...string) *worker {
	t.Helper()
	w := &worker{name: name, out: &servotest.Buffer{}}
	w.p, _ = start(t, argv, w.out, false, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's output (tail):\n%s", name, tail(w.out.String(), 80))
		}
	})
	return w
}

func (w *worker) sigterm(t *testing.T) {
	t.Helper()
	if err := w.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to %s: %v", w.name, err)
	}
}

// exited waits (generously) for the worker to exit after SIGTERM, and
// wants exit status 0.
func (w *worker) exited(t *testing.T, within time.Duration, why string) {
	t.Helper()
	select {
	case <-w.p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %s of SIGTERM (%s)", w.name, within, why)
	}
	if code := w.p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited with status %d after SIGTERM, want 0", w.name, code)
	}
}

// eventually polls ok for up to within; it reports whether ok held.
func eventually(within time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// neverLeaseLost: no attempt of v ended by its lease or a timer.
func neverLeaseLost(t *testing.T, v api.Task) {
	t.Helper()
	for _, a := range v.Attempts {
		switch a.Outcome {
		case api.OutcomeZombie, api.OutcomeTimedOut, api.OutcomeCancelTimeout:
			t.Errorf("attempt %d ended %s (waited out a timer): %s", a.Attempt, a.Outcome, stacktest.Attempts(v))
		}
	}
}

// sigtermOpenClaim: SIGTERM reaches a worker with one attempt running and a
// long-poll claim open on an empty pool; then a task is submitted while
// that claim would still be open. The claim is abandoned (the worker hangs
// up at once), the running attempt finishes within the grace period, the
// worker exits, and the new task is never claimed by it: a second worker
// starts it (its first and only attempt) and it succeeds.
func sigtermOpenClaim(t *testing.T, e *env, argv []string, sdkName string) {
	url := e.proxy.srv.URL + claimPrefix
	w1 := startWorker(t, argv, "the stopping worker", "pull", url, stopPool, stopLongPoll, stopGrace)
	// About 6 s of work, well within the 30 s grace period.
	running := e.submit(t, stopPool, sdkName+"-sigterm-running", faultNone, map[string]any{"steps": 60, "stepMs": 100})
	e.waitFor(t, running, "the attempt running (a stored checkpoint)", checkpointed)
	if !eventually(60*time.Second, func() bool { return e.proxy.claims(stopPool).open == 1 }) {
		t.Fatalf("the worker has no claim open beside its running attempt: %+v", e.proxy.claims(stopPool))
	}
	w1.sigterm(t)
	if !eventually(30*time.Second, func() bool { return strings.Contains(w1.out.String(), "STOPPING\n") }) {
		t.Fatal("the worker did not take SIGTERM")
	}
	// The open claim is abandoned at once: the worker hangs up (and so the
	// proxy, to the stack) while its running attempt still has seconds to
	// go, not when the grace period or the long-poll (30 s each) ends.
	if !eventually(15*time.Second, func() bool { c := e.proxy.claims(stopPool); return c.open == 0 && c.abandoned == 1 }) {
		t.Errorf("the claim open at SIGTERM was not abandoned within 15 s: %+v", e.proxy.claims(stopPool))
	} else if n := len(e.proxy.count(running, 1, "completed")); n != 0 {
		t.Errorf("the claim open at SIGTERM was abandoned only after the running attempt ended, not at once")
	}
	queued := e.submit(t, stopPool, sdkName+"-sigterm-queued", faultNone, map[string]any{"steps": 2, "stepMs": 20})
	// The worker exits once its running attempt is settled.
	w1.exited(t, 90*time.Second, "its running attempt needed some 6 s")

	v := e.waitState(t, running, api.Succeeded)
	if len(v.Attempts) != 1 || ranAny(w1.out, running) != 1 {
		t.Errorf("the attempt running at SIGTERM: attempts %s, %d handler runs (want one attempt, run once, finished within the grace period)",
			stacktest.Attempts(v), ranAny(w1.out, running))
	}
	if n := ranAny(w1.out, queued); n != 0 {
		t.Errorf("the stopping worker ran the handler of a task submitted after SIGTERM (%d times)", n)
	}
	if c := e.proxy.claims(stopPool); len(c.claimed) != 1 || c.claimed[0] != running {
		t.Errorf("the stopping worker claimed %v, want only the task running at SIGTERM (%s)", c.claimed, running)
	}
	if v := e.get(t, queued); v.State != api.Queued || len(v.Attempts) != 1 || v.Attempts[0].StartedAt != nil {
		t.Errorf("the task submitted after SIGTERM is %s with attempts %s, want QUEUED and never started", v.State, stacktest.Attempts(v))
	}

	// Another worker starts it at once: no lease or timer to wait out.
	w2 := startWorker(t, argv, "the second worker", "pull", url, stopPool)
	v = e.waitState(t, queued, api.Succeeded)
	neverLeaseLost(t, v)
	if len(v.Attempts) != 1 || v.Attempts[0].Outcome != api.OutcomeSucceeded || ranAny(w2.out, queued) != 1 {
		t.Errorf("the task submitted after SIGTERM: attempts %s, %d handler runs on the second worker (want its one attempt run there)",
			stacktest.Attempts(v), ranAny(w2.out, queued))
	}
}

// sigtermClaimAnswered: a claim's answer has begun (status and headers
// sent; the proxy holds the envelope) when SIGTERM comes. The worker reads
// it rather than lose it and hands the attempt back without running the
// handler: FAILED/INFRASTRUCTURE, retryable, so Servo schedules its retry
// at once (after the retry backoff, 100-200 ms here), and a second worker
// runs attempt 2. No lease is waited out.
func sigtermClaimAnswered(t *testing.T, e *env, argv []string, sdkName string) {
	url := e.proxy.srv.URL + claimPrefix
	hold := e.proxy.holdNext(stopRacePool)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold.release)
		}
	}
	t.Cleanup(release)
	w1 := startWorker(t, argv, "the stopping worker", "pull", url, stopRacePool, stopLongPoll, stopGrace)
	if !eventually(90*time.Second, func() bool { return e.proxy.claims(stopRacePool).open == 1 }) {
		t.Fatalf("the worker opened no claim: %+v", e.proxy.claims(stopRacePool))
	}
	// The claimed attempt sends no heartbeat while its answer is held and
	// the worker stops: a heartbeat timeout well beyond that hold (some
	// 3 s, more on a loaded machine) keeps the sweeper out of the race.
	id := e.submitTimed(t, stopRacePool, sdkName+"-sigterm-answered", faultNone, map[string]any{"steps": 2, "stepMs": 20},
		map[string]any{"heartbeatIntervalMs": 300, "heartbeatTimeoutMs": 30000, "cancelGracePeriodMs": 5000})
	select {
	case got := <-hold.held:
		if got != id {
			t.Fatalf("held the answer for %s, want %s", got, id)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the worker's claim was never answered with the task: %+v", e.proxy.claims(stopRacePool))
	}
	// The answer's status and headers are flushed; the worker reads them
	// at once (a generous margin: a stop before it has read them abandons
	// the claim, which would lose the attempt until its lease runs out).
	time.Sleep(2 * time.Second)
	w1.sigterm(t)
	if !eventually(30*time.Second, func() bool { return strings.Contains(w1.out.String(), "STOPPING\n") }) {
		t.Fatal("the worker did not take SIGTERM")
	}
	release()
	w1.exited(t, 60*time.Second, "it had no attempt to run")
	if n := ranAny(w1.out, id); n != 0 {
		t.Errorf("the stopping worker ran the handler of an attempt claimed as SIGTERM came (%d times)", n)
	}
	if c := e.proxy.claims(stopRacePool); c.cutShort != 0 {
		t.Errorf("the worker hung up on a claim answer that had begun (%d times): its attempt waits for its lease", c.cutShort)
	}
	v := e.waitFor(t, id, "attempt 1 reported", func(v api.Task) bool { return len(v.Attempts) > 0 && v.Attempts[0].Outcome != "" })
	if a := v.Attempts[0]; a.Outcome != api.OutcomeFailed || a.Error == nil || a.Error.Category != api.CategoryInfrastructure {
		t.Errorf("attempt 1, claimed as the worker stopped, ended %s (%+v); want FAILED/INFRASTRUCTURE, handed back unstarted: %s",
			a.Outcome, a.Error, stacktest.Attempts(v))
	}

	w2 := startWorker(t, argv, "the second worker", "pull", url, stopRacePool)
	v = e.waitState(t, id, api.Succeeded)
	neverLeaseLost(t, v)
	if len(v.Attempts) != 2 || v.Attempts[1].Outcome != api.OutcomeSucceeded || runsOn(w2, id, 2) != 1 {
		t.Errorf("attempts %s, %d handler runs of attempt 2 on the second worker (want attempt 2 run there and succeeded)",
			stacktest.Attempts(v), runsOn(w2, id, 2))
	}
}

// runsOn counts w's handler calls for the task's attempt.
func runsOn(w *worker, id string, attempt int) int {
	return strings.Count(w.out.String(), fmt.Sprintf("RUN %s %d\n", id, attempt))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
