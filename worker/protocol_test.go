package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// Protocol unit tests against the scripted fakeServo: the SDK's own logic
// (retries, backoff, dispositions, token adoption, answers to Cloud Tasks).

func TestProtocolHappyPath(t *testing.T) {
	f := newFake(t, nil)
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		var in struct{ Rows int }
		if err := tk.Decode(&in); err != nil {
			return nil, err
		}
		tk.Progress(50, "half way")
		if err := tk.Checkpoint(map[string]int{"next": 1}); err != nil {
			return nil, err
		}
		// Run until Servo has seen a heartbeat with the checkpoint and a
		// later one without it (acknowledged checkpoints are not resent).
		f.waitFor(func(c call) bool {
			return c.op == "heartbeat" && !strings.Contains(string(c.body), "checkpoint") && len(f.ops("heartbeat")) >= 2
		})
		return map[string]int{"rows": in.Rows}, nil
	})
	status, ans := deliverEnv(t, h, f.envelope())
	if status != http.StatusOK || ans.Result != "committed" || ans.Outcome != "SUCCEEDED" || ans.FinalState != api.Succeeded || ans.WorkerID != "w-1" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	all := f.ops("")
	if all[0].op != "started" || all[len(all)-1].op != "completed" {
		t.Fatalf("order: first %s last %s", all[0].op, all[len(all)-1].op)
	}
	for _, c := range all {
		if c.auth != "Bearer tok-1" {
			t.Fatalf("%s sent Authorization %q", c.op, c.auth)
		}
	}
	st := decode[api.StartedRequest](t, f.ops("started")[0].body)
	if len(f.ops("started")) != 1 || st.Attempt != 1 || st.WorkerID != "w-1" || st.StartedAt == nil || task.ValidateStarted(&st) != nil {
		t.Fatalf("started %+v", st)
	}
	var withCheckpoint int
	for _, c := range f.ops("heartbeat") {
		hb := decode[api.HeartbeatRequest](t, c.body)
		if task.ValidateHeartbeat(&hb) != nil || hb.WorkerID != "w-1" || hb.ProgressPct == nil || *hb.ProgressPct != 50 || hb.Message != "half way" {
			t.Fatalf("heartbeat %s", c.body)
		}
		if string(hb.Checkpoint) == `{"next":1}` {
			withCheckpoint++
		}
	}
	if withCheckpoint != 1 {
		t.Fatalf("the checkpoint was sent %d times, want once", withCheckpoint)
	}
	cs := f.ops("completed")
	if len(cs) != 1 {
		t.Fatalf("%d completed reports", len(cs))
	}
	c := decode[api.CompletedRequest](t, cs[0].body)
	if c.Outcome != api.OutcomeSucceeded || string(c.Output) != `{"rows":3}` || c.Metrics == nil || c.Metrics.PeakMemoryBytes <= 0 || c.CompletedAt == nil || task.ValidateCompleted(&c) != nil {
		t.Fatalf("completed %s", cs[0].body)
	}
}

func TestProtocolStartedRetriedOnTransientFailures(t *testing.T) {
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if op != "started" {
			return fakeAnswer{}
		}
		switch n {
		case 1:
			return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
		case 2:
			return fakeAnswer{hijack: true}
		case 3:
			return fakeAnswer{status: http.StatusBadGateway, raw: "<html>502 Bad Gateway</html>"}
		case 4:
			return fakeAnswer{status: http.StatusServiceUnavailable, raw: "upstream", header: map[string]string{"Retry-After": "0"}}
		}
		return fakeAnswer{}
	})
	var calls atomic.Int32
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) {
		calls.Add(1)
		return nil, nil
	})
	status, ans := deliverEnv(t, h, f.envelope())
	if status != http.StatusOK || ans.Result != "committed" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	if n := len(f.ops("started")); n != 5 {
		t.Fatalf("%d started tries, want 5", n)
	}
	if calls.Load() != 1 || len(f.ops("completed")) != 1 {
		t.Fatalf("function ran %d times, %d completed", calls.Load(), len(f.ops("completed")))
	}
}

