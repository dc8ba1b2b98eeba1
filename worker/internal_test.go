package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/task"
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

func TestDisposition(t *testing.T) {
	for _, tc := range []struct {
		op     string
		status int
		body   task.Disposition
		want   task.Disposition
	}{
		{opStarted, 200, "", task.Continue},
		{opHeartbeat, 200, task.Continue, task.Continue},
		{opCompleted, 200, "", task.Committed},
		{opCompleted, 200, task.Committed, task.Committed},
		{opStarted, 409, "", task.Cancel},
		{opHeartbeat, 410, "", task.Cancel},
		{opCompleted, 409, task.Rejected, task.Rejected}, // completion_conflict
		{opStarted, 401, "", task.Rejected},
		{opStarted, 404, task.Rejected, task.Rejected},
		{opHeartbeat, 400, "", task.Rejected},
	} {
		got := disposition(tc.op, tc.status, task.CallbackResponse{Disposition: tc.body})
		if got != tc.want {
			t.Errorf("disposition(%s, %d, %q) = %s, want %s", tc.op, tc.status, tc.body, got, tc.want)
		}
	}
	for code, want := range map[int]bool{200: false, 400: false, 401: false, 408: true, 409: false, 410: false, 429: true, 500: true, 502: true, 503: true, 504: true} {
		if retryableStatus(code) != want {
			t.Errorf("retryableStatus(%d) = %v", code, !want)
		}
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
	big := strings.Repeat("x", task.MaxOutputBytes)
	for _, tc := range []struct {
		name      string
		cause     error
		out       any
		err       error
		panicked  *panicked
		outcome   task.Outcome
		category  task.Category
		retryable *bool
		output    string
		message   string
	}{
		{name: "success with output", out: map[string]int{"rows": 3}, outcome: task.OutcomeSucceeded, output: `{"rows":3}`},
		{name: "success raw output", out: json.RawMessage(` {"a": 1} `), outcome: task.OutcomeSucceeded, output: `{"a":1}`},
		{name: "success no output", outcome: task.OutcomeSucceeded},
		{name: "success despite cancel", cause: cancelCause, out: 1, outcome: task.OutcomeSucceeded, output: `1`},
		{name: "unencodable output", out: func() {}, outcome: task.OutcomeFailed, category: task.CategoryUserCode, retryable: boolPtr(false)},
		{name: "output too large", out: big, outcome: task.OutcomeFailed, category: task.CategoryUserCode, retryable: boolPtr(false)},
		{name: "plain error", err: errors.New("boom"), outcome: task.OutcomeFailed, category: task.CategoryUserCode, message: "boom"},
		{name: "data quality", err: DataQuality(errors.New("bad row")), outcome: task.OutcomeFailed, category: task.CategoryDataQuality, message: "bad row"},
		{name: "wrapped infrastructure", err: fmt.Errorf("partition 3: %w", Infrastructure(errors.New("gcs 503"))), outcome: task.OutcomeFailed,
			category: task.CategoryInfrastructure, message: "partition 3: INFRASTRUCTURE: gcs 503"},
		{name: "configuration", err: Configuration(errors.New("no BUCKET")), outcome: task.OutcomeFailed, category: task.CategoryConfiguration},
		{name: "timeout", err: Timeout(errors.New("slow")), outcome: task.OutcomeFailed, category: task.CategoryTimeout},
		{name: "retry advice", err: WithRetryable(Infrastructure(errors.New("quota")), false), outcome: task.OutcomeFailed,
			category: task.CategoryInfrastructure, retryable: boolPtr(false)},
		{name: "retry advice on plain", err: WithRetryable(errors.New("x"), false), outcome: task.OutcomeFailed,
			category: task.CategoryUserCode, retryable: boolPtr(false)},
		{name: "worker cancels itself", err: Cancelled(errors.New("not needed")), outcome: task.OutcomeCancelled},
		{name: "servo cancel, ctx error", cause: cancelCause, err: context.Canceled, outcome: task.OutcomeCancelled},
		{name: "servo cancel, plain error", cause: cancelCause, err: errors.New("stopped"), outcome: task.OutcomeCancelled},
		{name: "servo cancel, wrapped ctx error in infra", cause: cancelCause, err: Infrastructure(fmt.Errorf("rpc: %w", context.Canceled)), outcome: task.OutcomeCancelled},
		{name: "servo cancel, real data error", cause: cancelCause, err: DataQuality(errors.New("bad")), outcome: task.OutcomeFailed, category: task.CategoryDataQuality},
		{name: "deadline", cause: ErrDeadlineExceeded, err: context.DeadlineExceeded, outcome: task.OutcomeFailed, category: task.CategoryTimeout},
		{name: "panic", panicked: &panicked{value: "kaboom", stack: []byte("goroutine 1 [running]:\nmain.f()")}, outcome: task.OutcomeFailed,
			category: task.CategoryUserCode, message: "panic: kaboom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := NewTestTask(task.Envelope{TaskID: "task_x", Attempt: 1}, nil)
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
			case task.OutcomeFailed:
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
			case task.OutcomeCancelled:
				if string(req.PartialProgress) != `{"next":4}` || req.CancelledDuringPhase != "loading" {
					t.Errorf("cancelled report %s / %q", req.PartialProgress, req.CancelledDuringPhase)
				}
			}
			req.Attempt, req.WorkerID = 1, "w"
			if ferr := req.Validate(); ferr != nil {
				t.Fatalf("the report would be refused: %v", ferr)
			}
		})
	}
}

