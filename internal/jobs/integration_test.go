package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// The job worker of these tests: the example worker in -job mode, built
// once per test binary by TestJobWorker into its temporary directory.
var workerBin string

// TestJobWorker runs job workers through the real local stack (emulators,
// Cloud Tasks emulator, API, callbacks, sweeper, dispatch endpoint) with
// each attempt a subprocess of the example worker (jobs.Local, as `servo
// dev --job-worker`).
func TestJobWorker(t *testing.T) {
	workerBin = filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", workerBin, "github.com/servo-dev/servo/examples/worker").CombinedOutput(); err != nil {
		t.Fatalf("build the example worker: %v\n%s", err, out)
	}
	// Each subtest has its own stack and project, and runs in parallel.
	t.Run("KilledAttemptResumes", testKilledAttemptResumes)
	t.Run("CancelHonoured", testCancelHonoured)
	t.Run("CancelIgnoredIsKilled", testCancelIgnoredIsKilled)
	t.Run("OutlivesItsFirstToken", testOutlivesItsFirstToken)
	t.Run("DispatchedTwiceStartsOne", testDispatchedTwiceStartsOne)
	t.Run("BadDeliveries", testBadDeliveries)
	t.Run("DelayedStart", testDelayedStart)
}

// A job worker's delayed start: no execution runs before the start (the
// Cloud Task of the dispatch endpoint is scheduled at it); the attempt
// starts after it and succeeds.
func testDelayedStart(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"render": workerBin + " -job"})
	start := time.Now().Add(3 * time.Second)
	interval, timeout, grace, attempts := int64(500), int64(10000), int64(1000), 1
	id := s.Submit(api.SubmitRequest{
		TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "render", Payload: json.RawMessage(`{"partitions":2,"partitionMs":50}`),
		HeartbeatIntervalMs: &interval, HeartbeatTimeoutMs: &timeout, CancelGracePeriodMs: &grace,
		Retry: &api.RetryRequest{MaxAttempts: &attempts}, StartAt: start.UTC().Format(time.RFC3339Nano),
	}).TaskID
	if tk := s.get(id); tk.State != api.Queued || current(tk).Execution != "" {
		t.Fatalf("before the start: %s, attempts %s", tk.State, attemptsOf(tk))
	}
	tk := s.waitFor(id, "SUCCEEDED", func(tk task.Task) bool { return tk.State.Terminal() })
	a := current(tk)
	if tk.State != api.Succeeded || a.StartedAt == nil || a.StartedAt.Before(start) {
		t.Fatalf("task %s, attempt started at %v, the start %v: %s", tk.State, a.StartedAt, start, attemptsOf(tk))
	}
}

// stack is one test's local stack, and the test's client of its API.
type stack struct {
	stacktest.API
	s   *devstack.Stack
	log string
}

func startStack(t *testing.T, jobWorkers map[string]string) *stack {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "stack.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, run last: once the stack has closed.
	t.Cleanup(func() {
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if !strings.Contains(l, `"component":"sweeper"`) || strings.Contains(l, "taskId") {
					keep = append(keep, l)
				}
			}
			if len(keep) > 200 {
				keep = keep[len(keep)-200:]
			}
			t.Logf("stack log (tail, without the sweeper's idle lines):\n%s", strings.Join(keep, "\n"))
		}
	})
	s := stacktest.Start(t, devstack.Options{
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		SweepEvery:  100 * time.Millisecond, Log: lf, JobWorkers: jobWorkers,
	})
	return &stack{API: stacktest.NewAPI(t, s), s: s, log: logPath}
}

// submit submits a task to worker with payload and the given timers (ms)
// and retry policy; it returns the task id.
func (s *stack) submit(worker, payload string, intervalMs, timeoutMs, graceMs int64, maxAttempts int) string {
	s.T.Helper()
	backoff := int64(100)
	return s.Submit(api.SubmitRequest{
		TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: worker, Payload: json.RawMessage(payload),
		HeartbeatIntervalMs: &intervalMs, HeartbeatTimeoutMs: &timeoutMs, CancelGracePeriodMs: &graceMs,
		Retry: &api.RetryRequest{MaxAttempts: &maxAttempts, InitialBackoffMs: &backoff, MaxBackoffMs: &backoff},
	}).TaskID
}

