package sdkcontract_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

// Paced heartbeats (docs/contract.md §5.7), in every SDK's contract: a
// worker that follows nextHeartbeatInMs keeps its lease through a task
// many leases long, refreshes a token that would expire during it, and
// makes far fewer heartbeat requests than one heartbeating at its
// interval; a worker that ignores the hint (its answers lose the field, as
// an older Servo's would) heartbeats at its interval, as before, and is
// unaffected; a cancel during a paced task is seen within the stated
// bound, so the worker winds down within the grace period.

// pacedPool is the pull pool of the paced scenarios.
const pacedPool = "paced"

// shortTokenTTL is the lifetime of the short-token tasks' first token:
// shorter than the task, so the attempt fails (401 token_expired) unless
// a heartbeat refreshes it in time.
const shortTokenTTL = 20 * time.Second

// PacedLongEnv, set to anything, makes the long paced tasks run a literal
// five minutes (3 steps of 100 s) instead of 30 s.
const PacedLongEnv = "SERVO_SDKCONTRACT_PACED_5M"

// pacedTimers: a 1 s interval and a 4 s lease; the grace (8 s) leaves the
// lease bound deciding the hint: 4 s - max(1.5 s, 1 s) = 2.5 s.
var pacedTimers = map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 4000, "cancelGracePeriodMs": 8000}

// cancelTimers: the grace (6 s) decides the hint (3 s, under the lease
// bound's 12 s - 3 s = 9 s): a worker told to wait out the lease bound
// instead would see a cancel only after its grace ran out.
var cancelTimers = map[string]any{"heartbeatIntervalMs": 1000, "heartbeatTimeoutMs": 12000, "cancelGracePeriodMs": 6000}

func pacedPayload() map[string]any {
	stepMs := 10_000
	if os.Getenv(PacedLongEnv) != "" {
		stepMs = 100_000
	}
	// A checkpoint and a progress change every step; plain heartbeats
	// between them.
	return map[string]any{"steps": 3, "stepMs": stepMs}
}

func init() {
	scenarios = append(scenarios,
		scenario{name: "paced long task", modes: []string{"push", "pull"}, fault: faultShortToken, payload: pacedPayload(),
			timers: pacedTimers, pool: pacedPool, check: pacedLongTask(false)},
		scenario{name: "long task ignoring the hint", modes: []string{"push", "pull"}, fault: faultIgnoreHint, payload: pacedPayload(),
			timers: pacedTimers, pool: pacedPool, check: pacedLongTask(true)},
		scenario{name: "cancel a paced task", modes: []string{"push", "pull"}, payload: map[string]any{"steps": 3, "stepMs": 10_000},
			timers: cancelTimers, pool: pacedPool, check: cancelPacedTask},
	)
}

// hintsOf checks every 200 answer to `started` and `heartbeat`: a hint of
// at least the interval and at most most; it returns how many were longer
// than the interval.
func hintsOf(t *testing.T, answers []cbAnswer, interval, most time.Duration) (longer int) {
	t.Helper()
	for _, an := range answers {
		if an.status != http.StatusOK || (an.op != "started" && an.op != "heartbeat") {
			continue
		}
		h := time.Duration(an.resp.NextHeartbeatInMs) * time.Millisecond
		switch {
		case h < interval || h > most:
			t.Errorf("%s answered nextHeartbeatInMs %d, want %v to %v", an.op, an.resp.NextHeartbeatInMs, interval, most)
		case h > interval:
			longer++
		}
	}
	return longer
}