func TestOutcomeTruncatesStack(t *testing.T) {
	tk := NewTestTask(task.Envelope{TaskID: "task_x", Attempt: 1}, nil)
	req := outcome(nil, nil, nil, &panicked{value: strings.Repeat("é", task.MaxMessageBytes), stack: []byte(strings.Repeat("ü", task.MaxStackTraceBytes))}, tk)
	if len(req.Error.StackTrace) > task.MaxStackTraceBytes || len(req.Error.Message) > task.MaxMessageBytes {
		t.Fatalf("not truncated: stack %d message %d", len(req.Error.StackTrace), len(req.Error.Message))
	}
	req.Attempt, req.WorkerID = 1, "w"
	if ferr := req.Validate(); ferr != nil {
		t.Fatal(ferr)
	}
}

func TestTaskCheckpointAndDecode(t *testing.T) {
	tk := NewTestTask(task.Envelope{TaskID: "task_x", Attempt: 2, Payload: json.RawMessage(`{"partitions":3}`),
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
	if !errors.As(err, &we) || we.Category != task.CategoryDataQuality {
		t.Fatalf("a payload that does not decode is DATA_QUALITY, got %v", err)
	}
	var cp struct{ NextPartition int }
	if ok, err := tk.DecodeResumeFrom(&cp); !ok || err != nil || cp.NextPartition != 2 {
		t.Fatalf("resume: %v %v %+v", ok, err, cp)
	}
	for _, raw := range []string{"", "null", " null "} {
		empty := NewTestTask(task.Envelope{ResumeFrom: json.RawMessage(raw)}, nil)
		if ok, err := empty.DecodeResumeFrom(&cp); ok || err != nil {
			t.Fatalf("resumeFrom %q: %v %v", raw, ok, err)
		}
	}
	if err := tk.Checkpoint(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("invalid raw JSON accepted")
	}
	if err := tk.Checkpoint(strings.Repeat("x", task.MaxCheckpointBytes)); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Fatalf("want ErrCheckpointTooLarge, got %v", err)
	}
	if err := tk.Checkpoint(map[string]int{"nextPartition": 3}); err != nil {
		t.Fatal(err)
	}
	if string(tk.LastCheckpoint()) != `{"nextPartition":3}` {
		t.Fatalf("checkpoint %s", tk.LastCheckpoint())
	}
	tk.Progress(150, strings.Repeat("m", task.MaxMessageBytes+10))
	pct, msg, ok := tk.LastProgress()
	if !ok || pct != 100 || len(msg) != task.MaxMessageBytes {
		t.Fatalf("progress %d %d %v", pct, len(msg), ok)
	}
	hb, v := tk.heartbeat(2, "w", time.Now())
	if string(hb.Checkpoint) != `{"nextPartition":3}` || *hb.ProgressPct != 100 || v != 1 {
		t.Fatalf("heartbeat %+v v%d", hb, v)
	}
	tk.acked(v)
	if hb, _ = tk.heartbeat(2, "w", time.Now()); hb.Checkpoint != nil || tk.dirty() {
		t.Fatal("an acknowledged checkpoint is sent again")
	}
	if ferr := hb.Validate(); ferr != nil {
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