// get is the task as the API shows it, with the fields of a task.Task.
func (s *stack) get(id string) task.Task {
	s.T.Helper()
	return servotest.GetJSON[task.Task](s.T, s.URL+"/v1/tasks/"+id)
}

// waitFor polls the task until cond holds (generous deadline; never a
// fixed sleep).
func (s *stack) waitFor(id, what string, cond func(task.Task) bool) task.Task {
	s.T.Helper()
	return servotest.WaitFor(s.T, "task "+id+" to reach "+what, func() task.Task { return s.get(id) }, cond, func(tk task.Task) string {
		return fmt.Sprintf("it is %s attempt %d, attempts %s", tk.State, tk.Attempt, attemptsOf(tk))
	})
}

func attemptsOf(tk task.Task) string {
	var parts []string
	for _, a := range tk.Attempts {
		msg := ""
		if a.Error != nil {
			msg = a.Error.Message
		}
		parts = append(parts, fmt.Sprintf("#%d %s exec=%s checkpoint=%s %s", a.Attempt, a.Outcome, a.Execution, a.Checkpoint, msg))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// current is the task's current attempt record.
func current(tk task.Task) task.Attempt {
	for _, a := range tk.Attempts {
		if a.Attempt == tk.Attempt {
			return a
		}
	}
	return task.Attempt{}
}

func checkpointOf(t *testing.T, a task.Attempt) int {
	t.Helper()
	if len(a.Checkpoint) == 0 {
		return 0
	}
	var st partitions.State
	if err := json.Unmarshal(a.Checkpoint, &st); err != nil {
		t.Fatalf("checkpoint %s: %v", a.Checkpoint, err)
	}
	return st.NextPartition
}

func (s *stack) waitExit(execution string) int {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, err := s.s.Jobs.Wait(ctx, execution)
	if err != nil {
		s.T.Fatalf("execution %s did not end: %v", execution, err)
	}
	return code
}

// testKilledAttemptResumes: three attempts. Attempt 1 is killed (SIGKILL)
// after storing a checkpoint of at least 2; its lease expires and attempt
// 2, a new execution, resumes from that checkpoint and fails half way
// through what is left (failAttempts: 2); attempt 3 resumes from attempt
// 2's checkpoint and succeeds.
func testKilledAttemptResumes(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"render": workerBin + " -job"})
	const n = 40
	id := s.submit("render", fmt.Sprintf(`{"partitions":%d,"partitionMs":500,"failAttempts":2}`, n), 500, 10000, 1000, 3)
	tk := s.waitFor(id, "attempt 1 to checkpoint partition 2", func(tk task.Task) bool {
		a := current(tk)
		return tk.Attempt == 1 && a.Execution != "" && checkpointOf(t, a) >= 2
	})
	exec1 := current(tk).Execution
	p := s.s.Jobs.Process(exec1)
	if p == nil {
		t.Fatalf("execution %s is not running", exec1)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tk = s.waitFor(id, "SUCCEEDED", func(tk task.Task) bool { return tk.State.Terminal() })
	if tk.State != api.Succeeded || tk.Attempt != 3 || len(tk.Attempts) != 3 {
		t.Fatalf("task %s attempt %d, attempts %s", tk.State, tk.Attempt, attemptsOf(tk))
	}
	a1, a2, a3 := tk.Attempts[0], tk.Attempts[1], tk.Attempts[2]
	if a1.Outcome != api.OutcomeZombie || a2.Outcome != api.OutcomeFailed || a3.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcomes %s", attemptsOf(tk))
	}
	executions := map[string]bool{a1.Execution: true, a2.Execution: true, a3.Execution: true}
	if len(executions) != 3 || executions[""] {
		t.Fatalf("each attempt must run in its own recorded execution: %s", attemptsOf(tk))
	}
	// Attempt 2 resumed from attempt 1's last stored checkpoint c1 (≥ 2):
	// it failed half way through the partitions left after c1, which is
	// not where a run from 0 fails (partition n/2+1).
	c1 := checkpointOf(t, a1)
	failAt := c1 + (n-c1)/2 + 1
	if c1 < 2 || a2.Error == nil || !strings.Contains(a2.Error.Message, fmt.Sprintf("partition %d, attempt 2", failAt)) {
		t.Fatalf("attempt 2 did not resume from checkpoint %d (want a failure at partition %d): %s", c1, failAt, attemptsOf(tk))
	}
	var out partitions.Output
	if err := json.Unmarshal(a3.Output, &out); err != nil {
		t.Fatal(err)
	}
	if c2 := checkpointOf(t, a2); out.ResumedFrom != c2 || out.Processed != n-c2 || out.Attempt != 3 {
		t.Fatalf("attempt 3 output %+v, want resumed from attempt 2's checkpoint %d", out, c2)
	}
	if code := s.waitExit(exec1); code != -1 {
		t.Fatalf("killed execution exit code %d", code)
	}
	for _, e := range []string{a2.Execution, a3.Execution} {
		if code := s.waitExit(e); code != 0 {
			t.Fatalf("execution %s exit code %d, want 0 (outcome reported)", e, code)
		}
	}
}

