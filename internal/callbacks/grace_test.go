package callbacks_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/task"
)

// TestCancelGraceOutcomeIndependentOfOrder: a completed SUCCEEDED that
// arrives after the cancel grace ends the task the same way whether the
// sweeper's cancel timeout ran before it or not: FAILED CANCEL_TIMEOUT,
// attempt 1 CANCEL_TIMEOUT, one CANCELLING→FAILED transition. Only the
// answer differs: 410 task_expired when the callback applied the timeout,
// 409 task_already_terminal when the sweeper had; both CANCELLED.
func TestCancelGraceOutcomeIndependentOfOrder(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name         string
		sweeperFirst bool
		status       int
		code         string
		sweeperWrote bool
	}{
		{"callback first", false, http.StatusGone, api.CodeTaskExpired, false},
		{"sweeper first", true, http.StatusConflict, api.CodeTaskAlreadyTerminal, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			tk := e.cancellingSince("w1", testTiming.CancelGracePeriod()+time.Second)
			sweep := func() task.Result {
				return e.apply(tk.ID, task.Event{Kind: task.EventCancelTimeout, Attempt: 1})
			}
			var swept task.Result
			if c.sweeperFirst {
				swept = sweep()
			}
			rp := e.post(callbacks.KindCompleted, tk.ID, e.token(tk, 1), completedReq(1, "w1", api.OutcomeSucceeded))
			if !c.sweeperFirst {
				swept = sweep()
			}
			if rp.status != c.status || rp.resp.Error != c.code || rp.resp.Disposition != api.Cancel {
				t.Fatalf("answer %d %s, want %d %s CANCELLED", rp.status, rp.raw, c.status, c.code)
			}
			if swept.Write != c.sweeperWrote {
				t.Errorf("sweeper wrote %v, want %v", swept.Write, c.sweeperWrote)
			}
			got := e.get(tk.ID)
			if got.State != api.Failed || got.Reason != api.ReasonCancelTimeout || got.Attempts[0].Outcome != api.OutcomeCancelTimeout {
				t.Errorf("task %s %s, attempt 1 %s; want FAILED CANCEL_TIMEOUT, CANCEL_TIMEOUT", got.State, got.Reason, got.Attempts[0].Outcome)
			}
			tr := e.outboxTransitions(tk.ID)
			if n := len(slices.DeleteFunc(slices.Clone(tr), func(s string) bool { return s != "CANCELLING>FAILED" })); n != 1 || tr[len(tr)-1] != "CANCELLING>FAILED" {
				t.Errorf("outbox %v, want one CANCELLING>FAILED, last", tr)
			}
		})
	}
}