func TestProtocolStartedRefusedNeverRunsFunction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer fakeAnswer
		result string
	}{
		{"duplicate delivery", refuse(http.StatusConflict, api.CodeAttemptAlreadyStarted, api.Cancel), "not_started"},
		{"task terminal", refuse(http.StatusConflict, api.CodeTaskAlreadyTerminal, api.Cancel), "not_started"},
		{"older attempt", refuse(http.StatusConflict, api.CodeAttemptMismatch, api.Cancel), "not_started"},
		{"lease expired", refuse(http.StatusGone, api.CodeTaskExpired, api.Cancel), "not_started"},
		{"409 without body", fakeAnswer{status: http.StatusConflict, raw: "conflict"}, "not_started"},
		{"expired token", refuse(http.StatusUnauthorized, api.CodeTokenExpired, api.Rejected), "rejected"},
		{"unknown task", refuse(http.StatusNotFound, api.CodeTaskNotFound, api.Rejected), "rejected"},
		{"scope mismatch", refuse(http.StatusForbidden, api.CodeTokenScopeMismatch, api.Rejected), "rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(op string, _ int, _ []byte) fakeAnswer {
				if op == "started" {
					return tc.answer
				}
				return fakeAnswer{}
			})
			var calls atomic.Int32
			h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) {
				calls.Add(1)
				return nil, nil
			})
			status, ans := deliverEnv(t, h, f.envelope())
			if status != http.StatusOK || ans.Result != tc.result {
				t.Fatalf("answer %d %+v, want 200 %s", status, ans, tc.result)
			}
			if calls.Load() != 0 {
				t.Fatal("the function ran without Servo's permission")
			}
			if n := len(f.ops("")); n != 1 {
				t.Fatalf("%d callbacks, want only the one started (no retry, no report)", n)
			}
		})
	}
}

func TestProtocolStartedUnreachableAnswers503(t *testing.T) {
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if n%2 == 0 {
			return fakeAnswer{hijack: true}
		}
		return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
	})
	var calls atomic.Int32
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) {
		calls.Add(1)
		return nil, nil
	}, worker.WithStartRetryWindow(300*time.Millisecond))
	status, ans := deliverEnv(t, h, f.envelope())
	if status != http.StatusServiceUnavailable || ans.Result != "servo_unreachable" {
		t.Fatalf("answer %d %+v, want 503 so Cloud Tasks redelivers", status, ans)
	}
	if calls.Load() != 0 || len(f.ops("started")) < 2 || len(f.ops("heartbeat"))+len(f.ops("completed")) != 0 {
		t.Fatalf("fn %d, callbacks %d", calls.Load(), len(f.ops("")))
	}
}

func TestProtocolLostAuthorityStopsAndReportsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer fakeAnswer
		is     error
		code   string
		result string
	}{
		{"410 lease expired", refuse(http.StatusGone, api.CodeTaskExpired, api.Cancel), worker.ErrLeaseLost, api.CodeTaskExpired, "lease_lost"},
		{"409 newer attempt", refuse(http.StatusConflict, api.CodeAttemptMismatch, api.Cancel), worker.ErrLeaseLost, api.CodeAttemptMismatch, "lease_lost"},
		{"409 task terminal", refuse(http.StatusConflict, api.CodeTaskAlreadyTerminal, api.Cancel), worker.ErrLeaseLost, api.CodeTaskAlreadyTerminal, "lease_lost"},
		{"401 rejected", refuse(http.StatusUnauthorized, api.CodeTokenExpired, api.Rejected), worker.ErrRejected, api.CodeTokenExpired, "rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
				if op == "heartbeat" && n >= 2 {
					return tc.answer
				}
				return fakeAnswer{}
			})
			var cause error
			h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return map[string]string{"late": "result"}, nil // must not be reported
			})
			status, ans := deliverEnv(t, h, f.envelope())
			if status != http.StatusOK || ans.Result != tc.result || ans.Code != tc.code {
				t.Fatalf("answer %d %+v", status, ans)
			}
			if !errors.Is(cause, tc.is) {
				t.Fatalf("cause %v, want %v", cause, tc.is)
			}
			var lost *worker.LeaseLostError
			var rej *worker.RejectedError
			if !(errors.As(cause, &lost) && lost.Code == tc.code) && !(errors.As(cause, &rej) && rej.Code == tc.code && rej.Op == "heartbeat") {
				t.Fatalf("cause %#v does not carry code %s", cause, tc.code)
			}
			if n := len(f.ops("completed")); n != 0 {
				t.Fatalf("%d completed reports after losing authority", n)
			}
			if n := len(f.ops("heartbeat")); n != 2 {
				t.Fatalf("%d heartbeats, want none after the refusal", n)
			}
		})
	}
}

