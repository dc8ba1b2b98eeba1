package dispatcher

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/task"
)

func (e *env) cancelTask(id, reason string, want int) response {
	e.t.Helper()
	var body any
	if reason != "" {
		body = map[string]any{"reason": reason}
	}
	r := e.do("POST", "/v1/tasks/"+id+"/cancel", body, "")
	if r.status != want {
		e.t.Fatalf("cancel %s: status %d, want %d: %s", id, r.status, want, r.body)
	}
	return r
}

// A QUEUED task becomes CANCELLED at once and its Cloud Task is deleted.
func TestCancelQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	st := e.storedTask(sr.TaskID)
	if e.cloudTask(&st) == nil {
		t.Fatal("no Cloud Task after submit")
	}
	r := e.cancelTask(sr.TaskID, "operator stopped the run", http.StatusOK)
	var v api.Task
	r.decode(t, &v)
	if v.State != api.Cancelled || v.Reason != "operator stopped the run" || v.EndedAt == nil || len(v.Attempts) != 1 ||
		v.Attempts[0].Outcome != api.OutcomeCancelled {
		t.Fatalf("cancel answer = %+v", v)
	}
	if ct := e.cloudTask(&st); ct != nil {
		t.Fatalf("Cloud Task %s still exists after cancel", ct.Name)
	}
	if got := e.getTask(sr.TaskID); got.State != api.Cancelled {
		t.Fatalf("stored state %s", got.State)
	}
	// A late `started` for the cancelled task is refused.
	res, err := e.st.Apply(e.ctx, sr.TaskID, task.Event{Kind: task.EventStarted, Attempt: 1, Now: time.Now(), WorkerID: "w"})
	if err != nil || res.Rejection == nil || res.Rejection.Code != api.CodeTaskAlreadyTerminal {
		t.Fatalf("late started: %v %+v", err, res.Rejection)
	}
}

// A PENDING task (Cloud Tasks down) becomes CANCELLED; the failed deletion
// is best effort and does not fail the cancel. The default reason is
// user_requested.
func TestCancelPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ctDown: true, config: func(c *Config) { c.CloudTasksTimeout = 300 * time.Millisecond }})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	if sr.State != api.Pending {
		t.Fatalf("state %s, want PENDING", sr.State)
	}
	var v api.Task
	e.cancelTask(sr.TaskID, "", http.StatusOK).decode(t, &v)
	if v.State != api.Cancelled || v.Reason != api.ReasonUserRequested || v.CancelReason != api.ReasonUserRequested {
		t.Fatalf("cancel answer = %+v", v)
	}
}

// A RUNNING task becomes CANCELLING with cancelDeadline = now + grace; a
// second cancel leaves it so; the worker's CANCELLED report ends it, after
// which a cancel is 409.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	clk := servotest.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	e := newEnv(t, envOptions{paused: true, config: func(c *Config) { c.Now = clk.Now }})
	body := validSubmit("acme")
	body["cancelGracePeriodMs"] = 4500
	sr := e.submit(body, http.StatusCreated)
	e.start(sr.TaskID, 1)

	var v api.Task
	e.cancelTask(sr.TaskID, "", http.StatusOK).decode(t, &v)
	want := clk.Now().Add(4500 * time.Millisecond)
	if v.State != api.Cancelling || v.CancelDeadline == nil || !v.CancelDeadline.Equal(want) || v.Reason != api.ReasonUserRequested {
		t.Fatalf("cancel answer = state %s cancelDeadline %v reason %q, want CANCELLING %v", v.State, v.CancelDeadline, v.Reason, want)
	}
	if v.EndedAt != nil || len(v.Attempts) != 1 || v.Attempts[0].WorkerID != "worker-1" || v.Attempts[0].Outcome != "" {
		t.Fatalf("attempts = %+v", v.Attempts)
	}

	// Cancelling again is idempotent: same deadline.
	clk.Set(clk.Now().Add(time.Second))
	var again api.Task
	e.cancelTask(sr.TaskID, "again", http.StatusOK).decode(t, &again)
	if again.State != api.Cancelling || !again.CancelDeadline.Equal(want) {
		t.Fatalf("second cancel = %s %v", again.State, again.CancelDeadline)
	}

	e.complete(sr.TaskID, 1, api.OutcomeCancelled)
	r := e.cancelTask(sr.TaskID, "", http.StatusConflict)
	if eb := r.err(t); eb.Code != api.CodeTaskAlreadyTerminal || eb.State != api.Cancelled {
		t.Fatalf("cancel of a cancelled task = %+v", eb)
	}
}

