package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/worker"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// scripted is an external worker that records each Cloud Tasks delivery
// and answers it as the test says; the test then plays the worker's side
// of the protocol from the envelope, so it can crash, repeat or arrive late.
type scripted struct {
	srv        *httptest.Server
	deliveries chan delivery
	mu         sync.Mutex
	answer     func(n int, env api.Envelope) int // HTTP status for the nth delivery
	n          int
}

type delivery struct {
	env     api.Envelope
	headers http.Header
}

func newScripted(t testing.TB) *scripted {
	s := &scripted{deliveries: make(chan delivery, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env api.Envelope
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			t.Errorf("worker got a bad envelope: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.n++
		n, answer := s.n, s.answer
		s.mu.Unlock()
		s.deliveries <- delivery{env, r.Header.Clone()}
		status := http.StatusOK
		if answer != nil {
			status = answer(n, env)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) next(t testing.TB) delivery {
	t.Helper()
	select {
	case d := <-s.deliveries:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery reached the worker")
		return delivery{}
	}
}

// env is one test's stack with a scripted worker named "scripted", and
// the test's client of its API.
type env struct {
	stacktest.API
	stack  *devstack.Stack
	worker *scripted
}

func start(t testing.TB, opts ...func(*devstack.Options)) *env {
	t.Helper()
	w := newScripted(t)
	o := devstack.Options{
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		SweepEvery:  100 * time.Millisecond, Workers: map[string]string{"scripted": w.srv.URL},
	}
	for _, opt := range opts {
		opt(&o)
	}
	s := stacktest.Start(t, o)
	return &env{API: stacktest.NewAPI(t, s), stack: s, worker: w}
}

// submit posts a task to the scripted worker with fast timers.
func (e *env) submit(extra map[string]any) api.SubmitResponse {
	e.T.Helper()
	body := map[string]any{
		"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": "scripted", "payload": map[string]any{"n": 1},
		"heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 1500, "cancelGracePeriodMs": 300,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}
	for k, v := range extra {
		body[k] = v
	}
	status, out := e.Do("POST", "/v1/tasks", body)
	if status != http.StatusCreated && status != http.StatusOK {
		e.T.Fatalf("submit: %d %s", status, out)
	}
	var r api.SubmitResponse
	json.Unmarshal(out, &r)
	return r
}

// callback posts a worker callback with the envelope's token.
func (e *env) callback(en api.Envelope, kind string, body any) (int, api.CallbackResponse) {
	e.T.Helper()
	return stacktest.Callback(e.T, en, kind, body)
}

func started(en api.Envelope, worker string) api.StartedRequest {
	return api.StartedRequest{Attempt: en.Attempt, WorkerID: worker}
}

func succeeded(en api.Envelope, worker string) api.CompletedRequest {
	return api.CompletedRequest{Attempt: en.Attempt, WorkerID: worker, Outcome: api.OutcomeSucceeded, Output: json.RawMessage(`{"rows":1}`)}
}

func failed(en api.Envelope, worker string, c api.Category) api.CompletedRequest {
	return api.CompletedRequest{Attempt: en.Attempt, WorkerID: worker, Outcome: api.OutcomeFailed, Error: &api.ErrorInfo{Category: c, Message: "boom"}}
}

func expect(t testing.TB, what string, status int, r api.CallbackResponse, wantStatus int, wantCode string, wantDisp api.Disposition) {
	t.Helper()
	if status != wantStatus || r.Error != wantCode || r.Disposition != wantDisp {
		t.Fatalf("%s: got %d %q %s, want %d %q %s", what, status, r.Error, r.Disposition, wantStatus, wantCode, wantDisp)
	}
}

func TestHappyPathWithTheExampleWorker(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(map[string]any{"worker": devstack.ExampleWorker, "payload": map[string]any{"partitions": 4, "partitionMs": 50}})
	v := e.WaitState(r.TaskID, api.Succeeded)
	if len(v.Attempts) != 1 || v.Attempts[0].Outcome != api.OutcomeSucceeded || v.Attempts[0].WorkerID == "" || len(v.Attempts[0].Output) == 0 {
		t.Fatalf("attempts: %+v", v.Attempts)
	}
}

func TestHappyPathScripted(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(nil)
	d := e.worker.next(t)
	if d.env.Attempt != 1 || d.env.TaskID != r.TaskID || d.headers.Get("X-CloudTasks-TaskName") == "" {
		t.Fatalf("delivery %+v %v", d.env, d.headers)
	}
	st, res := e.callback(d.env, "started", started(d.env, "w1"))
	expect(t, "started", st, res, 200, "", api.Continue)
	p := 50
	st, res = e.callback(d.env, "heartbeat", api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", ProgressPct: &p})
	expect(t, "heartbeat", st, res, 200, "", api.Continue)
	st, res = e.callback(d.env, "completed", succeeded(d.env, "w1"))
	expect(t, "completed", st, res, 200, "", api.Committed)
	if res.FinalState != api.Succeeded {
		t.Fatalf("finalState %s", res.FinalState)
	}
	e.WaitState(r.TaskID, api.Succeeded)
}

func TestKilledWorkerBecomesZombieAndAttempt2Succeeds(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(nil)
	d1 := e.worker.next(t)
	st, res := e.callback(d1.env, "started", started(d1.env, "w1"))
	expect(t, "started", st, res, 200, "", api.Continue)
	// The worker dies: no heartbeats. The sweeper finds the zombie and retries.
	d2 := e.worker.next(t)
	if d2.env.Attempt != 2 {
		t.Fatalf("second delivery is attempt %d", d2.env.Attempt)
	}
	st, res = e.callback(d2.env, "started", started(d2.env, "w2"))
	expect(t, "attempt 2 started", st, res, 200, "", api.Continue)
	st, res = e.callback(d2.env, "completed", succeeded(d2.env, "w2"))
	expect(t, "attempt 2 completed", st, res, 200, "", api.Committed)
	v := e.WaitState(r.TaskID, api.Succeeded)
	if v.Attempts[0].Outcome != api.OutcomeZombie {
		t.Fatalf("attempt 1 outcome %s", v.Attempts[0].Outcome)
	}
	// Attempt 1's worker comes back late: the task has ended, and the
	// terminal rows come before attempt_mismatch (docs/contract.md §4.5).
	st, res = e.callback(d1.env, "completed", succeeded(d1.env, "w1"))
	expect(t, "late attempt 1", st, res, 409, api.CodeTaskAlreadyTerminal, api.Cancel)
	if res.State != api.Succeeded {
		t.Fatalf("task_already_terminal body %+v", res)
	}
}

func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	e := start(t)
	// A grace period and a lease no loaded machine outlasts: the callbacks
	// below come within them (past the grace they are 410, see
	// TestCancelTimeout; past the lease the sweeper ends the task).
	r := e.submit(map[string]any{"cancelGracePeriodMs": 60000, "heartbeatTimeoutMs": 60000})
	d := e.worker.next(t)
	e.callback(d.env, "started", started(d.env, "w1"))
	status, out := e.Do("POST", "/v1/tasks/"+r.TaskID+"/cancel", map[string]string{"reason": "user_requested"})
	if status != 200 || !strings.Contains(string(out), `"CANCELLING"`) {
		t.Fatalf("cancel: %d %s", status, out)
	}
	st, res := e.callback(d.env, "heartbeat", api.HeartbeatRequest{Attempt: 1, WorkerID: "w1"})
	if st != 200 || res.ShouldCancel == nil || !*res.ShouldCancel || res.CancelReason != "user_requested" || res.Disposition != api.Continue {
		t.Fatalf("heartbeat while cancelling: %d %+v", st, res)
	}
	st, res = e.callback(d.env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w1", Outcome: api.OutcomeCancelled, CancelledDuringPhase: "processing"})
	expect(t, "completed CANCELLED", st, res, 200, "", api.Committed)
	v := e.WaitState(r.TaskID, api.Cancelled)
	if v.Reason != "user_requested" {
		t.Fatalf("reason %q", v.Reason)
	}
}

func TestCancelTimeout(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(map[string]any{"heartbeatTimeoutMs": 5000})
	d := e.worker.next(t)
	e.callback(d.env, "started", started(d.env, "w1"))
	if status, out := e.Do("POST", "/v1/tasks/"+r.TaskID+"/cancel", map[string]string{}); status != 200 {
		t.Fatalf("cancel: %d %s", status, out)
	}
	// The worker never reports: the grace period runs out before the lease.
	v := e.WaitState(r.TaskID, api.Failed)
	if v.Reason != api.ReasonCancelTimeout || v.Attempts[0].Outcome != api.OutcomeCancelTimeout {
		t.Fatalf("got %s / %s", v.Reason, v.Attempts[0].Outcome)
	}
	if len(v.Attempts) != 1 {
		t.Fatalf("a cancelling task must not be retried: %d attempts", len(v.Attempts))
	}
}

func TestDuplicateCloudTasksDelivery(t *testing.T) {
	t.Parallel()
	e := start(t)
	// The first delivery starts as w1 and then fails at the HTTP level, so
	// Cloud Tasks delivers the same envelope again, to "another instance".
	e.worker.answer = func(n int, _ api.Envelope) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	e.submit(nil)
	d1 := e.worker.next(t)
	st, res := e.callback(d1.env, "started", started(d1.env, "w1"))
	expect(t, "first started", st, res, 200, "", api.Continue)
	d2 := e.worker.next(t)
	if d2.env.Attempt != 1 || d2.headers.Get("X-CloudTasks-TaskRetryCount") != "1" {
		t.Fatalf("redelivery: attempt %d, retry count %q", d2.env.Attempt, d2.headers.Get("X-CloudTasks-TaskRetryCount"))
	}
	st, res = e.callback(d2.env, "started", started(d2.env, "w2"))
	expect(t, "duplicate started", st, res, 409, api.CodeAttemptAlreadyStarted, api.Cancel)
}

// TestSwallowedDeliveryIsRedelivered: the worker answers Cloud Tasks' first
// delivery 200 without ever calling `started` (Cloud Tasks deletes the task
// and refuses its name for an hour). After the start timeout the sweeper
// re-drives the attempt under a name of its own, Cloud Tasks delivers it
// again with a fresh token, and the task runs to SUCCEEDED instead of
// ending DISPATCH_TIMEOUT.
func TestSwallowedDeliveryIsRedelivered(t *testing.T) {
	t.Parallel()
	e := start(t, func(o *devstack.Options) { o.StartTimeout, o.MaxRedrives = 500*time.Millisecond, 3 })
	r := e.submit(nil)
	d1 := e.worker.next(t) // swallowed: 200, no callback
	var d2 delivery
	for got := false; !got; {
		select {
		case d2 = <-e.worker.deliveries:
			got = true
		case <-time.After(100 * time.Millisecond):
			if v := e.Task(r.TaskID); v.State.Terminal() {
				t.Fatalf("the swallowed delivery was never re-delivered: task %s %s", v.State, v.Reason)
			}
		}
	}
	if d2.env.Attempt != 1 || d2.env.TaskID != r.TaskID || d2.env.TaskToken == d1.env.TaskToken {
		t.Fatalf("re-delivery: attempt %d task %s, same token %v", d2.env.Attempt, d2.env.TaskID, d2.env.TaskToken == d1.env.TaskToken)
	}
	if n1, n2 := d1.headers.Get("X-CloudTasks-TaskName"), d2.headers.Get("X-CloudTasks-TaskName"); n1 == n2 {
		t.Fatalf("re-delivered under the same Cloud Tasks name %s", n1)
	}
	st, res := e.callback(d2.env, "started", started(d2.env, "w1"))
	expect(t, "started", st, res, 200, "", api.Continue)
	st, res = e.callback(d2.env, "completed", succeeded(d2.env, "w1"))
	expect(t, "completed", st, res, 200, "", api.Committed)
	v := e.WaitState(r.TaskID, api.Succeeded)
	if len(v.Attempts) != 1 || v.Attempts[0].Outcome != api.OutcomeSucceeded {
		t.Fatalf("attempts %+v", v.Attempts)
	}
}

func TestInfrastructureFailureRetriesWithCheckpoint(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(nil)
	d1 := e.worker.next(t)
	e.callback(d1.env, "started", started(d1.env, "w1"))
	e.callback(d1.env, "heartbeat", api.HeartbeatRequest{Attempt: 1, WorkerID: "w1", Checkpoint: json.RawMessage(`{"nextPartition":3}`)})
	st, res := e.callback(d1.env, "completed", failed(d1.env, "w1", api.CategoryInfrastructure))
	expect(t, "failed", st, res, 200, "", api.Committed)
	if !res.RetryScheduled || res.NextAttempt != 2 || res.FinalState != api.Queued {
		t.Fatalf("retry not scheduled: %+v", res)
	}
	d2 := e.worker.next(t)
	if d2.env.Attempt != 2 || string(d2.env.ResumeFrom) != `{"nextPartition":3}` {
		t.Fatalf("attempt 2 envelope: attempt %d resumeFrom %s", d2.env.Attempt, d2.env.ResumeFrom)
	}
	if d2.env.TaskToken == d1.env.TaskToken {
		t.Fatal("a new attempt must carry a new token")
	}
	v := e.Task(r.TaskID)
	if v.Attempts[0].Outcome != api.OutcomeFailed || v.Attempts[1].ScheduledAt == nil || v.Attempts[1].ScheduledAt.Before(*v.Attempts[0].CompletedAt) {
		t.Fatalf("attempt history %+v", v.Attempts)
	}
	st, res = e.callback(d2.env, "completed", succeeded(d2.env, "w2"))
	expect(t, "attempt 2 completed", st, res, 200, "", api.Committed)
	e.WaitState(r.TaskID, api.Succeeded)
}

func TestDataQualityFailureDeadLetters(t *testing.T) {
	t.Parallel()
	e := start(t)
	r := e.submit(nil)
	d := e.worker.next(t)
	st, res := e.callback(d.env, "completed", failed(d.env, "w1", api.CategoryDataQuality))
	expect(t, "failed", st, res, 200, "", api.Committed)
	if res.RetryScheduled || res.FinalState != api.Failed {
		t.Fatalf("DATA_QUALITY must not retry: %+v", res)
	}
	v := e.WaitState(r.TaskID, api.Failed)
	if v.Reason != api.ReasonNonRetryable || len(v.Attempts) != 1 {
		t.Fatalf("got %s with %d attempts", v.Reason, len(v.Attempts))
	}
	var dl api.DeadLetter
	receive(t, e.stack.PubSub, events.DeadLetterInbox, func(m *pubsub.Message) bool {
		got, err := events.DecodeDeadLetter(m.Data)
		if err == nil && got.TaskID == r.TaskID {
			dl = got
			return true
		}
		return false
	})
	if dl.Reason != api.ReasonNonRetryable || dl.State != api.Failed {
		t.Fatalf("dead letter %+v", dl)
	}
}

func TestIdempotentSubmit(t *testing.T) {
	t.Parallel()
	e := start(t)
	body := map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": "scripted", "idempotencyKey": "order-42"}
	s1, out1 := e.Do("POST", "/v1/tasks", body)
	s2, out2 := e.Do("POST", "/v1/tasks", body)
	var r1, r2 api.SubmitResponse
	json.Unmarshal(out1, &r1)
	json.Unmarshal(out2, &r2)
	if s1 != 201 || s2 != 200 || r1.TaskID == "" || r1.TaskID != r2.TaskID {
		t.Fatalf("submits: %d %s / %d %s", s1, out1, s2, out2)
	}
	e.worker.next(t)
	select {
	case d := <-e.worker.deliveries:
		t.Fatalf("a repeated submit delivered again: %+v", d.env)
	case <-time.After(500 * time.Millisecond):
	}
}

func TestEveryTaskEventsArriveInOrder(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx := context.Background()
	if err := events.EnsureSubscriptions(ctx, e.stack.PubSub, events.Subscription{Name: "e2e-events", Topic: events.DefaultEventsTopic, Ordered: true}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, e.submit(map[string]any{"taskKey": fmt.Sprint("k", i)}).TaskID)
	}
	for i := 0; i < 3; i++ {
		d := e.worker.next(t)
		e.callback(d.env, "started", started(d.env, "w"))
		e.callback(d.env, "completed", succeeded(d.env, "w"))
	}
	want := []string{"->PENDING", "PENDING->QUEUED", "QUEUED->RUNNING", "RUNNING->SUCCEEDED"}
	got := map[string][]api.Event{}
	receive(t, e.stack.PubSub, "e2e-events", func(m *pubsub.Message) bool {
		ev, err := events.DecodeEvent(m.Data)
		if err != nil {
			t.Errorf("bad event: %v", err)
			return false
		}
		if n := len(got[ev.TaskID]); n > 0 && got[ev.TaskID][n-1].EventID == ev.EventID {
			return false // a duplicate delivery, detectable by eventId
		}
		got[ev.TaskID] = append(got[ev.TaskID], ev)
		for _, id := range ids {
			if len(got[id]) < len(want) {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		var chain []string
		for i, ev := range got[id] {
			chain = append(chain, string(ev.From)+"->"+string(ev.To))
			if ev.Seq != int64(i+1) {
				t.Errorf("%s: event %d has seq %d", id, i, ev.Seq)
			}
		}
		if fmt.Sprint(chain) != fmt.Sprint(want) {
			t.Errorf("%s: events %v, want %v", id, chain, want)
		}
	}
}

// receive pulls from sub until done returns true for a message.
func receive(t testing.TB, c *pubsub.Client, sub string, done func(*pubsub.Message) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	finished := false
	err := c.Subscriber(sub).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		if !finished && done(m) {
			finished = true
			cancel()
		}
	})
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if !finished {
		t.Fatalf("the expected messages did not arrive on %s", sub)
	}
}