func TestProtocolHeartbeatUnreachableUntilTokenExpiry(t *testing.T) {
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if op == "heartbeat" {
			if n%2 == 0 {
				return fakeAnswer{hijack: true}
			}
			return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
		}
		return fakeAnswer{}
	})
	env := f.envelope()
	env.TokenExpiresAt = time.Now().Add(700 * time.Millisecond)
	var cause error
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil, ctx.Err()
	})
	status, ans := deliverEnv(t, h, env)
	var lost *worker.LeaseLostError
	if !errors.As(cause, &lost) || lost.Code != "servo_unreachable" {
		t.Fatalf("cause %v", cause)
	}
	if status != http.StatusOK || ans.Result != "lease_lost" || len(f.ops("completed")) != 0 || len(f.ops("heartbeat")) < 2 {
		t.Fatalf("answer %d %+v; %d heartbeats %d completed", status, ans, len(f.ops("heartbeat")), len(f.ops("completed")))
	}
}

// When no heartbeat has been acknowledged for heartbeatTimeoutMs (counted
// from `started`, then from the last acknowledged heartbeat) the SDK fences
// the attempt: the Func's context ends with ErrLeaseLost, nothing is
// reported, and Cloud Tasks gets 200 (the control plane decides on the next
// attempt).
func TestProtocolHeartbeatTimeoutFencesAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// acks is how many heartbeats are acknowledged before Servo is cut off.
		acks   int
		silent fakeAnswer
	}{
		{"partition after started: requests hang", 0, fakeAnswer{hang: true}},
		{"partition after started: connections reset", 0, fakeAnswer{hijack: true}},
		{"Servo answers only RETRY", 0, refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)},
		{"partition after 5 acknowledged heartbeats", 5, fakeAnswer{hang: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
				if op == "heartbeat" && n > tc.acks {
					return tc.silent
				}
				return fakeAnswer{}
			})
			env := f.envelope()
			env.HeartbeatIntervalMs, env.HeartbeatTimeoutMs = 200, 600
			env.TokenExpiresAt = time.Now().Add(time.Minute) // far beyond the fence
			var cause error
			var sentAtFence int
			h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
				select {
				case <-ctx.Done():
					cause, sentAtFence = context.Cause(ctx), len(f.ops("heartbeat"))
				case <-time.After(15 * time.Second):
					// Not fenced: return, as a Func would when done.
				}
				return map[string]string{"late": "result"}, nil // must not be reported
			})
			status, ans := deliverEnv(t, h, env)
			var lost *worker.LeaseLostError
			if !errors.Is(cause, worker.ErrLeaseLost) || !errors.As(cause, &lost) || lost.Code != worker.CodeHeartbeatTimeout {
				t.Fatalf("cause %v, want a LeaseLostError %s", cause, worker.CodeHeartbeatTimeout)
			}
			if status != http.StatusOK || ans.Result != "lease_lost" || ans.Code != worker.CodeHeartbeatTimeout {
				t.Fatalf("answer %d %+v, want 200 lease_lost", status, ans)
			}
			if n := len(f.ops("completed")); n != 0 {
				t.Fatalf("%d completed reports for a fenced attempt", n)
			}
			// Counted from the last acknowledgement, not from started: every
			// acknowledged heartbeat moved the fence, and the one after them
			// had gone out before it fell.
			if sentAtFence < tc.acks+1 {
				t.Fatalf("fenced after %d heartbeats, want after the %d acknowledged ones and one more", sentAtFence, tc.acks)
			}
		})
	}
}

