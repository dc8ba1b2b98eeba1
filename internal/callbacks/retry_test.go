package callbacks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/task"
)

// TestRetriesReachTheWorker runs the retry paths end to end with the real
// enqueue.Enqueuer, Servo's Cloud Tasks emulator (which really pushes the
// envelopes over HTTP) and a worker on httptest:
//
//  1. attempt 1 starts, checkpoints {"offset":42} and reports FAILED
//     (INFRASTRUCTURE): the answer says retryScheduled, nextAttempt 2, and
//     the callback enqueues attempt 2, whose envelope arrives with
//     resumeFrom = the checkpoint and a token for attempt 2; attempt 1's
//     late heartbeat gets attempt_mismatch;
//  2. attempt 2 starts, checkpoints {"offset":99}, then goes silent past its
//     lease: its next heartbeat gets 410 task_expired, and the callback
//     itself enqueues attempt 3, whose envelope resumes from 99;
//  3. attempt 3 succeeds; no other envelope is ever delivered.
func TestRetriesReachTheWorker(t *testing.T) {
	e := newEnv(t, nil)
	ctx := e.ctx

	path := newRetryPath(t, e, "example", cloudtasks.Options{}, func() time.Time { return time.Now().UTC() })
	enq, envelopes, base := path.enq, path.envelopes, path.base
	client := newClient(2)

	e.clock.Set(time.Now().UTC())
	tk := e.create(func(tk *task.Task) {
		tk.Worker = "example"
		tk.Timing = api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 400, CancelGracePeriodMs: 1000}
		tk.Retry = api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 100, BackoffCoefficient: 2, MaxBackoffMs: 200}
	})
	if err := enq.Enqueue(ctx, tk); err != nil {
		t.Fatal(err)
	}
	next := func(attempt int, resume string) api.Envelope {
		t.Helper()
		select {
		case env := <-envelopes:
			if env.TaskID != tk.ID || env.Attempt != attempt || string(env.ResumeFrom) != resume || env.CallbackBaseURL != base {
				t.Fatalf("envelope %+v, want attempt %d resuming from %q", env, attempt, resume)
			}
			claims, err := e.keys.Verify(env.TaskToken, time.Now())
			if err != nil || claims.Attempt != attempt || claims.TaskID != tk.ID {
				t.Fatalf("envelope token: %+v %v", claims, err)
			}
			return env
		case <-time.After(15 * time.Second):
			t.Fatalf("no envelope for attempt %d", attempt)
		}
		panic("unreachable")
	}
	post := func(env api.Envelope, kind callbacks.Kind, body any) reply {
		t.Helper()
		rp, err := httpPost(client, env.CallbackBaseURL, kind, env.TaskID, env.TaskToken, body)
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}
	expect := func(rp reply, status int, code string) {
		t.Helper()
		if rp.status != status || rp.resp.Error != code {
			t.Fatalf("got %d %s, want %d %q", rp.status, rp.raw, status, code)
		}
	}

	// 1. FAILED → retry scheduled → attempt 2 delivered with the checkpoint.
	env1 := next(1, "")
	expect(post(env1, callbacks.KindStarted, startedReq(1, "pod-a")), 200, "")
	hb := heartbeatReq(1, "pod-a")
	hb.Checkpoint = json.RawMessage(`{"offset":42}`)
	expect(post(env1, callbacks.KindHeartbeat, hb), 200, "")
	e.rpc.Reset()
	rp := post(env1, callbacks.KindCompleted, failedReq(1, "pod-a", api.CategoryInfrastructure))
	expect(rp, 200, "")
	if rp.resp.Disposition != api.Committed || rp.resp.FinalState != api.Queued || !rp.resp.RetryScheduled || rp.resp.NextAttempt != 2 {
		t.Fatalf("completed FAILED: %s", rp.raw)
	}
	if got, want := e.rpc.Counts(), (map[string]int{"BatchGetDocuments": 1, "Commit": 1}); !maps.Equal(got, want) {
		t.Errorf("completed with a retry enqueued: Firestore RPCs %v, want %v", got, want)
	}
	env2 := next(2, `{"offset":42}`)
	expect(post(env1, callbacks.KindHeartbeat, heartbeatReq(1, "pod-a")), 409, api.CodeAttemptMismatch)

	// 2. Attempt 2 goes silent past its lease: 410, and attempt 3 is enqueued.
	expect(post(env2, callbacks.KindStarted, startedReq(2, "pod-b")), 200, "")
	hb = heartbeatReq(2, "pod-b")
	hb.Checkpoint = json.RawMessage(`{"offset":99}`)
	expect(post(env2, callbacks.KindHeartbeat, hb), 200, "")
	time.Sleep(500 * time.Millisecond) // longer than the 400 ms lease
	expect(post(env2, callbacks.KindHeartbeat, heartbeatReq(2, "pod-b")), 410, api.CodeTaskExpired)
	env3 := next(3, `{"offset":99}`)

	// 3. Attempt 3 succeeds.
	expect(post(env3, callbacks.KindStarted, startedReq(3, "pod-c")), 200, "")
	rp = post(env3, callbacks.KindCompleted, completedReq(3, "pod-c", api.OutcomeSucceeded))
	expect(rp, 200, "")
	if rp.resp.FinalState != api.Succeeded || rp.resp.RetryScheduled {
		t.Fatalf("completed SUCCEEDED: %s", rp.raw)
	}
	select {
	case env := <-envelopes:
		t.Fatalf("unexpected delivery: attempt %d", env.Attempt)
	case <-time.After(300 * time.Millisecond):
	}

	got := e.get(tk.ID)
	var outcomes []api.Outcome
	for _, a := range got.Attempts {
		outcomes = append(outcomes, a.Outcome)
	}
	if got.State != api.Succeeded || !slices.Equal(outcomes, []api.Outcome{api.OutcomeFailed, api.OutcomeZombie, api.OutcomeSucceeded}) {
		t.Fatalf("task %s, attempt outcomes %v", got.State, outcomes)
	}
	want := []string{">PENDING", "PENDING>QUEUED", "QUEUED>RUNNING", "RUNNING>QUEUED", "QUEUED>RUNNING", "RUNNING>QUEUED", "QUEUED>RUNNING", "RUNNING>SUCCEEDED"}
	if tr := e.outboxTransitions(tk.ID); !slices.Equal(tr, want) {
		t.Errorf("outbox %v, want %v", tr, want)
	}
}

