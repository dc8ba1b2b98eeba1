package pull_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/worker"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// sharedPools are the pools of the stack most tests share, one pool per
// test (a stack takes seconds to start on a loaded machine).
var sharedPools = map[string][]string{
	"succeed": nil, "empty": nil, "concurrent": nil, "duplicate": nil, "cancel": nil, "zombie": nil, "delayed": nil,
	"sdk": nil, "grace": nil, "bench": nil, "left": nil, "urgent": nil, "bulk": nil,
	"pool-a": {"a@servo-test.iam.gserviceaccount.com"}, "pool-b": {"b@servo-test.iam.gserviceaccount.com"},
}

var shared struct {
	once  sync.Once
	stack *devstack.Stack
	err   error
}

// sharedEnv returns the shared stack (started on first use; it lives as
// long as the test binary).
func sharedEnv(t testing.TB) *env {
	t.Helper()
	shared.once.Do(func() {
		shared.stack, shared.err = devstack.Start(context.Background(), devstack.Options{
			Addr: "127.0.0.1:0", Project: "servo-pull-shared", ReuseEmulators: true,
			WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
			SweepEvery:  100 * time.Millisecond, PullPools: sharedPools,
		})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return &env{API: stacktest.NewAPI(t, shared.stack), stack: shared.stack}
}

// env is one test's local stack with pull pools, and the test's client of
// its API.
type env struct {
	stacktest.API
	stack *devstack.Stack
}

// start runs a stack whose pull pools are pools (name → allowed callers).
func start(t *testing.T, pools map[string][]string, opts ...func(*devstack.Options)) *env {
	t.Helper()
	o := devstack.Options{
		SweepEvery: 100 * time.Millisecond, PullPools: pools,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := stacktest.Start(t, o)
	return &env{API: stacktest.NewAPI(t, s), stack: s}
}

// do is servotest.Do on the stack's path, with the answer's header.
func (e *env) do(method, path string, body any, header ...string) (int, http.Header, []byte) {
	e.T.Helper()
	r := servotest.Do(e.T, method, e.URL+path, body, header...)
	return r.Status, r.Header, r.Body
}

// submit submits a task to pool with fast timers.
func (e *env) submit(pool string, extra map[string]any) api.SubmitResponse {
	e.T.Helper()
	body := map[string]any{
		"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": pool, "payload": map[string]any{"partitions": 2, "partitionMs": 20},
		"heartbeatIntervalMs": 500, "heartbeatTimeoutMs": 5000, "cancelGracePeriodMs": 300,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}
	for k, v := range extra {
		body[k] = v
	}
	return e.Submit(body)
}

// claim posts one claim as identity (none when "").
func (e *env) claim(pool, identity, workerID string, maxWaitMs int) (int, api.ClaimResponse) {
	e.T.Helper()
	var h []string
	if identity != "" {
		h = []string{pull.DevIdentityHeader, identity}
	}
	status, _, out := e.do("POST", "/v1/pools/"+pool+"/claim", map[string]any{"workerId": workerID, "maxWaitMs": maxWaitMs}, h...)
	var r api.ClaimResponse
	if err := json.Unmarshal(out, &r); err != nil {
		e.T.Fatalf("claim answer %d is not JSON: %s", status, out)
	}
	return status, r
}

// claimUntil claims until an attempt is claimed, or fails the test.
func (e *env) claimUntil(pool, identity, workerID string) api.Envelope {
	e.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		status, r := e.claim(pool, identity, workerID, 2000)
		if status == http.StatusServiceUnavailable && r.Disposition == api.Retry {
			time.Sleep(pull.RetryAfter) // Pub/Sub or Firestore hiccup (or a reconnect): retry, as workers do
			continue
		}
		if status != http.StatusOK {
			e.T.Fatalf("claim: %d %+v", status, r)
		}
		if r.Claimed {
			return *r.Envelope
		}
	}
	e.T.Fatalf("nothing claimed from %s", pool)
	return api.Envelope{}
}

// callback posts a worker callback with the envelope's token.
func (e *env) callback(en api.Envelope, kind string, body any) (int, api.CallbackResponse) {
	e.T.Helper()
	return stacktest.Callback(e.T, en, kind, body)
}

// switchable is a TCP proxy in front of an emulator that can be taken down
// (every connection refused and the open ones cut) and brought back.
type switchable struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newSwitchable(t *testing.T, target string) *switchable {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchable{lis: lis, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { lis.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *switchable) addr() string { return p.lis.Addr().String() }

func (p *switchable) serve(c net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

func (p *switchable) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}
