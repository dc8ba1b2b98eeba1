package pull_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/worker"
)

// A worker that claims, stores a checkpoint and goes silent loses its
// lease; the sweeper retries the task into the pool as attempt 2 with the
// checkpoint as resumeFrom, and another worker claims it.
func TestSilentWorkerRetriedIntoPool(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const pool = "zombie"
	sub := e.submit(pool, map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 8000})
	first := e.claimUntil(pool, "", "silent")
	if first.TaskID != sub.TaskID || first.Attempt != 1 {
		t.Fatalf("first claim %+v", first)
	}
	hb := api.HeartbeatRequest{Attempt: 1, WorkerID: "silent", Checkpoint: json.RawMessage(`{"next":7}`)}
	if status, r := e.callback(first, "heartbeat", hb); status != http.StatusOK {
		t.Fatalf("heartbeat: %d %+v", status, r)
	}
	second := e.claimUntil(pool, "", "rescuer")
	if second.TaskID != sub.TaskID || second.Attempt != 2 || string(second.ResumeFrom) != `{"next":7}` || second.TaskToken == first.TaskToken {
		t.Fatalf("second claim: attempt %d resumeFrom %s", second.Attempt, second.ResumeFrom)
	}
	v := e.Task(sub.TaskID)
	if v.State != api.Running || len(v.Attempts) != 2 || v.Attempts[0].Outcome != api.OutcomeZombie || v.Attempts[1].WorkerID != "rescuer" {
		t.Fatalf("task %s %+v", v.State, v.Attempts)
	}
	// The silent worker's late report is refused.
	if status, r := e.callback(first, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "silent", Outcome: api.OutcomeSucceeded}); status != http.StatusConflict || r.Error != api.CodeAttemptMismatch {
		t.Fatalf("late completed: %d %+v", status, r)
	}
	if status, r := e.callback(second, "completed", api.CompletedRequest{Attempt: 2, WorkerID: "rescuer", Outcome: api.OutcomeSucceeded}); status != http.StatusOK || r.FinalState != api.Succeeded {
		t.Fatalf("completed: %d %+v", status, r)
	}
}

// Claims are refused precisely, and nothing is claimed by a refused one:
// unknown pool, a push worker's name, a caller not allowed for the pool
// (pool A's account claiming from pool B), no identity, a bad body.
func TestClaimErrors(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const a, b = "a@servo-test.iam.gserviceaccount.com", "b@servo-test.iam.gserviceaccount.com"
	sub := e.submit("pool-b", nil)
	cases := []struct {
		name, pool, identity string
		body                 any
		ctype                string
		status               int
		code, field          string
	}{
		{"unknown pool", "nope", a, map[string]any{"workerId": "w"}, "", 403, api.CodePermissionDenied, ""},
		{"push worker", devstack.ExampleWorker, a, map[string]any{"workerId": "w"}, "", 403, api.CodePermissionDenied, ""},
		{"unknown pool, bad body", "nope", a, []byte(`{`), "", 403, api.CodePermissionDenied, ""},
		{"pool A's account on pool B", "pool-b", a, map[string]any{"workerId": "w", "maxWaitMs": 0}, "", 403, api.CodePermissionDenied, ""},
		{"no identity", "pool-b", "", map[string]any{"workerId": "w", "maxWaitMs": 0}, "", 401, api.CodeUnauthenticated, ""},
		{"no worker id", "pool-b", b, map[string]any{"maxWaitMs": 0}, "", 400, api.CodeInvalidRequest, "workerId"},
		{"wait too long", "pool-b", b, map[string]any{"workerId": "w", "maxWaitMs": 60001}, "", 400, api.CodeInvalidRequest, "maxWaitMs"},
		{"negative wait", "pool-b", b, map[string]any{"workerId": "w", "maxWaitMs": -1}, "", 400, api.CodeInvalidRequest, "maxWaitMs"},
		{"wait not a number", "pool-b", b, []byte(`{"workerId":"w","maxWaitMs":"soon"}`), "", 400, api.CodeInvalidRequest, "maxWaitMs"},
		{"unknown field", "pool-b", b, map[string]any{"workerId": "w", "streams": []string{"x"}}, "", 400, api.CodeInvalidRequest, "streams"},
		{"not JSON", "pool-b", b, []byte(`{`), "", 400, api.CodeInvalidRequest, ""},
		{"data after the JSON", "pool-b", b, []byte(`{"workerId":"w","maxWaitMs":0} {"workerId":"x"}`), "", 400, api.CodeInvalidRequest, ""},
		{"garbage after the JSON", "pool-b", b, []byte(`{"workerId":"w","maxWaitMs":0}x`), "", 400, api.CodeInvalidRequest, ""},
		{"control character in worker id", "pool-b", b, []byte(`{"workerId":"w\u001b[2Jx","maxWaitMs":0}`), "", 400, api.CodeInvalidRequest, "workerId"},
		{"newline in worker id", "pool-b", b, []byte(`{"workerId":"w\nforged log line","maxWaitMs":0}`), "", 400, api.CodeInvalidRequest, "workerId"},
		{"text body", "pool-b", b, []byte(`workerId=w`), "text/plain", 415, api.CodeUnsupportedMediaType, ""},
		{"too large", "pool-b", b, []byte(`{"workerId":"` + string(make([]byte, 8<<10)) + `"}`), "", 413, api.CodePayloadTooLarge, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := []string{}
			if c.identity != "" {
				h = append(h, "X-Servo-Dev-Identity", c.identity)
			}
			if c.ctype != "" {
				h = append(h, "Content-Type", c.ctype)
			}
			status, _, out := e.do("POST", "/v1/pools/"+c.pool+"/claim", c.body, h...)
			var r api.ClaimResponse
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("%d %s", status, out)
			}
			if status != c.status || r.Error != c.code || r.Field != c.field || r.Disposition != api.Rejected || r.Claimed {
				t.Fatalf("got %d %+v, want %d %s field %q", status, r, c.status, c.code, c.field)
			}
		})
	}
	if v := e.Task(sub.TaskID); v.State != api.Queued {
		t.Fatalf("a refused claim changed the task: %s", v.State)
	}
	// Pool B's own account claims it.
	if en := e.claimUntil("pool-b", b, "w-b"); en.TaskID != sub.TaskID {
		t.Fatalf("claimed %s", en.TaskID)
	}
}