// failingEnqueuer fails every follow-up, as Cloud Tasks being down would.
type failingEnqueuer struct{ calls chan task.Result }

func (f failingEnqueuer) FollowUp(_ context.Context, r task.Result) error {
	f.calls <- r
	return enqueue.ErrCloudTasks
}

// TestRetryEnqueueFailureKeepsTheAnswer: when enqueueing the scheduled
// retry fails after the commit, the worker still hears the committed
// answer (the sweeper re-drives the QUEUED attempt), and the failure is in
// the callback's log line.
func TestRetryEnqueueFailureKeepsTheAnswer(t *testing.T) {
	f := failingEnqueuer{calls: make(chan task.Result, 1)}
	e := newEnv(t, func(c *callbacks.Config) { c.Enqueuer = f })
	tk := e.running("w1")
	rp := e.post(callbacks.KindCompleted, tk.ID, e.token(tk, 1), failedReq(1, "w1", api.CategoryTimeout))
	if rp.status != http.StatusOK || rp.resp.Disposition != api.Committed || !rp.resp.RetryScheduled || rp.resp.NextAttempt != 2 {
		t.Fatalf("%d %s", rp.status, rp.raw)
	}
	select {
	case r := <-f.calls:
		if !r.Enqueue || r.Task.Attempt != 2 || r.Task.State != api.Queued {
			t.Errorf("follow-up got %+v", r)
		}
	default:
		t.Fatal("the retry was not handed to the Enqueuer")
	}
	if got := e.get(tk.ID); got.State != api.Queued || got.Attempt != 2 || got.DispatchCheckAt == nil {
		t.Errorf("task %s attempt %d dispatchCheckAt %v: the sweeper could not re-drive it", got.State, got.Attempt, got.DispatchCheckAt)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"followUpError"`) {
		t.Errorf("follow-up failure not logged:\n%s", logs)
	}
	// Callbacks that schedule nothing never call the Enqueuer.
	tk = e.running("w1")
	e.post(callbacks.KindCompleted, tk.ID, e.token(tk, 1), completedReq(1, "w1", api.OutcomeSucceeded))
	select {
	case r := <-f.calls:
		t.Errorf("follow-up for a result that scheduled nothing: %+v", r)
	default:
	}
}

// retryPath is the callbacks with the Enqueuer that schedules retries
// behind them, over real HTTP: Servo's Cloud Tasks emulator (opts) with one
// queue for worker, an httptest worker that hands every envelope to the
// test and acknowledges it, and the callbacks handler on its own address
// (base) with now as its clock. Everything stops with the test.
type retryPath struct {
	enq       *enqueue.Enqueuer
	envelopes chan api.Envelope
	base      string
}

func newRetryPath(t *testing.T, e *env, worker string, opts cloudtasks.Options, now func() time.Time) *retryPath {
	t.Helper()
	cts := cloudtasks.NewServer(opts)
	ctAddr, err := cts.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cts.Stop)
	ctClient, err := cloudtasksapi.NewClient(e.ctx, cloudtasks.ClientOptions(ctAddr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctClient.Close() })
	const parent = "projects/servo-test/locations/us-central1"
	queue := parent + "/queues/" + worker
	if _, err := ctClient.CreateQueue(e.ctx, &ctpb.CreateQueueRequest{Parent: parent, Queue: &ctpb.Queue{Name: queue}}); err != nil {
		t.Fatal(err)
	}
	rp := &retryPath{envelopes: make(chan api.Envelope, 10)}
	w := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var env api.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rp.envelopes <- env
	}))
	t.Cleanup(w.Close)
	workers, err := enqueue.ParseWorkers([]byte(fmt.Sprintf(`{%q:{"url":%q,"queue":%q}}`, worker, w.URL+"/run", queue)), true)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rp.base = "http://" + lis.Addr().String()
	rp.enq, err = enqueue.New(enqueue.Config{Store: e.st, Tasks: ctClient, Keys: e.keys, Workers: workers, CallbackBaseURL: rp.base, Now: now, Logger: e.cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Enqueuer, cfg.Now = rp.enq, now
	cb := &httptest.Server{Listener: lis, Config: &http.Server{Handler: newHandler(t, cfg)}}
	cb.Start()
	t.Cleanup(cb.Close)
	return rp
}
