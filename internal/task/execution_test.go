package task

import (
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
)

// TestExecutionRecord covers EventExecution, the compare-and-set that
// records a job attempt's Cloud Run execution.
func TestExecutionRecord(t *testing.T) {
	const e1, e2 = "projects/p/locations/l/jobs/j/executions/e1", "projects/p/locations/l/jobs/j/executions/e2"
	cases := []struct {
		name           string
		state          api.State
		recorded       string
		attempt        int
		exec, previous string
		write          bool
		want           string // recorded afterwards
		code           string
	}{
		{"first record while queued", api.Queued, "", 1, e1, "", true, e1, ""},
		{"first record while pending", api.Pending, "", 1, e1, "", true, e1, ""},
		{"record after the job started", api.Running, "", 1, e1, "", true, e1, ""},
		{"record while cancelling", api.Cancelling, "", 1, e1, "", true, e1, ""},
		{"same execution again", api.Queued, e1, 1, e1, "", false, e1, ""},
		{"another execution: conflict", api.Queued, e1, 1, e2, "", false, e1, api.CodeExecutionConflict},
		{"replacing the expected one", api.Queued, e1, 1, e2, e1, true, e2, ""},
		{"replacing one not recorded", api.Queued, e2, 1, e1, "other", false, e2, api.CodeExecutionConflict},
		{"replacing, none recorded", api.Queued, "", 1, e2, e1, true, e2, ""},
		{"older attempt", api.Queued, "", 2, e1, "", false, "", api.CodeAttemptMismatch},
		{"terminal task", api.Cancelled, "", 1, e1, "", false, "", api.CodeTaskAlreadyTerminal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(c.state)
			a.Execution = c.recorded
			if c.attempt != 1 {
				tk.Attempt = c.attempt
			}
			before := tk
			r := Apply(tk, a, Event{Kind: EventExecution, Attempt: 1, Now: t0.Add(time.Second), Execution: c.exec, PreviousExecution: c.previous})
			if r.Write != c.write {
				t.Fatalf("write = %v, want %v", r.Write, c.write)
			}
			got := ""
			if r.Attempt != nil {
				got = r.Attempt.Execution
			}
			if got != c.want && !(c.attempt != 1 || c.state.Terminal()) {
				t.Fatalf("execution = %q, want %q", got, c.want)
			}
			code := ""
			if r.Rejection != nil {
				code = r.Rejection.Code
			}
			if code != c.code {
				t.Fatalf("rejection = %q, want %q", code, c.code)
			}
			if r.Task.State != before.State || len(r.Transitions) != 0 || r.Task.Seq != before.Seq {
				t.Fatalf("recording an execution changed the task: %s seq %d, %d transitions", r.Task.State, r.Task.Seq, len(r.Transitions))
			}
			if r.Enqueue || r.Dequeue || r.CancelExecution != "" {
				t.Fatalf("recording asked for a follow-up: %+v", r)
			}
		})
	}
}

// TestTimersCancelTheExecution: the transitions that end a job attempt
// against its will (timers, a cancel before the job said started) ask the
// caller to cancel the execution; the others do not.
func TestTimersCancelTheExecution(t *testing.T) {
	const exec = "projects/p/locations/l/jobs/j/executions/e1"
	late := t0.Add(time.Hour)
	cases := []struct {
		name      string
		state     api.State
		kind      EventKind
		execution string
		want      string
	}{
		{"lease expired, retry", api.Running, EventLeaseExpired, exec, exec},
		{"lease expired while cancelling", api.Cancelling, EventLeaseExpired, exec, exec},
		{"cancel grace over", api.Cancelling, EventCancelTimeout, exec, exec},
		{"push worker: nothing to cancel", api.Running, EventLeaseExpired, "", ""},
		{"heartbeat from the job after expiry", api.Running, EventHeartbeat, exec, exec},
		{"cancelled before the job said started", api.Queued, EventCancel, exec, exec},
		{"completed in time", api.Running, EventCompleted, exec, ""},
		{"heartbeat in time", api.Running, EventHeartbeat, exec, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, a := taskIn(c.state)
			a.Execution = c.execution
			ev := eventFor(c.kind, late)
			if (c.want == "" && c.execution != "") || c.kind == EventCancel {
				ev.Now = t0.Add(time.Second)
			}
			r := Apply(tk, a, ev)
			if r.CancelExecution != c.want {
				t.Fatalf("CancelExecution = %q, want %q (state %s → %s)", r.CancelExecution, c.want, c.state, r.Task.State)
			}
		})
	}
}