func TestProtocolShouldCancelReportsCancelled(t *testing.T) {
	yes := true
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if op == "heartbeat" && n >= 2 {
			return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Continue, ShouldCancel: &yes, CancelReason: "user_requested"}}
		}
		if op == "completed" {
			return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Committed, FinalState: api.Cancelled}}
		}
		return fakeAnswer{}
	})
	var cause error
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		tk.SetPhase("copying")
		for i := 0; ; i++ {
			if err := tk.Checkpoint(map[string]int{"nextPartition": i}); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	status, ans := deliverEnv(t, h, f.envelope())
	var ce *worker.CancelledError
	if !errors.As(cause, &ce) || ce.Reason != "user_requested" || !errors.Is(cause, worker.ErrCancelled) {
		t.Fatalf("cause %v", cause)
	}
	if status != http.StatusOK || ans.Result != "committed" || ans.Outcome != "CANCELLED" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	cs := f.ops("completed")
	if len(cs) != 1 {
		t.Fatalf("%d completed", len(cs))
	}
	c := decode[api.CompletedRequest](t, cs[0].body)
	if c.Outcome != api.OutcomeCancelled || c.CancelledDuringPhase != "copying" || !strings.HasPrefix(string(c.PartialProgress), `{"nextPartition":`) {
		t.Fatalf("completed %s", cs[0].body)
	}
}

func TestProtocolAdoptsRefreshedToken(t *testing.T) {
	fresh := time.Now().Add(time.Hour).UTC()
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		switch {
		case op == "heartbeat" && n == 1:
			return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Continue, TaskToken: "tok-2", TokenExpiresAt: &fresh}}
		case op == "completed" && n == 1:
			return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
		}
		return fakeAnswer{}
	})
	env := f.envelope()
	// The first token expires while the function runs: only the adopted
	// one keeps `completed` within its retry window.
	env.TokenExpiresAt = time.Now().Add(time.Second)
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		f.waitFor(func(c call) bool { return c.op == "heartbeat" && c.auth == "Bearer tok-2" })
		for time.Now().Before(env.TokenExpiresAt) {
			time.Sleep(50 * time.Millisecond)
		}
		return nil, nil
	})
	status, ans := deliverEnv(t, h, env)
	if status != http.StatusOK || ans.Result != "committed" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	if a := f.ops("heartbeat")[0].auth; a != "Bearer tok-1" {
		t.Fatalf("first heartbeat used %q", a)
	}
	cs := f.ops("completed")
	if len(cs) != 2 || cs[0].auth != "Bearer tok-2" || cs[1].auth != "Bearer tok-2" {
		t.Fatalf("completed tries %d, auth %q", len(cs), cs[0].auth)
	}
}

func TestProtocolCompletedExactlyOnceThroughRetries(t *testing.T) {
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if op != "completed" {
			return fakeAnswer{}
		}
		switch n {
		case 1:
			return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
		case 2:
			return fakeAnswer{hijack: true}
		case 3:
			return fakeAnswer{status: http.StatusGatewayTimeout, raw: "timeout"}
		}
		return fakeAnswer{}
	})
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) {
		return json.RawMessage(`{"ok":true}`), nil
	})
	status, ans := deliverEnv(t, h, f.envelope())
	if status != http.StatusOK || ans.Result != "committed" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	cs := f.ops("completed")
	if len(cs) != 4 {
		t.Fatalf("%d completed tries, want 4", len(cs))
	}
	for _, c := range cs[1:] {
		if string(c.body) != string(cs[0].body) {
			t.Fatalf("a retry changed the report:\n%s\n%s", cs[0].body, c.body)
		}
	}
	// Nothing after COMMITTED: not another completed, not a heartbeat.
	n := len(f.ops(""))
	time.Sleep(300 * time.Millisecond)
	if len(f.ops("")) != n {
		t.Fatal("callbacks after COMMITTED")
	}
}

func TestProtocolCompletedFinalAnswersNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer fakeAnswer
		result string
	}{
		{"completion conflict", refuse(http.StatusConflict, api.CodeCompletionConflict, api.Rejected), "rejected"},
		{"terminal", refuse(http.StatusConflict, api.CodeTaskAlreadyTerminal, api.Cancel), "discarded"},
		{"expired lease", refuse(http.StatusGone, api.CodeTaskExpired, api.Cancel), "discarded"},
		{"invalid request", fakeAnswer{status: 400, resp: api.CallbackResponse{Disposition: api.Rejected, Error: api.CodeInvalidRequest, Field: "output"}}, "rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(op string, _ int, _ []byte) fakeAnswer {
				if op == "completed" {
					return tc.answer
				}
				return fakeAnswer{}
			})
			h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) { return nil, errors.New("boom") })
			status, ans := deliverEnv(t, h, f.envelope())
			if status != http.StatusOK || ans.Result != tc.result || ans.Outcome != "FAILED" {
				t.Fatalf("answer %d %+v", status, ans)
			}
			if n := len(f.ops("completed")); n != 1 {
				t.Fatalf("%d completed, want exactly one", n)
			}
		})
	}
}

// A Servo answer (a JSON body with a disposition) is obeyed whatever its
// status: REJECTED, CANCELLED and COMMITTED are final and the callback is
// sent exactly once, even with a status a gateway would use for a
// transient failure.
func TestProtocolServoDispositionFinalWhateverStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     string
		answer fakeAnswer
		result string
		ran    bool
	}{
		{"started REJECTED 500", "started", refuse(http.StatusInternalServerError, "internal", api.Rejected), "rejected", false},
		{"started REJECTED 429", "started", refuse(http.StatusTooManyRequests, "rate_limited", api.Rejected), "rejected", false},
		{"started CANCELLED 502", "started", refuse(http.StatusBadGateway, api.CodeTaskAlreadyTerminal, api.Cancel), "not_started", false},
		{"heartbeat REJECTED 429", "heartbeat", refuse(http.StatusTooManyRequests, "rate_limited", api.Rejected), "rejected", true},
		{"heartbeat CANCELLED 504", "heartbeat", refuse(http.StatusGatewayTimeout, api.CodeTaskExpired, api.Cancel), "lease_lost", true},
		{"completed REJECTED 500", "completed", refuse(http.StatusInternalServerError, "internal", api.Rejected), "rejected", true},
		{"completed REJECTED 429", "completed", refuse(http.StatusTooManyRequests, "rate_limited", api.Rejected), "rejected", true},
		{"completed REJECTED 408", "completed", refuse(http.StatusRequestTimeout, "timeout", api.Rejected), "rejected", true},
		{"completed CANCELLED 502", "completed", refuse(http.StatusBadGateway, api.CodeAttemptMismatch, api.Cancel), "discarded", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(op string, _ int, _ []byte) fakeAnswer {
				if op == tc.op {
					a := tc.answer
					a.header = map[string]string{"Retry-After": "0"}
					return a
				}
				return fakeAnswer{}
			})
			var ran atomic.Bool
			h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
				ran.Store(true)
				if tc.op == "heartbeat" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			})
			status, ans := deliverEnv(t, h, f.envelope())
			if status != http.StatusOK || ans.Result != tc.result {
				t.Fatalf("answer %d %+v, want 200 %s", status, ans, tc.result)
			}
			if n := len(f.ops(tc.op)); n != 1 {
				t.Fatalf("%s sent %d times, want exactly once", tc.op, n)
			}
			if ran.Load() != tc.ran {
				t.Fatalf("function ran: %v, want %v", ran.Load(), tc.ran)
			}
			if tc.op != "completed" && len(f.ops("completed")) != 0 {
				t.Fatal("completed reported after a final answer")
			}
		})
	}
}