// testCancelHonoured: a cancel reaches the job through its heartbeats; the
// job stops, reports CANCELLED and exits 0.
func testCancelHonoured(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"render": workerBin + " -job"})
	id := s.submit("render", `{"partitions":600,"partitionMs":200}`, 500, 10000, 60000, 1)
	tk := s.waitFor(id, "RUNNING with a checkpoint", func(tk task.Task) bool {
		return tk.State == api.Running && checkpointOf(t, current(tk)) >= 1
	})
	exec1 := current(tk).Execution
	if status, body := s.Do("POST", "/v1/tasks/"+id+"/cancel", map[string]string{"reason": "user_requested"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}
	tk = s.waitFor(id, "terminal", func(tk task.Task) bool { return tk.State.Terminal() })
	if tk.State != api.Cancelled || len(tk.Attempts) != 1 || tk.Attempts[0].Outcome != api.OutcomeCancelled {
		t.Fatalf("task %s reason %s, attempts %s", tk.State, tk.Reason, attemptsOf(tk))
	}
	if code := s.waitExit(exec1); code != 0 {
		t.Fatalf("execution exit code %d, want 0", code)
	}
	if n := len(s.s.Jobs.Executions()); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// testCancelIgnoredIsKilled: the job ignores the cancel (ignoreCancel);
// when the grace period ends the task fails CANCEL_TIMEOUT and Servo
// cancels the execution, which would otherwise run for ten minutes.
func testCancelIgnoredIsKilled(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"render": workerBin + " -job"})
	id := s.submit("render", `{"partitions":600,"partitionMs":1000,"ignoreCancel":true}`, 500, 10000, 1000, 3)
	tk := s.waitFor(id, "RUNNING", func(tk task.Task) bool { return tk.State == api.Running && current(tk).Execution != "" })
	exec1 := current(tk).Execution
	if status, body := s.Do("POST", "/v1/tasks/"+id+"/cancel", map[string]string{"reason": "user_requested"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}
	tk = s.waitFor(id, "terminal", func(tk task.Task) bool { return tk.State.Terminal() })
	if tk.State != api.Failed || tk.Reason != api.ReasonCancelTimeout || len(tk.Attempts) != 1 || tk.Attempts[0].Outcome != api.OutcomeCancelTimeout {
		t.Fatalf("task %s reason %s, attempts %s", tk.State, tk.Reason, attemptsOf(tk))
	}
	if code := s.waitExit(exec1); code != -1 {
		t.Fatalf("execution exit code %d, want -1 (killed)", code)
	}
	if n := len(s.s.Jobs.Executions()); n != 1 {
		t.Fatalf("%d executions, want 1 (a cancelled task is never retried)", n)
	}
}