// With Pub/Sub unavailable a claim answers 503 RETRY with Retry-After, and
// a task submitted meanwhile is not lost: it stays PENDING, and once
// Pub/Sub is back the sweeper re-drives it into the pool and it is claimed.
func TestPubSubUnavailable(t *testing.T) {
	t.Parallel()
	proxy := newSwitchable(t, os.Getenv("PUBSUB_EMULATOR_HOST"))
	e := start(t, map[string][]string{"gpu": nil}, func(o *devstack.Options) {
		o.PoolPubSubOptions = []option.ClientOption{option.WithEndpoint(proxy.addr())}
		o.StartTimeout = 2 * time.Second
		o.MaxRedrives = 100
	})
	proxy.setDown(true)
	status, h, out := e.do("POST", "/v1/pools/gpu/claim", map[string]any{"workerId": "w", "maxWaitMs": 5000})
	var r api.ClaimResponse
	json.Unmarshal(out, &r)
	if status != http.StatusServiceUnavailable || r.Error != api.CodeUnavailable || r.Disposition != api.Retry || h.Get("Retry-After") == "" {
		t.Fatalf("claim with Pub/Sub down: %d %s (Retry-After %q)", status, out, h.Get("Retry-After"))
	}
	sub := e.submit("gpu", nil)
	if sub.State != api.Pending {
		t.Fatalf("submitted with Pub/Sub down: %s", sub.State)
	}
	proxy.setDown(false)
	en := e.claimUntil("gpu", "", "w")
	if en.TaskID != sub.TaskID || en.Attempt != 1 {
		t.Fatalf("claimed %+v", en)
	}
	if v := e.Task(sub.TaskID); v.State != api.Running || v.Attempts[0].WorkerID != "w" {
		t.Fatalf("task %s %+v", v.State, v.Attempts)
	}
}

// worker.Pull runs at most Concurrency attempts at once, claiming only with
// a free slot, and every task succeeds.
func TestPullConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const pool, n, limit = "sdk", 6, 2
	var running, peak atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context, tk *worker.Task) (any, error) {
		cur := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]int{"ok": 1}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: e.stack.URL, Pool: pool, Concurrency: limit, MaxWait: time.Second}, fn)
	}()
	var ids []string
	for range n {
		ids = append(ids, e.submit(pool, map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 30000}).TaskID)
	}
	// Two attempts run; the other tasks wait in the pool, unclaimed.
	deadline := time.Now().Add(time.Minute)
	for running.Load() < limit && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	queued := 0
	for _, id := range ids {
		if e.Task(id).State == api.Queued {
			queued++
		}
	}
	if running.Load() != limit || queued != n-limit {
		t.Fatalf("%d running, %d queued; want %d and %d", running.Load(), queued, limit, n-limit)
	}
	close(release)
	for _, id := range ids {
		e.WaitState(id, api.Succeeded)
	}
	if peak.Load() != limit {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), limit)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// When ctx ends, Pull stops claiming and lets a running attempt finish