// Terminal tasks answer 409 task_already_terminal with their state and
// are not changed.
func TestCancelTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	for _, c := range []struct {
		name string
		end  func(id string)
		want api.State
	}{
		{"succeeded", func(id string) { e.start(id, 1); e.complete(id, 1, api.OutcomeSucceeded) }, api.Succeeded},
		{"failed", func(id string) { e.start(id, 1); e.complete(id, 1, api.OutcomeFailed) }, api.Failed},
		{"cancelled", func(id string) { e.cancelTask(id, "", http.StatusOK) }, api.Cancelled},
	} {
		t.Run(c.name, func(t *testing.T) {
			sr := e.submit(validSubmit("acme"), http.StatusCreated)
			c.end(sr.TaskID)
			before := e.storedTask(sr.TaskID)
			r := e.cancelTask(sr.TaskID, "too late", http.StatusConflict)
			if eb := r.err(t); eb.Code != api.CodeTaskAlreadyTerminal || eb.State != c.want || eb.Message == "" {
				t.Fatalf("answer = %+v", eb)
			}
			after := e.storedTask(sr.TaskID)
			if after.Seq != before.Seq || after.State != c.want || after.Reason != before.Reason {
				t.Fatalf("409 changed the task: %+v → %+v", before, after)
			}
		})
	}
}

// A run cancel cancels every non-terminal task of the run (across pages)
// and reports counts; other runs are untouched; a repeat finds nothing left
// to cancel.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	e.h.runPageSize = 2 // several pages
	run := task.NewRunID(time.Now())
	submitIn := func(runID string) api.SubmitResponse {
		b := validSubmit("acme")
		b["runId"] = runID
		return e.submit(b, http.StatusCreated)
	}
	var queued []string
	for range 3 {
		queued = append(queued, submitIn(run).TaskID)
	}
	running := submitIn(run).TaskID
	e.start(running, 1)
	done := submitIn(run).TaskID
	e.start(done, 1)
	e.complete(done, 1, api.OutcomeSucceeded)
	other := submitIn(task.NewRunID(time.Now())).TaskID

	r := e.do("POST", "/v1/runs/"+run+"/cancel", map[string]any{"reason": "run aborted"}, "")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var rc api.RunCancelResponse
	r.decode(t, &rc)
	want := api.RunCancelResponse{RunID: run, Matched: 5, Cancelled: 3, Cancelling: 1, AlreadyTerminal: 1}
	if rc != want {
		t.Fatalf("run cancel = %+v, want %+v", rc, want)
	}
	for _, id := range queued {
		st := e.storedTask(id)
		if st.State != api.Cancelled || st.Reason != "run aborted" {
			t.Errorf("%s: %s %q, want CANCELLED", id, st.State, st.Reason)
		}
		if e.cloudTask(&st) != nil {
			t.Errorf("%s: Cloud Task not deleted", id)
		}
	}
	if st := e.storedTask(running); st.State != api.Cancelling || st.CancelDeadline == nil {
		t.Errorf("running task: %s, want CANCELLING with a deadline", st.State)
	}
	if st := e.storedTask(done); st.State != api.Succeeded {
		t.Errorf("finished task: %s", st.State)
	}
	if st := e.storedTask(other); st.State != api.Queued {
		t.Errorf("other run's task: %s, want QUEUED", st.State)
	}

	// Again: only the CANCELLING task is still active, and stays so.
	r = e.do("POST", "/v1/runs/"+run+"/cancel", nil, "")
	r.decode(t, &rc)
	want = api.RunCancelResponse{RunID: run, Matched: 5, Cancelling: 1, AlreadyTerminal: 4}
	if r.status != http.StatusOK || rc != want {
		t.Fatalf("repeat = %d %+v, want %+v", r.status, rc, want)
	}
}

// Concurrent cancels of one QUEUED task: exactly one transition; the
// others see a terminal task. (Three callers: the Firestore emulator
// resolves transaction contention slowly, see the package README.)
func TestCancelConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	const n = 3
	got := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = e.do("POST", "/v1/tasks/"+sr.TaskID+"/cancel", nil, "").status })
	}
	wg.Wait()
	ok := 0
	for _, s := range got {
		switch s {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
		default:
			t.Fatalf("statuses %v", got)
		}
	}
	if ok != 1 {
		t.Fatalf("statuses %v: want exactly one 200", got)
	}
	outbox, err := e.st.OutboxEntries(e.ctx, sr.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, o := range outbox {
		if o.To == api.Cancelled {
			cancelled++
		}
	}
	if cancelled != 1 {
		t.Fatalf("%d CANCELLED events, want 1: %s", cancelled, fmt.Sprint(outbox))
	}
}
