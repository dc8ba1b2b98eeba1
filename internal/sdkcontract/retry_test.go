package sdkcontract_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

// Per-category retry policies (docs/contract.md §6.3), in every SDK's
// contract: an attempt failed with the SDK's CONFLICT error class (Go
// worker.Conflict, Python ConflictError, TypeScript ConflictError) is
// reported with the category CONFLICT and retried by the policy the submit
// gave that category in retry.byCategory, not by the task's own: more
// attempts than the task's maxAttempts, each after the category's (short)
// backoff; GET /v1/tasks/{id} shows on each such attempt the policy in
// force for its category (attempts[i].retryPolicy).

// conflictFails is how many attempts of the conflict scenario fail with
// CONFLICT before one succeeds.
const conflictFails = 3

// conflictRetry is the conflict scenario's submit retry: the task's own
// policy allows 2 attempts (it would end FAILED RETRIES_EXHAUSTED after
// attempt 2); CONFLICT's allows 4, with the contract test's usual short
// backoff (100-200 ms, as fastTimers' tasks have).
var conflictRetry = map[string]any{
	"maxAttempts": 2,
	"byCategory": map[string]any{
		"CONFLICT": map[string]any{"maxAttempts": conflictFails + 1, "initialBackoffMs": 100, "maxBackoffMs": 200},
	},
}

// withRetry is timers (nil: fastTimers) with the submit's retry object:
// submitTimed copies a scenario's timers into the submit body, over its
// default retry.
func withRetry(timers, retry map[string]any) map[string]any {
	if timers == nil {
		timers = fastTimers
	}
	m := maps.Clone(timers)
	m["retry"] = retry
	return m
}

func init() {
	scenarios = append(scenarios,
		scenario{name: "conflict retried by its own policy", modes: []string{"push", "pull", "job"},
			// 6 steps: attempt 1 fails at step 3, attempts 2 and 3 (resumed
			// from the checkpoint) at their first step, 4 and 5; attempt 4
			// resumes from 5 and succeeds.
			payload: map[string]any{"steps": 6, "stepMs": 20, "failAttempts": conflictFails, "failCategory": "CONFLICT"},
			timers:  withRetry(nil, conflictRetry), check: conflictRetried},
	)
}

// retriedTask is the part of GET /v1/tasks/{id} the conflict scenario
// reads: the attempts with the retry policy each failed one was judged by.
type retriedTask struct {
	State    api.State `json:"state"`
	Attempts []struct {
		Attempt     int            `json:"attempt"`
		Outcome     api.Outcome    `json:"outcome"`
		CreatedAt   time.Time      `json:"createdAt"`
		ScheduledAt *time.Time     `json:"scheduledAt"`
		Error       *api.ErrorInfo `json:"error"`
		RetryPolicy *struct {
			MaxAttempts        int     `json:"maxAttempts"`
			InitialBackoffMs   int64   `json:"initialBackoffMs"`
			BackoffCoefficient float64 `json:"backoffCoefficient"`
			MaxBackoffMs       int64   `json:"maxBackoffMs"`
		} `json:"retryPolicy"`
	} `json:"attempts"`
}

// conflictRetried: the task SUCCEEDED on attempt 4, beyond the task's
// maxAttempts (2); attempts 1-3 FAILED with the category CONFLICT and each
// shows CONFLICT's policy (maxAttempts 4, 100-200 ms, coefficient 2) as its
// retryPolicy; every retry was scheduled within CONFLICT's 200 ms cap (its
// default policy would wait up to 5 s, then 10 s).
func conflictRetried(t *testing.T, e *env, _ string, id string) {
	v := e.waitFor(t, id, "an end", func(v api.Task) bool { return v.State.Terminal() })
	if v.State != api.Succeeded || len(v.Attempts) != conflictFails+1 {
		t.Fatalf("the task is %s (%s) after attempts %s; want SUCCEEDED on attempt %d (the task's maxAttempts is 2, CONFLICT's %d)",
			v.State, v.Reason, stacktest.Attempts(v), conflictFails+1, conflictFails+1)
	}
	neverLeaseLost(t, v)
	if o := outputOf(t, v.Attempts[conflictFails]); o.Attempt != conflictFails+1 || o.ResumedFrom+o.Processed != 6 {
		t.Errorf("attempt %d's output %+v, want its own, resumed from the last checkpoint", conflictFails+1, o)
	}
	status, body := e.do(t, http.MethodGet, "/v1/tasks/"+id, nil)
	var rt retriedTask
	if status != http.StatusOK {
		t.Fatalf("GET /v1/tasks/%s: %d %s", id, status, body)
	}
	if err := json.Unmarshal(body, &rt); err != nil {
		t.Fatalf("GET /v1/tasks/%s: %v: %s", id, err, body)
	}
	if len(rt.Attempts) != conflictFails+1 {
		t.Fatalf("GET /v1/tasks/%s has %d attempts, want %d: %s", id, len(rt.Attempts), conflictFails+1, body)
	}
	for i, a := range rt.Attempts {
		if i < conflictFails {
			switch rp := a.RetryPolicy; {
			case a.Outcome != api.OutcomeFailed || a.Error == nil || a.Error.Category != api.CategoryConflict:
				t.Errorf("attempt %d ended %s with error %+v, want FAILED with the category CONFLICT", a.Attempt, a.Outcome, a.Error)
			case rp == nil:
				t.Errorf("attempt %d (FAILED/CONFLICT) shows no retryPolicy", a.Attempt)
			case rp.MaxAttempts != conflictFails+1 || rp.InitialBackoffMs != 100 || rp.MaxBackoffMs != 200 || rp.BackoffCoefficient != 2:
				t.Errorf("attempt %d's retryPolicy is %+v, want CONFLICT's: maxAttempts %d, initialBackoffMs 100, backoffCoefficient 2, maxBackoffMs 200",
					a.Attempt, *rp, conflictFails+1)
			}
		}
		if i == 0 {
			continue
		}
		// A retry's attempt is created when the failure before it is
		// judged, and scheduled after the backoff (full jitter under the
		// category's cap).
		if a.ScheduledAt == nil || a.ScheduledAt.Sub(a.CreatedAt) > 200*time.Millisecond {
			t.Errorf("attempt %d was created at %s and scheduled at %v: want within CONFLICT's 200 ms backoff cap",
				a.Attempt, a.CreatedAt, a.ScheduledAt)
		}
	}
}
