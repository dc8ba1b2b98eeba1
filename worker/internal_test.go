package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func TestBackoffBounds(t *testing.T) {
	initial, maxDelay := 100*time.Millisecond, 2*time.Second
	for _, tc := range []struct {
		try      int
		min, max time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, time.Second, 2 * time.Second},
		{60, time.Second, 2 * time.Second}, // no overflow
	} {
		for i := 0; i < 200; i++ {
			d := backoff(tc.try, initial, maxDelay)
			if d < tc.min || d >= tc.max {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v)", tc.try, d, tc.min, tc.max)
			}
		}
	}
}

// servoBody is a callback answer as Servo writes it.
func servoBody(d api.Disposition, code string) string {
	b, err := json.Marshal(api.CallbackResponse{Disposition: d, Error: code, Message: code, ServerTime: time.Now()})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestJudge covers every row of docs/contract.md §4.4 as the worker sees it, plus the
// answers of the infrastructure in front of Servo (no Servo body).
func TestJudge(t *testing.T) {
	const html = "<html><body>502 Bad Gateway</body></html>"
	googleJSON := `{"error":{"code":429,"message":"Rate exceeded.","status":"RESOURCE_EXHAUSTED"}}`
	for _, tc := range []struct {
		name       string
		op         string
		status     int
		body       string
		retryAfter string
		want       api.Disposition
		wantAfter  time.Duration
	}{
		// docs/contract.md §4.4, row by row.
		{"started accepted", opStarted, 200, servoBody(api.Continue, ""), "", api.Continue, 0},
		{"heartbeat accepted", opHeartbeat, 200, servoBody(api.Continue, ""), "", api.Continue, 0},
		{"completed accepted", opCompleted, 200, servoBody(api.Committed, ""), "", api.Committed, 0},
		{"task terminal", opStarted, 409, servoBody(api.Cancel, api.CodeTaskAlreadyTerminal), "", api.Cancel, 0},
		{"older attempt", opCompleted, 409, servoBody(api.Cancel, api.CodeAttemptMismatch), "", api.Cancel, 0},
		{"duplicate delivery", opStarted, 409, servoBody(api.Cancel, api.CodeAttemptAlreadyStarted), "", api.Cancel, 0},
		{"lease lost", opHeartbeat, 410, servoBody(api.Cancel, api.CodeTaskExpired), "", api.Cancel, 0},
		{"completion conflict", opCompleted, 409, servoBody(api.Rejected, api.CodeCompletionConflict), "", api.Rejected, 0},
		{"invalid request", opHeartbeat, 400, servoBody(api.Rejected, api.CodeInvalidRequest), "", api.Rejected, 0},
		{"invalid token", opStarted, 401, servoBody(api.Rejected, api.CodeInvalidToken), "", api.Rejected, 0},
		{"expired token", opHeartbeat, 401, servoBody(api.Rejected, api.CodeTokenExpired), "", api.Rejected, 0},
		{"scope mismatch", opCompleted, 403, servoBody(api.Rejected, api.CodeTokenScopeMismatch), "", api.Rejected, 0},
		{"unknown task", opStarted, 404, servoBody(api.Rejected, api.CodeTaskNotFound), "", api.Rejected, 0},
		{"too large", opHeartbeat, 413, servoBody(api.Rejected, api.CodePayloadTooLarge), "", api.Rejected, 0},
		{"not JSON", opCompleted, 415, servoBody(api.Rejected, api.CodeUnsupportedMediaType), "", api.Rejected, 0},
		{"unavailable", opCompleted, 503, servoBody(api.Retry, api.CodeUnavailable), "2", api.Retry, 2 * time.Second},
		{"unavailable without Retry-After", opStarted, 503, servoBody(api.Retry, api.CodeUnavailable), "", api.Retry, 0},
		// A Servo disposition is final whatever the status.
		{"REJECTED 500", opCompleted, 500, servoBody(api.Rejected, "internal"), "", api.Rejected, 0},
		{"REJECTED 429", opHeartbeat, 429, servoBody(api.Rejected, "rate_limited"), "3", api.Rejected, 0},
		{"REJECTED 502", opStarted, 502, servoBody(api.Rejected, "x"), "", api.Rejected, 0},
		{"REJECTED 408", opCompleted, 408, servoBody(api.Rejected, "x"), "", api.Rejected, 0},
		{"CANCELLED 504", opHeartbeat, 504, servoBody(api.Cancel, api.CodeTaskExpired), "", api.Cancel, 0},
		{"COMMITTED 503", opCompleted, 503, servoBody(api.Committed, ""), "", api.Committed, 0},
		// Answers without a Servo body: the infrastructure in front of Servo.
		{"gateway 502 page", opCompleted, 502, html, "", api.Retry, 0},
		{"gateway 504 empty", opHeartbeat, 504, "", "", api.Retry, 0},
		{"gateway 429 page", opStarted, 429, "Too Many Requests", "1", api.Retry, time.Second},
		{"gateway 429 Google JSON", opStarted, 429, googleJSON, "", api.Retry, 0},
		{"gateway 503 page", opCompleted, 503, "upstream connect error", "4", api.Retry, 4 * time.Second},
		{"gateway 500 page", opHeartbeat, 500, "Internal Server Error", "", api.Retry, 0},
		{"gateway 408 empty", opStarted, 408, "", "", api.Retry, 0},
		{"JSON without a disposition", opCompleted, 502, `{"error":"bad_gateway"}`, "", api.Retry, 0},
		{"unknown disposition", opCompleted, 503, `{"disposition":"MAYBE"}`, "", api.Retry, 0},
		{"bare 200 started", opStarted, 200, "", "", api.Continue, 0},
		{"bare 200 completed", opCompleted, 200, "", "", api.Committed, 0},
		{"bare 409", opStarted, 409, "conflict", "", api.Cancel, 0},
		{"bare 410", opHeartbeat, 410, "", "", api.Cancel, 0},
		{"bare 404", opStarted, 404, "404 page not found", "", api.Rejected, 0},
		{"bare 401", opCompleted, 401, "", "", api.Rejected, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.op, tc.status, []byte(tc.body), tc.retryAfter)
			if got.disp != tc.want || got.retryAfter != tc.wantAfter || got.status != tc.status {
				t.Fatalf("judge(%s, %d, %q) = %s (Retry-After %v), want %s (%v)", tc.op, tc.status, tc.body, got.disp, got.retryAfter, tc.want, tc.wantAfter)
			}
			if knownDisposition(got.resp.Disposition) != strings.HasPrefix(tc.body, `{"acknowledged"`) {
				t.Fatalf("Servo's body kept = %v for %q", got.resp.Disposition, tc.body)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for h, want := range map[string]time.Duration{"": 0, "2": 2 * time.Second, " 1 ": time.Second, "Wed, 21 Oct 2015 07:28:00 GMT": 0, "-3": 0} {
		if got := retryAfter(h); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestOutcome(t *testing.T) {
	cancelCause := &CancelledError{Reason: "user_requested"}
	big := strings.Repeat("x", api.MaxOutputBytes)
	for _, tc := range []struct {
		name      string
		cause     error
		out       any
		err       error
		panicked  *panicked
		outcome   api.Outcome
		category  api.Category
		retryable *bool
		output    string
		message   string
	}{
		{name: "success with output", out: map[string]int{"rows": 3}, outcome: api.OutcomeSucceeded, output: `{"rows":3}`},
		{name: "success raw output", out: json.RawMessage(` {"a": 1} `), outcome: api.OutcomeSucceeded, output: `{"a":1}`},
		{name: "success no output", outcome: api.OutcomeSucceeded},
		{name: "success despite cancel", cause: cancelCause, out: 1, outcome: api.OutcomeSucceeded, output: `1`},
		{name: "unencodable output", out: func() {}, outcome: api.OutcomeFailed, category: api.CategoryUserCode, retryable: boolPtr(false)},
		{name: "output too large", out: big, outcome: api.OutcomeFailed, category: api.CategoryUserCode, retryable: boolPtr(false)},
		{name: "plain error", err: errors.New("boom"), outcome: api.OutcomeFailed, category: api.CategoryUserCode, message: "boom"},
		{name: "data quality", err: DataQuality(errors.New("bad row")), outcome: api.OutcomeFailed, category: api.CategoryDataQuality, message: "bad row"},
		{name: "wrapped infrastructure", err: fmt.Errorf("partition 3: %w", Infrastructure(errors.New("gcs 503"))), outcome: api.OutcomeFailed,
			category: api.CategoryInfrastructure, message: "partition 3: INFRASTRUCTURE: gcs 503"},
		{name: "configuration", err: Configuration(errors.New("no BUCKET")), outcome: api.OutcomeFailed, category: api.CategoryConfiguration},
		{name: "timeout", err: Timeout(errors.New("slow")), outcome: api.OutcomeFailed, category: api.CategoryTimeout},
		{name: "retry advice", err: WithRetryable(Infrastructure(errors.New("quota")), false), outcome: api.OutcomeFailed,
			category: api.CategoryInfrastructure, retryable: boolPtr(false)},
		{name: "retry advice on plain", err: WithRetryable(errors.New("x"), false), outcome: api.OutcomeFailed,
			category: api.CategoryUserCode, retryable: boolPtr(false)},
		{name: "worker cancels itself", err: Cancelled(errors.New("not needed")), outcome: api.OutcomeCancelled},
		{name: "servo cancel, ctx error", cause: cancelCause, err: context.Canceled, outcome: api.OutcomeCancelled},
		{name: "servo cancel, plain error", cause: cancelCause, err: errors.New("stopped"), outcome: api.OutcomeCancelled},
		{name: "servo cancel, wrapped ctx error in infra", cause: cancelCause, err: Infrastructure(fmt.Errorf("rpc: %w", context.Canceled)), outcome: api.OutcomeCancelled},
		{name: "servo cancel, real data error", cause: cancelCause, err: DataQuality(errors.New("bad")), outcome: api.OutcomeFailed, category: api.CategoryDataQuality},
		{name: "deadline", cause: ErrDeadlineExceeded, err: context.DeadlineExceeded, outcome: api.OutcomeFailed, category: api.CategoryTimeout},
		{name: "panic", panicked: &panicked{value: "kaboom", stack: []byte("goroutine 1 [running]:\nmain.f()")}, outcome: api.OutcomeFailed,
			category: api.CategoryUserCode, message: "panic: kaboom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := NewTestTask(api.Envelope{TaskID: "task_x", Attempt: 1}, nil)
			if err := tk.Checkpoint(map[string]int{"next": 4}); err != nil {
				t.Fatal(err)
			}
			tk.SetPhase("loading")
			req := outcome(tc.cause, tc.out, tc.err, tc.panicked, tk)
			if req.Outcome != tc.outcome {
				t.Fatalf("outcome %s, want %s (%+v)", req.Outcome, tc.outcome, req.Error)
			}
			if string(req.Output) != tc.output {
				t.Errorf("output %s, want %s", req.Output, tc.output)
			}
			switch req.Outcome {
			case api.OutcomeFailed:
				if req.Error == nil || req.Error.Category != tc.category {
					t.Fatalf("error %+v, want category %s", req.Error, tc.category)
				}
				if tc.message != "" && req.Error.Message != tc.message {
					t.Errorf("message %q, want %q", req.Error.Message, tc.message)
				}
				if (tc.retryable == nil) != (req.Error.Retryable == nil) || (tc.retryable != nil && *tc.retryable != *req.Error.Retryable) {
					t.Errorf("retryable %v, want %v", req.Error.Retryable, tc.retryable)
				}
				if tc.panicked != nil && !strings.Contains(req.Error.StackTrace, "goroutine 1") {
					t.Errorf("stack %q", req.Error.StackTrace)
				}
			case api.OutcomeCancelled:
				if string(req.PartialProgress) != `{"next":4}` || req.CancelledDuringPhase != "loading" {
					t.Errorf("cancelled report %s / %q", req.PartialProgress, req.CancelledDuringPhase)
				}
			}
			req.Attempt, req.WorkerID = 1, "w"
			if ferr := task.ValidateCompleted(&req); ferr != nil {
				t.Fatalf("the report would be refused: %v", ferr)
			}
		})
	}
}

func TestOutcomeTruncatesStack(t *testing.T) {
	tk := NewTestTask(api.Envelope{TaskID: "task_x", Attempt: 1}, nil)
	req := outcome(nil, nil, nil, &panicked{value: strings.Repeat("é", api.MaxMessageBytes), stack: []byte(strings.Repeat("ü", api.MaxStackTraceBytes))}, tk)
	if len(req.Error.StackTrace) > api.MaxStackTraceBytes || len(req.Error.Message) > api.MaxMessageBytes {
		t.Fatalf("not truncated: stack %d message %d", len(req.Error.StackTrace), len(req.Error.Message))
	}
	req.Attempt, req.WorkerID = 1, "w"
	if ferr := task.ValidateCompleted(&req); ferr != nil {
		t.Fatal(ferr)
	}
}

func TestTaskCheckpointAndDecode(t *testing.T) {
	tk := NewTestTask(api.Envelope{TaskID: "task_x", Attempt: 2, Payload: json.RawMessage(`{"partitions":3}`),
		ResumeFrom: json.RawMessage(`{"nextPartition":2}`), TaskToken: "secret"}, nil)
	if tk.Envelope().TaskToken != "" {
		t.Fatal("the envelope handed to the function must not carry the token")
	}
	var in struct{ Partitions int }
	if err := tk.Decode(&in); err != nil || in.Partitions != 3 {
		t.Fatalf("decode: %v %+v", err, in)
	}
	var bad struct{ Partitions string }
	err := tk.Decode(&bad)
	var we *Error
	if !errors.As(err, &we) || we.Category != api.CategoryDataQuality {
		t.Fatalf("a payload that does not decode is DATA_QUALITY, got %v", err)
	}
	var cp struct{ NextPartition int }
	if ok, err := tk.DecodeResumeFrom(&cp); !ok || err != nil || cp.NextPartition != 2 {
		t.Fatalf("resume: %v %v %+v", ok, err, cp)
	}
	for _, raw := range []string{"", "null", " null "} {
		empty := NewTestTask(api.Envelope{ResumeFrom: json.RawMessage(raw)}, nil)
		if ok, err := empty.DecodeResumeFrom(&cp); ok || err != nil {
			t.Fatalf("resumeFrom %q: %v %v", raw, ok, err)
		}
	}
	if err := tk.Checkpoint(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("invalid raw JSON accepted")
	}
	if err := tk.Checkpoint(strings.Repeat("x", api.MaxCheckpointBytes)); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Fatalf("want ErrCheckpointTooLarge, got %v", err)
	}
	if err := tk.Checkpoint(map[string]int{"nextPartition": 3}); err != nil {
		t.Fatal(err)
	}
	if string(tk.LastCheckpoint()) != `{"nextPartition":3}` {
		t.Fatalf("checkpoint %s", tk.LastCheckpoint())
	}
	tk.Progress(150, strings.Repeat("m", api.MaxMessageBytes+10))
	pct, msg, ok := tk.LastProgress()
	if !ok || pct != 100 || len(msg) != api.MaxMessageBytes {
		t.Fatalf("progress %d %d %v", pct, len(msg), ok)
	}
	hb, v := tk.heartbeat(2, "w", time.Now())
	if string(hb.Checkpoint) != `{"nextPartition":3}` || *hb.ProgressPct != 100 || v.cp != 1 || !tk.changed() {
		t.Fatalf("heartbeat %+v v%+v", hb, v)
	}
	tk.acked(v)
	if hb, _ = tk.heartbeat(2, "w", time.Now()); hb.Checkpoint != nil || tk.dirty() || tk.changed() {
		t.Fatal("an acknowledged checkpoint is sent again")
	}
	if ferr := task.ValidateHeartbeat(&hb); ferr != nil {
		t.Fatal(ferr)
	}
}

func TestParseEnvelope(t *testing.T) {
	exp := time.Now().Add(time.Hour).Unix()
	jwt := "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, exp))) + ".sig"
	good := func() map[string]any {
		return map[string]any{"taskId": "task_1", "attempt": 1, "callbackBaseUrl": "http://127.0.0.1:1/", "taskToken": jwt,
			"tokenExpiresAt": time.Now().Add(time.Hour), "heartbeatIntervalMs": 1000}
	}
	for _, tc := range []struct {
		name   string
		mutate func(m map[string]any)
		ok     bool
	}{
		{"good", func(map[string]any) {}, true},
		{"expiry from the token", func(m map[string]any) { delete(m, "tokenExpiresAt") }, true},
		{"no task id", func(m map[string]any) { delete(m, "taskId") }, false},
		{"attempt 0", func(m map[string]any) { m["attempt"] = 0 }, false},
		{"no token", func(m map[string]any) { delete(m, "taskToken") }, false},
		{"no interval", func(m map[string]any) { delete(m, "heartbeatIntervalMs") }, false},
		{"relative url", func(m map[string]any) { m["callbackBaseUrl"] = "/v1" }, false},
		{"ftp url", func(m map[string]any) { m["callbackBaseUrl"] = "ftp://x" }, false},
		{"no expiry anywhere", func(m map[string]any) { delete(m, "tokenExpiresAt"); m["taskToken"] = "opaque" }, false},
		{"wrong type", func(m map[string]any) { m["attempt"] = "one" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.mutate(m)
			b, _ := json.Marshal(m)
			env, err := parseEnvelope(b)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (strings.HasSuffix(env.CallbackBaseURL, "/") || env.TokenExpiresAt.Unix() < exp-5) {
				t.Fatalf("envelope not normalised: %+v", env)
			}
		})
	}
	if _, err := parseEnvelope([]byte("not json")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func TestMeter(t *testing.T) {
	m := startMeter()
	sink := make([][]byte, 0, 64)
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		sink = append(sink, make([]byte, 64<<10))
		if len(sink) == cap(sink) {
			sink = sink[:0]
		}
	}
	got := m.finish()
	if got == nil || got.PeakMemoryBytes <= 0 {
		t.Fatalf("no memory measured: %+v", got)
	}
	if got.CPUTimeMs <= 0 {
		t.Fatalf("no CPU time measured for 50 ms of busy work: %+v", got)
	}
	_ = sink
}

func TestDefaultWorkerIDUnique(t *testing.T) {
	a, b := defaultWorkerID(), defaultWorkerID()
	if a == b || a == "" || len(a) > 256 {
		t.Fatalf("worker ids %q %q", a, b)
	}
}

// TestDefaultTransportKeepsConnections: without WithHTTPClient a handler's
// callbacks go through one shared transport that keeps 64 idle
// connections per host (http.DefaultTransport keeps 2: a worker running
// more attempts at once opened a connection for most callbacks).
func TestDefaultTransportKeepsConnections(t *testing.T) {
	fn := func(context.Context, *Task) (any, error) { return nil, nil }
	a, b := Handler(fn).(*handler), Handler(fn).(*handler)
	tr, ok := a.cfg.client.Transport.(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost < 64 || a.cfg.client.Transport != b.cfg.client.Transport {
		t.Fatalf("default callbacks transport %T (%+v), shared: %v; want one *http.Transport keeping 64 idle connections a host",
			a.cfg.client.Transport, tr, a.cfg.client.Transport == b.cfg.client.Transport)
	}
}