// Answers without a Servo body come from the infrastructure in front of
// Servo: the request may not have reached it, so it is sent again.
func TestProtocolGatewayAnswersRetried(t *testing.T) {
	gateway := []fakeAnswer{
		{status: http.StatusBadGateway, raw: "<html><body>502 Bad Gateway</body></html>"},
		{status: http.StatusGatewayTimeout},
		{status: http.StatusTooManyRequests, raw: "Too Many Requests", header: map[string]string{"Retry-After": "0"}},
		{status: http.StatusServiceUnavailable, raw: "no healthy upstream"},
	}
	for _, op := range []string{"started", "heartbeat", "completed"} {
		t.Run(op, func(t *testing.T) {
			f := newFake(t, func(o string, n int, _ []byte) fakeAnswer {
				if o == op && n <= len(gateway) {
					return gateway[n-1]
				}
				return fakeAnswer{}
			})
			h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
				if op == "heartbeat" {
					f.waitFor(func(c call) bool { return c.op == "heartbeat" && len(f.ops("heartbeat")) > len(gateway) })
				}
				return nil, nil
			})
			status, ans := deliverEnv(t, h, f.envelope())
			if status != http.StatusOK || ans.Result != "committed" {
				t.Fatalf("answer %d %+v", status, ans)
			}
			if n := len(f.ops(op)); n < len(gateway)+1 {
				t.Fatalf("%s sent %d times, want %d (every gateway answer retried)", op, n, len(gateway)+1)
			}
		})
	}
}

func TestProtocolCompletedUnreachableAnswers503(t *testing.T) {
	f := newFake(t, func(op string, _ int, _ []byte) fakeAnswer {
		if op == "completed" {
			return refuse(http.StatusServiceUnavailable, api.CodeUnavailable, api.Retry)
		}
		return fakeAnswer{}
	})
	env := f.envelope()
	env.TokenExpiresAt = time.Now().Add(500 * time.Millisecond)
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) { return nil, nil })
	status, ans := deliverEnv(t, h, env)
	if status != http.StatusServiceUnavailable || ans.Result != "servo_unreachable" || ans.Outcome != "SUCCEEDED" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	if len(f.ops("completed")) < 2 {
		t.Fatal("completed was not retried")
	}
}

func TestProtocolPanicReportedAsUserCodeFailure(t *testing.T) {
	f := newFake(t, nil)
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) {
		var m map[string]int
		m["x"] = 1 // assignment to entry in nil map
		return nil, nil
	})
	status, ans := deliverEnv(t, h, f.envelope())
	if status != http.StatusOK || ans.Result != "committed" || ans.Outcome != "FAILED" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	c := decode[api.CompletedRequest](t, f.ops("completed")[0].body)
	if c.Error == nil || c.Error.Category != api.CategoryUserCode || !strings.Contains(c.Error.Message, "nil map") ||
		!strings.Contains(c.Error.StackTrace, "TestProtocolPanicReportedAsUserCodeFailure") {
		t.Fatalf("completed %s", f.ops("completed")[0].body)
	}
}

func TestProtocolFailureFlushesCheckpointFirst(t *testing.T) {
	f := newFake(t, nil)
	env := f.envelope()
	env.HeartbeatIntervalMs = 60_000 // no heartbeat would go out during the call
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		if err := tk.Checkpoint(map[string]int{"nextPartition": 2}); err != nil {
			return nil, err
		}
		return nil, worker.Infrastructure(errors.New("bucket unavailable"))
	})
	status, ans := deliverEnv(t, h, env)
	if status != http.StatusOK || ans.Outcome != "FAILED" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	all := f.ops("")
	if len(all) != 3 || all[1].op != "heartbeat" || all[2].op != "completed" {
		t.Fatalf("calls %v", all)
	}
	hb := decode[api.HeartbeatRequest](t, all[1].body)
	c := decode[api.CompletedRequest](t, all[2].body)
	if string(hb.Checkpoint) != `{"nextPartition":2}` || c.Error.Category != api.CategoryInfrastructure || c.Error.Message != "bucket unavailable" {
		t.Fatalf("heartbeat %s completed %s", all[1].body, all[2].body)
	}
}

