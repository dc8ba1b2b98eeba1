package stacktest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/servotest"
)

// API is a test's client of a Servo control API (a local stack's, say):
// JSON requests, and tasks as GET /v1/tasks/{id} shows them. Its methods
// fail T as servotest.Do and servotest.WaitFor do.
type API struct {
	T testing.TB
	// URL is the API's base URL (devstack.Stack's URL).
	URL string
}

// Do sends a request to the API's path, as servotest.Do, and returns the
// answer's status and body.
func (a API) Do(method, path string, body any, header ...string) (int, []byte) {
	a.T.Helper()
	r := servotest.Do(a.T, method, a.URL+path, body, header...)
	return r.Status, r.Body
}

// Submit submits a task (POST /v1/tasks with body) and returns the
// answer; it fails the test unless the task was created (201).
func (a API) Submit(body any) api.SubmitResponse {
	a.T.Helper()
	status, out := a.Do(http.MethodPost, "/v1/tasks", body)
	if status != http.StatusCreated {
		a.T.Fatalf("submit: %d %s", status, out)
	}
	var r api.SubmitResponse
	if err := json.Unmarshal(out, &r); err != nil {
		a.T.Fatalf("submit: %v: %s", err, out)
	}
	return r
}

// Task returns the task id.
func (a API) Task(id string) api.Task {
	a.T.Helper()
	return servotest.GetJSON[api.Task](a.T, a.URL+"/v1/tasks/"+id)
}

// WaitFor waits until ok holds for the task id and returns it; after
// servotest.WaitTimeout it fails the test, naming what it waited for, with the
// task's state and attempts.
func (a API) WaitFor(id, what string, ok func(api.Task) bool) api.Task {
	a.T.Helper()
	return servotest.WaitFor(a.T, "task "+id+" to reach "+what, func() api.Task { return a.Task(id) }, ok, DescribeTask)
}

// WaitState waits until the task id is in state s and returns it.
func (a API) WaitState(id string, s api.State) api.Task {
	a.T.Helper()
	return a.WaitFor(id, string(s), func(v api.Task) bool { return v.State == s })
}

// DescribeTask is a task's state and attempts, for a failure message.
func DescribeTask(v api.Task) string {
	return fmt.Sprintf("it is %s (%s), attempt %d; attempts: %s", v.State, v.Reason, v.Attempt, Attempts(v))
}

// Attempts is the task's attempts in brief, for a failure message: each
// one's number, outcome, worker, error, execution, checkpoint and output.
func Attempts(v api.Task) string {
	var b strings.Builder
	for _, a := range v.Attempts {
		fmt.Fprintf(&b, "[#%d %s worker=%s", a.Attempt, a.Outcome, a.WorkerID)
		if a.Error != nil {
			fmt.Fprintf(&b, " error=%s %q", a.Error.Category, a.Error.Message)
		}
		if a.Execution != "" {
			fmt.Fprintf(&b, " execution=%s", a.Execution)
		}
		fmt.Fprintf(&b, " checkpoint=%s output=%s] ", a.Checkpoint, a.Output)
	}
	return b.String()
}

// AttemptOutput is the attempt's output decoded from JSON; it fails t
// unless the output is a T.
func AttemptOutput[T any](t testing.TB, a api.Attempt) T {
	t.Helper()
	var o T
	if err := json.Unmarshal(a.Output, &o); err != nil {
		t.Fatalf("attempt %d output %s: %v", a.Attempt, a.Output, err)
	}
	return o
}

// Callback posts a worker's callback of kind (started, heartbeat,
// completed) for the envelope's attempt with its token, as a worker does,
// and returns the answer's status and body.
func Callback(t testing.TB, en api.Envelope, kind string, body any) (int, api.CallbackResponse) {
	t.Helper()
	r := servotest.Do(t, http.MethodPost, en.CallbackBaseURL+"/v1/tasks/"+en.TaskID+"/"+kind, body, "Authorization", "Bearer "+en.TaskToken)
	var cr api.CallbackResponse
	_ = json.Unmarshal(r.Body, &cr) // a status without a body says enough
	return r.Status, cr
}