// pauseQueue pauses a worker's queue in the Cloud Tasks emulator, so that
// the test delivers the dispatch itself.
func pauseQueue(t *testing.T, s *stack, worker string) {
	t.Helper()
	ctx := context.Background()
	c, err := cloudtasks.NewClient(ctx, cloudtasks.ClientOptions(s.s.CloudTasksHost)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.PauseQueue(ctx, &ctpb.PauseQueueRequest{Name: s.s.Workers[worker].Queue}); err != nil {
		t.Fatal(err)
	}
}

// dispatch POSTs an envelope to the dispatch endpoint as Cloud Tasks does.
func (s *stack) dispatch(env api.Envelope) (int, jobs.Answer) {
	s.T.Helper()
	status, body := s.Do("POST", jobs.DispatchPath, env)
	var a jobs.Answer
	if err := json.Unmarshal(body, &a); err != nil {
		s.T.Fatalf("dispatch answer %d %s: %v", status, body, err)
	}
	return status, a
}

// envelope builds the envelope of the task's current attempt, as the
// enqueuer does for its Cloud Task.
func (s *stack) envelope(id string) api.Envelope {
	s.T.Helper()
	tk, err := s.s.Store.GetTask(context.Background(), id)
	if err != nil {
		s.T.Fatal(err)
	}
	env, _, err := s.s.Enqueuer.Envelope(&tk, time.Now())
	if err != nil {
		s.T.Fatal(err)
	}
	return env
}

// testOutlivesItsFirstToken: the job's envelope carries a token that
// lives 10 s; the job runs about 16 s and succeeds, on tokens refreshed by
// its heartbeats.
func testOutlivesItsFirstToken(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"render": workerBin + " -job"})
	pauseQueue(t, s, "render")
	id := s.submit("render", `{"partitions":40,"partitionMs":400}`, 500, 10000, 1000, 1)
	env := s.envelope(id)
	tk := s.get(id)
	now := time.Now()
	short, exp, err := s.s.Keys.Sign(auth.Scope{TenantID: tk.TenantID, WorkspaceID: tk.WorkspaceID, RunID: tk.RunID, TaskID: tk.ID, Attempt: tk.Attempt}, 10*time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	env.TaskToken, env.TokenExpiresAt = short, exp
	if status, a := s.dispatch(env); status != http.StatusOK || a.Result != jobs.ResultStarted {
		t.Fatalf("dispatch: %d %+v", status, a)
	}
	tk = s.waitFor(id, "terminal", func(tk task.Task) bool { return tk.State.Terminal() })
	if tk.State != api.Succeeded || len(tk.Attempts) != 1 {
		t.Fatalf("task %s, attempts %s", tk.State, attemptsOf(tk))
	}
	a := tk.Attempts[0]
	if a.CompletedAt == nil || !a.CompletedAt.After(exp.Add(auth.TaskTokenLeeway)) {
		t.Fatalf("the attempt completed at %v, before its first token expired (%v): the test proves nothing", a.CompletedAt, exp)
	}
	if code := s.waitExit(a.Execution); code != 0 {
		t.Fatalf("execution exit code %d, want 0", code)
	}
}

// testDispatchedTwiceStartsOne: the dispatch endpoint delivered again for
// an attempt whose execution runs (it has not called Servo yet) finds it
// by its labels and starts none; concurrent deliveries leave one recorded
// execution running. Once that execution has ended without starting the
// attempt, a re-drive starts a new one.
func testDispatchedTwiceStartsOne(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"sleeper": "sleep 600"})
	pauseQueue(t, s, "sleeper")
	id := s.submit("sleeper", `{}`, 500, 10000, 1000, 1)
	env := s.envelope(id)

	// Concurrent deliveries.
	var wg sync.WaitGroup
	answers := make([]jobs.Answer, 4)
	for i := range answers {
		wg.Go(func() {
			status, a := s.dispatch(env)
			if status != http.StatusOK {
				t.Errorf("dispatch %d: %d %+v", i, status, a)
			}
			answers[i] = a
		})
	}
	wg.Wait()
	recorded := current(s.get(id)).Execution
	if recorded == "" {
		t.Fatalf("no execution recorded; answers %+v", answers)
	}
	running := 0
	for _, e := range s.s.Jobs.Executions() {
		if e.Name != recorded {
			s.waitExit(e.Name) // a superseded one is cancelled
			continue
		}
		running++
	}
	if ex := s.s.Jobs.Executions(); running != 1 || s.s.Jobs.Process(recorded) == nil {
		t.Fatalf("executions %+v, recorded %s: want the recorded one running and only it", ex, recorded)
	}
	before := len(s.s.Jobs.Executions())

	// A later repeat finds the recorded execution.
	status, a := s.dispatch(env)
	if status != http.StatusOK || a.Result != jobs.ResultFound || a.Execution != recorded {
		t.Fatalf("repeat: %d %+v, want found %s", status, a, recorded)
	}
	if n := len(s.s.Jobs.Executions()); n != before {
		t.Fatalf("the repeat started an execution: %d, want %d", n, before)
	}

	// The execution dies without having started the attempt: a re-drive
	// (a fresh envelope for the same attempt) starts a new one, recorded
	// in place of the dead one.
	if err := s.s.Jobs.Cancel(context.Background(), recorded); err != nil {
		t.Fatal(err)
	}
	s.waitExit(recorded)
	status, a = s.dispatch(s.envelope(id))
	if status != http.StatusOK || a.Result != jobs.ResultStarted || a.Execution == recorded {
		t.Fatalf("re-drive after the execution died: %d %+v", status, a)
	}
	if got := current(s.get(id)).Execution; got != a.Execution {
		t.Fatalf("recorded %s, want the new %s", got, a.Execution)
	}
}