func TestProtocolCheckpointBringsHeartbeatForward(t *testing.T) {
	f := newFake(t, nil)
	env := f.envelope()
	// The early heartbeat goes out at most interval/4 = 500 ms after
	// started; the regular one not before 1.7 s. The function returns as
	// soon as Servo saw a heartbeat, so exactly one was sent: the early one
	// (with the last of the three checkpoints).
	env.HeartbeatIntervalMs = 2_000
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		for i := range 3 {
			if err := tk.Checkpoint(map[string]int{"i": i}); err != nil {
				return nil, err
			}
		}
		f.waitFor(func(c call) bool { return c.op == "heartbeat" })
		return nil, nil
	})
	if status, ans := deliverEnv(t, h, env); status != http.StatusOK || ans.Result != "committed" {
		t.Fatalf("answer %d %+v", status, ans)
	}
	hbs := f.ops("heartbeat")
	if len(hbs) != 1 || string(decode[api.HeartbeatRequest](t, hbs[0].body).Checkpoint) != `{"i":2}` {
		t.Fatalf("heartbeats %d, first %s", len(hbs), hbs[0].body)
	}
}

func TestProtocolDeadlineIsTimeout(t *testing.T) {
	f := newFake(t, nil)
	env := f.envelope()
	d := time.Now().Add(200 * time.Millisecond)
	env.Deadline = &d
	var cause error
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil, ctx.Err()
	})
	deliverEnv(t, h, env)
	if !errors.Is(cause, worker.ErrDeadlineExceeded) {
		t.Fatalf("cause %v", cause)
	}
	c := decode[api.CompletedRequest](t, f.ops("completed")[0].body)
	if c.Outcome != api.OutcomeFailed || c.Error.Category != api.CategoryTimeout {
		t.Fatalf("completed %+v", c)
	}
}

func TestProtocolDuplicateDeliveryJoinsRunningAttempt(t *testing.T) {
	f := newFake(t, nil)
	release := make(chan struct{})
	var calls atomic.Int32
	h, logs := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		calls.Add(1)
		<-release
		return "done", nil
	})
	env := f.envelope()
	type res struct {
		status int
		ans    deliveryAnswer
	}
	first, second := make(chan res, 1), make(chan res, 1)
	go func() { s, a := deliverEnv(t, h, env); first <- res{s, a} }()
	f.waitFor(func(c call) bool { return c.op == "started" })
	go func() { s, a := deliverEnv(t, h, env); second <- res{s, a} }()
	logs.waitFor(t, "duplicate delivery")
	close(release)
	a, b := <-first, <-second
	if a.status != 200 || b.status != 200 || a.ans.Result != "committed" || b.ans != a.ans {
		t.Fatalf("answers %+v %+v", a, b)
	}
	if calls.Load() != 1 || len(f.ops("started")) != 1 || len(f.ops("completed")) != 1 {
		t.Fatalf("fn %d started %d completed %d", calls.Load(), len(f.ops("started")), len(f.ops("completed")))
	}
}