// within the grace period; one that outlasts it is stopped (ErrStopping)
// and reported FAILED/INFRASTRUCTURE, so Servo retries it; Pull returns
// once the report is in.
func TestPullGracefulStop(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const pool = "grace"
	started := make(chan string, 2)
	fn := func(ctx context.Context, tk *worker.Task) (any, error) {
		started <- tk.ID()
		if tk.ID() == quickID.Load() {
			time.Sleep(300 * time.Millisecond) // finishes within the grace period
			return map[string]int{"ok": 1}, nil
		}
		<-ctx.Done() // outlasts it
		return nil, context.Cause(ctx)
	}
	quick := e.submit(pool, map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 30000})
	quickID.Store(quick.TaskID)
	slow := e.submit(pool, map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 30000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: e.stack.URL, Pool: pool, Concurrency: 2, MaxWait: time.Second, Grace: 3 * time.Second}, fn)
	}()
	for range 2 {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the attempts did not start")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := e.Task(quick.TaskID); v.State != api.Succeeded {
		t.Fatalf("quick task %s", v.State)
	}
	v := e.Task(slow.TaskID)
	if v.State != api.Queued || v.Attempt != 2 || v.Attempts[0].Outcome != api.OutcomeFailed || v.Attempts[0].Error == nil || v.Attempts[0].Error.Category != api.CategoryInfrastructure {
		t.Fatalf("slow task %s attempt %d %+v", v.State, v.Attempt, v.Attempts)
	}
}

var quickID atomic.Value

// A claim refused for good ends Pull with a *api.Error: an unknown
// pool (403, as a pool the caller may not claim from), and pool B
// claimed as pool A's account (403).
func TestPullStopsOnRefusedClaim(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	cases := []struct {
		pool, identity string
		status         int
		code           string
	}{
		{"nope", "a@servo-test.iam.gserviceaccount.com", http.StatusForbidden, api.CodePermissionDenied},
		{"pool-b", "a@servo-test.iam.gserviceaccount.com", http.StatusForbidden, api.CodePermissionDenied},
	}
	for _, c := range cases {
		err := worker.Pull(context.Background(), worker.PullConfig{API: e.stack.URL, Pool: c.pool, DevIdentity: c.identity, MaxWait: time.Second},
			func(ctx context.Context, tk *worker.Task) (any, error) { return nil, nil })
		var ce *api.Error
		if !errors.As(err, &ce) || ce.Status != c.status || ce.Code != c.code {
			t.Fatalf("pool %s: Pull returned %v, want %d %s", c.pool, err, c.status, c.code)
		}
	}
}

// A claimer that leaves as its claim commits (a worker stopping at
// SIGTERM, its claim request cancelled): nobody will run the attempt, so
// Servo hands it back at once, FAILED/INFRASTRUCTURE and retryable, and
// another worker runs the retry after the backoff, not after the lease
// (60 s here) runs out.
func TestClaimerThatLeftHandedBack(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const pool = "left"
	sub := e.submit(pool, map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 60000})
	reqCtx, leave := context.WithCancel(context.Background())
	defer leave()
	restore := pull.OnClaimCommitted(pool, func(ctx context.Context) {
		leave() // the worker hangs up as Servo commits its claim
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("the server did not see the claimer leave")
		}
	})
	defer restore()
	body := strings.NewReader(`{"workerId": "stopping-1", "maxWaitMs": 20000}`)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, e.stack.URL+"/v1/pools/"+pool+"/claim", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the claim was answered %d; the test's claimer should have left", res.StatusCode)
	}
	v := e.WaitFor(sub.TaskID, "attempt 1 handed back", func(v api.Task) bool { return v.Attempt == 2 })
	a := v.Attempts[0]
	if a.WorkerID != "stopping-1" || a.Outcome != api.OutcomeFailed || a.Error == nil || a.Error.Category != api.CategoryInfrastructure ||
		!strings.Contains(a.Error.Message, "handed back by Servo") {
		t.Fatalf("attempt 1 %+v (error %+v), want FAILED/INFRASTRUCTURE handed back by Servo", a, a.Error)
	}
	restore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: e.stack.URL, Pool: pool, MaxWait: time.Second,
			Options: []worker.Option{worker.WithWorkerID("puller-2")}}, partitions.Process)
	}()
	v = e.WaitState(sub.TaskID, api.Succeeded)
	if len(v.Attempts) != 2 || v.Attempts[1].WorkerID != "puller-2" {
		t.Fatalf("attempts %+v, want the retry on puller-2", v.Attempts)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