// testBadDeliveries: what the dispatch endpoint refuses, with its status
// and code, and that none of it starts an execution.
func testBadDeliveries(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"sleeper": "sleep 600"})
	pauseQueue(t, s, "sleeper")
	pauseQueue(t, s, devstack.ExampleWorker)
	id := s.submit("sleeper", `{}`, 500, 10000, 1000, 1)
	env := s.envelope(id)
	pushID := s.submit(devstack.ExampleWorker, `{"partitions":1}`, 500, 10000, 1000, 1)
	pushEnv := s.envelope(pushID)
	endedID := s.submit("sleeper", `{}`, 500, 10000, 1000, 1)
	endedEnv := s.envelope(endedID)
	if status, body := s.Do("POST", "/v1/tasks/"+endedID+"/cancel", map[string]string{"reason": "user_requested"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}
	otherAttempt := env
	tk := s.get(id)
	otherAttempt.TaskToken, _, _ = s.s.Keys.Sign(auth.Scope{TenantID: tk.TenantID, WorkspaceID: tk.WorkspaceID, RunID: tk.RunID, TaskID: tk.ID, Attempt: 2}, time.Minute, time.Now())
	forged := env
	forged.TaskToken = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl"
	big := env
	big.Payload = json.RawMessage(`"` + strings.Repeat("x", jobs.MaxEnvelopeBytes) + `"`)
	raw := func(v any) []byte { b, _ := json.Marshal(v); return b }

	cases := []struct {
		name       string
		method, ct string
		body       []byte
		status     int
		code       string
		result     string
	}{
		{"GET", "GET", "application/json", nil, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, ""},
		{"not JSON", "POST", "text/plain", raw(env), http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType, ""},
		{"not an envelope", "POST", "application/json", []byte(`{"hello":1}`), http.StatusBadRequest, api.CodeInvalidRequest, ""},
		{"too large for a job", "POST", "application/json", raw(big), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, ""},
		{"forged token", "POST", "application/json", raw(forged), http.StatusUnauthorized, api.CodeInvalidToken, ""},
		{"token of another attempt", "POST", "application/json", raw(otherAttempt), http.StatusForbidden, api.CodeTokenScopeMismatch, ""},
		{"push worker's task", "POST", "application/json", raw(pushEnv), http.StatusBadRequest, api.CodeInvalidRequest, ""},
		{"cancelled task", "POST", "application/json", raw(endedEnv), http.StatusOK, "", jobs.ResultStale},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, s.s.URL+jobs.DispatchPath, bytes.NewReader(c.body))
			req.Header.Set("Content-Type", c.ct)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var a jobs.Answer
			if err := json.NewDecoder(res.Body).Decode(&a); err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != c.status || a.Error != c.code || a.Result != c.result {
				t.Fatalf("got %d %+v, want %d %q %q", res.StatusCode, a, c.status, c.code, c.result)
			}
			if strings.Contains(a.Message, env.TaskToken) {
				t.Fatal("the answer carries the token")
			}
		})
	}
	if n := len(s.s.Jobs.Executions()); n != 0 {
		t.Fatalf("%d executions started by bad deliveries", n)
	}
	if got := current(s.get(id)).Execution; got != "" {
		t.Fatalf("execution recorded: %s", got)
	}
	b, _ := os.ReadFile(s.log)
	if bytes.Contains(b, []byte(env.TaskToken)) {
		t.Fatal("a task token appears in the logs")
	}
}