func TestProtocolBadDeliveries(t *testing.T) {
	var calls atomic.Int32
	h, _ := testHandler(t, func(context.Context, *worker.Task) (any, error) { calls.Add(1); return nil, nil })
	f := newFake(t, nil)
	noToken := f.envelope()
	noToken.TaskToken = ""
	b, _ := json.Marshal(noToken)
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		result string
	}{
		{"not JSON", []byte("hello"), 400, "bad_envelope"},
		{"no token", b, 400, "bad_envelope"},
		{"empty", nil, 400, "bad_envelope"},
		{"too large", []byte(`{"payload":"` + strings.Repeat("x", worker.MaxEnvelopeBytes) + `"}`), 413, "envelope_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ans := deliver(t, h, tc.body)
			if status != tc.status || ans.Result != tc.result {
				t.Fatalf("answer %d %+v", status, ans)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	rec := newRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Fatalf("GET answered %d", rec.Code)
	}
	if calls.Load() != 0 || len(f.ops("")) != 0 {
		t.Fatal("a bad delivery reached the function or Servo")
	}
}

func TestProtocolLogLinesCarryIDsNeverToken(t *testing.T) {
	fresh := time.Now().Add(time.Hour).UTC()
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		switch {
		case op == "heartbeat" && n == 1:
			return fakeAnswer{status: 200, resp: api.CallbackResponse{Acknowledged: true, Disposition: api.Continue, TaskToken: "tok-secret-2", TokenExpiresAt: &fresh}}
		case op == "heartbeat" && n == 2:
			return fakeAnswer{hijack: true}
		case op == "completed":
			return refuse(http.StatusConflict, api.CodeCompletionConflict, api.Rejected)
		}
		return fakeAnswer{}
	})
	env := f.envelope()
	env.TaskToken = "tok-secret-1"
	h, logs := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		tk.Logger().Info("user line")
		f.waitFor(func(c call) bool { return c.op == "heartbeat" && len(f.ops("heartbeat")) >= 3 })
		return nil, errors.New("boom")
	})
	deliverEnv(t, h, env)
	lines := logs.all()
	if len(lines) < 5 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, l := range lines {
		if l.attrs["taskId"] != env.TaskID || l.attrs["attempt"] != "1" || l.attrs["tenantId"] != "acme" {
			t.Errorf("log line without taskId/attempt/tenantId: %s", l.text)
		}
		if strings.Contains(l.text, "tok-secret") {
			t.Errorf("log line carries a token: %s", l.text)
		}
	}
}

// BenchmarkDelivery measures the SDK's cost of one attempt with a Func that
// returns at once: decoding the envelope, `started`, the meter, the outcome
// and `completed` (two HTTP round trips to an in-process fake Servo).
func BenchmarkDelivery(b *testing.B) {
	f := newFake(b, nil)
	h := worker.Handler(func(context.Context, *worker.Task) (any, error) { return map[string]int{"rows": 1}, nil },
		worker.WithWorkerID("bench"), worker.WithLogger(slog.New(slog.DiscardHandler)))
	env := f.envelope()
	body, _ := json.Marshal(env)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(f.ops("")))/float64(b.N), "callbacks/op")
}

// The fence is counted from when the acknowledged request was sent, not
// from when its answer arrived: Servo counts the lease from when it
// processed the request. With every heartbeat answered CONTINUE only after
// a delay D, interval I and heartbeatTimeoutMs T such that D+I < T < 2D+I,
// a clock started at the answers' arrival never fences (acknowledgements
// arrive every D+I), while the lease, counted from the sending, runs out
// before the second heartbeat's answer (sent-to-answer 2D+I after the first
// heartbeat was sent): the SDK must fence.
func TestProtocolFenceCountedFromSending(t *testing.T) {
	const delay = time.Second
	f := newFake(t, func(op string, n int, _ []byte) fakeAnswer {
		if op == "heartbeat" {
			time.Sleep(delay)
		}
		return fakeAnswer{}
	})
	env := f.envelope()
	env.HeartbeatIntervalMs, env.HeartbeatTimeoutMs = 200, 1800
	env.TokenExpiresAt = time.Now().Add(time.Minute)
	var cause error
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(12 * time.Second):
			// Not fenced in 12 s (about ten slow acknowledgements).
		}
		return nil, nil
	})
	status, ans := deliverEnv(t, h, env)
	var lost *worker.LeaseLostError
	if !errors.As(cause, &lost) || lost.Code != worker.CodeHeartbeatTimeout {
		t.Fatalf("cause %v, want a LeaseLostError %s: the fence must count from the heartbeat's sending", cause, worker.CodeHeartbeatTimeout)
	}
	if status != http.StatusOK || ans.Result != "lease_lost" || len(f.ops("completed")) != 0 {
		t.Fatalf("answer %d %+v, %d completed; want 200 lease_lost and none", status, ans, len(f.ops("completed")))
	}
}