// pacedLongTask: the attempt (3 steps of 10 s, a 4 s lease, a 20 s first
// token) succeeds as attempt 1, with no timer waited out and no 401, after
// a heartbeat answer refreshed the token, which `completed` then used. A
// worker following the hint (ignore false) made under 60% of the heartbeat
// requests one heartbeating at its 1 s interval would over the attempt's
// run (by Servo's clock; some 40% here), one ignoring it (ignore true) at
// least that many (some 95%): counted at the proxy.
func pacedLongTask(ignore bool) func(t *testing.T, e *env, mode, id string) {
	return func(t *testing.T, e *env, _ string, id string) {
		v := e.waitState(t, id, api.Succeeded)
		neverLeaseLost(t, v)
		if len(v.Attempts) != 1 {
			t.Fatalf("attempts %s, want one", stacktest.Attempts(v))
		}
		a := v.Attempts[0]
		if a.StartedAt == nil || a.CompletedAt == nil {
			t.Fatalf("attempt 1 has no start or completion: %s", stacktest.Attempts(v))
		}
		e.proxy.mu.Lock()
		shortExp := e.proxy.shortTokens[id+"/1"]
		e.proxy.mu.Unlock()
		if shortExp.IsZero() || !a.CompletedAt.After(shortExp) {
			t.Fatalf("attempt 1 ended at %s, before its short token expired (%s): the scenario proves nothing", a.CompletedAt, shortExp)
		}
		answers := e.proxy.answersOf(id, 1)
		refreshed := 0
		var shortAuth, completedAuth string
		for _, an := range answers {
			if an.status == http.StatusUnauthorized {
				t.Errorf("%s answered 401 %s: the token was not refreshed in time", an.op, an.resp.Error)
			}
			if an.resp.TaskToken != "" {
				refreshed++
			}
			if shortAuth == "" {
				shortAuth = an.auth
			}
			if an.op == "completed" && an.status == http.StatusOK {
				completedAuth = an.auth
			}
		}
		if refreshed == 0 {
			t.Errorf("no heartbeat answer refreshed the %v token", shortTokenTTL)
		}
		if completedAuth == "" || completedAuth == shortAuth {
			t.Errorf("`completed` was not accepted with the refreshed token")
		}
		longer := hintsOf(t, answers, time.Second, 2500*time.Millisecond)
		if longer == 0 {
			t.Errorf("no answer hinted a wait longer than the interval")
		}
		beats := len(e.proxy.count(id, 1, "heartbeat"))
		atInterval := int(a.CompletedAt.Sub(*a.StartedAt) / time.Second)
		t.Logf("%d heartbeat requests over %v (%d at the 1 s interval), %d answers hinting longer, %d token refreshes",
			beats, a.CompletedAt.Sub(*a.StartedAt).Round(time.Millisecond), atInterval, longer, refreshed)
		switch {
		case !ignore && beats*10 >= atInterval*6:
			t.Errorf("a worker following the hint made %d heartbeat requests in %d intervals, want under 60%%", beats, atInterval)
		case ignore && beats*10 < atInterval*6:
			t.Errorf("a worker ignoring the hint made %d heartbeat requests in %d intervals, want its interval's (60%% at least)", beats, atInterval)
		}
	}
}

// cancelPacedTask: cancelled just after a heartbeat answer (the worker
// then waits the hint), a paced task sees the cancel in the next
// heartbeat's answer, within max(interval, grace / 2) = 3 s (and a round
// trip), and reports CANCELLED within its 6 s grace; every hint was at
// most 3 s. A worker told to wait the lease bound (9 s) would end
// CANCEL_TIMEOUT.
func cancelPacedTask(t *testing.T, e *env, _ string, id string) {
	heartbeatAnswered := func() bool {
		for _, an := range e.proxy.answersOf(id, 1) {
			if an.op == "heartbeat" && an.status == http.StatusOK {
				return true
			}
		}
		return false
	}
	if !eventually(90*time.Second, heartbeatAnswered) {
		t.Fatalf("no heartbeat of attempt 1 was answered")
	}
	cancelAt := time.Now()
	if status, out := e.do(t, "POST", "/v1/tasks/"+id+"/cancel", map[string]any{"reason": "user_requested"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, out)
	}
	v := e.waitFor(t, id, "an end", func(v api.Task) bool { return v.State.Terminal() })
	if v.State != api.Cancelled || len(v.Attempts) != 1 || v.Attempts[0].Outcome != api.OutcomeCancelled {
		t.Fatalf("attempts %s, want attempt 1 CANCELLED within the grace period", stacktest.Attempts(v))
	}
	answers := e.proxy.answersOf(id, 1)
	hintsOf(t, answers, time.Second, 3*time.Second)
	for _, an := range answers {
		if an.resp.ShouldCancel != nil && *an.resp.ShouldCancel {
			t.Logf("the cancel was seen %v after it was requested (bound: 3 s and a round trip)", an.at.Sub(cancelAt).Round(time.Millisecond))
			return
		}
	}
	t.Errorf("no heartbeat answer said shouldCancel")
}
