package callbacks

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

func TestSplitPath(t *testing.T) {
	tests := []struct {
		path   string
		id     string
		kind   Kind
		wantOK bool
	}{
		{"/v1/tasks/task_01/started", "task_01", KindStarted, true},
		{"/v1/tasks/task_01/heartbeat", "task_01", KindHeartbeat, true},
		{"/v1/tasks/task_01/completed", "task_01", KindCompleted, true},
		{"/ServoCallbacks/v1/tasks/task_01/completed", "task_01", KindCompleted, true},
		{"/v1/tasks/task_01/cancel", "", "", false},
		{"/v1/tasks/task_01/started/", "", "", false},
		{"/v1/tasks//started", "", "", false},
		{"/v1/tasks/task_01", "", "", false},
		{"/v1/task/task_01/started", "", "", false},
		{"/", "", "", false},
	}
	for _, tt := range tests {
		id, kind, ok := SplitPath(tt.path)
		if id != tt.id || kind != tt.kind || ok != tt.wantOK {
			t.Errorf("SplitPath(%q) = %q, %q, %v; want %q, %q, %v", tt.path, id, kind, ok, tt.id, tt.kind, tt.wantOK)
		}
	}
}

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name        string
		kind        Kind
		body        string
		wantAttempt int
		wantField   string // "" means the body decodes and validates
		wantInvalid bool   // decodes but Validate fails with wantField
	}{
		{"started", KindStarted, `{"attempt":1,"workerId":"w","startedAt":"2025-01-15T10:00:00Z"}`, 1, "", false},
		{"heartbeat full", KindHeartbeat, `{"attempt":2,"workerId":"w","heartbeatAt":"2025-01-15T10:05:00Z","progressPct":45,"message":"m","checkpoint":{"p":5}}`, 2, "", false},
		{"completed succeeded", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"SUCCEEDED","output":{"rows":1},"metrics":{"cpuTimeMs":5}}`, 1, "", false},
		{"completed failed", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":"USER_CODE","message":"x","retryable":true}}`, 1, "", false},
		{"completed cancelled", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"CANCELLED","cancelledDuringPhase":"p","partialProgress":{"n":1}}`, 1, "", false},
		{"unknown fields ignored", KindStarted, `{"attempt":1,"workerId":"w","future":true}`, 1, "", false},
		{"white space around", KindStarted, " \n{\"attempt\":1,\"workerId\":\"w\"}\n ", 1, "", false},
		{"empty", KindStarted, ``, 0, "body", false},
		{"null", KindStarted, `null`, 0, "body", false},
		{"array", KindStarted, `[1]`, 0, "body", false},
		{"syntax", KindStarted, `{"attempt":1,`, 0, "body", false},
		{"trailing", KindStarted, `{"attempt":1,"workerId":"w"} {}`, 1, "body", false},
		{"attempt string", KindStarted, `{"attempt":"1","workerId":"w"}`, 0, "attempt", false},
		{"progress float keeps attempt", KindHeartbeat, `{"attempt":3,"workerId":"w","progressPct":4.5}`, 3, "progressPct", false},
		{"bad time", KindStarted, `{"attempt":1,"workerId":"w","startedAt":"yesterday"}`, 1, "body", false},
		{"nested type", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":7}}`, 1, "error.category", false},
		{"no attempt", KindStarted, `{"workerId":"w"}`, 0, "attempt", true},
		{"no worker", KindStarted, `{"attempt":1}`, 1, "workerId", true},
		{"progress range", KindHeartbeat, `{"attempt":1,"workerId":"w","progressPct":101}`, 1, "progressPct", true},
		{"checkpoint too large", KindHeartbeat, `{"attempt":1,"workerId":"w","checkpoint":"` + strings.Repeat("x", api.MaxCheckpointBytes) + `"}`, 1, "checkpoint", true},
		{"bad outcome", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"ZOMBIE"}`, 1, "outcome", true},
		{"failed without error", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"FAILED"}`, 1, "error", true},
		{"bad category", KindCompleted, `{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":"OOPS"}}`, 1, "error.category", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ferr := DecodeRequest(tt.kind, []byte(tt.body))
			if r.Attempt != tt.wantAttempt {
				t.Errorf("Attempt = %d, want %d", r.Attempt, tt.wantAttempt)
			}
			if !tt.wantInvalid {
				if got := fieldOf(ferr); got != tt.wantField {
					t.Fatalf("decode field error = %v, want field %q", ferr, tt.wantField)
				}
				if ferr != nil {
					return
				}
			} else if ferr != nil {
				t.Fatalf("decode: %v", ferr)
			}
			verr := r.Validate()
			want := ""
			if tt.wantInvalid {
				want = tt.wantField
			}
			if got := fieldOf(verr); got != want {
				t.Fatalf("Validate() = %v, want field %q", verr, want)
			}
		})
	}
}

func TestDecodeNormalizesStackTrace(t *testing.T) {
	body := `{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":"USER_CODE","stackTrace":"` + strings.Repeat("é", api.MaxStackTraceBytes) + `"}}`
	r, ferr := DecodeRequest(KindCompleted, []byte(body))
	if ferr != nil {
		t.Fatal(ferr)
	}
	if verr := r.Validate(); verr != nil {
		t.Fatal(verr)
	}
	st := r.Completed.Error.StackTrace
	if len(st) > api.MaxStackTraceBytes || !utf8.ValidString(st) || len(st) < api.MaxStackTraceBytes-1 {
		t.Fatalf("stack trace not truncated to %d valid bytes: %d bytes", api.MaxStackTraceBytes, len(st))
	}
}

func fieldOf(e *task.FieldError) string {
	if e == nil {
		return ""
	}
	return e.Field
}

// FuzzDecodeRequest feeds arbitrary bodies to the decoder and the
// validator. Whatever the input: no panic; an error always names a field;
// the field's message never quotes the body (error texts are logged);
// and a body that decodes and validates round-trips: re-encoding it and
// decoding again gives the same request (same digest for completed).
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []struct {
		kind uint8
		body string
	}{
		{0, `{"attempt":1,"workerId":"worker-abc123","startedAt":"2025-01-15T10:00:00Z"}`},
		{1, `{"attempt":1,"workerId":"worker-abc123","heartbeatAt":"2025-01-15T10:05:00Z","progressPct":45,"message":"Processing partition 5 of 10"}`},
		{1, `{"attempt":2,"workerId":"w","checkpoint":{"partition":5,"offset":[1,2,3]}}`},
		{2, `{"attempt":1,"workerId":"worker-abc123","outcome":"SUCCEEDED","completedAt":"2025-01-15T10:30:00Z","output":{"rowCount":1000000},"metrics":{"cpuTimeMs":45000,"peakMemoryBytes":2147483648}}`},
		{2, `{"attempt":1,"workerId":"worker-abc123","outcome":"FAILED","error":{"category":"USER_CODE","message":"KeyError","stackTrace":"Traceback","retryable":true}}`},
		{2, `{"attempt":1,"workerId":"worker-abc123","outcome":"CANCELLED","cancelledDuringPhase":"processing","partialProgress":{"recordsProcessed":500000}}`},
		{2, `{"attempt":"1","outcome":7}`},
		{1, `{"attempt":1,"progressPct":1e400}`},
		{0, `{"attempt":1,"workerId":"\ud800"}`},
		{1, `{"attempt":1,"workerId":"w","message":"a\rb\u001b[2J\r\n\u0000"}`},
		{2, `{"attempt":1,"workerId":"w","outcome":"FAILED","error":{"category":"USER_CODE","message":"\u009b31m"}}`},
		{0, `[]`},
		{0, ``},
	} {
		f.Add(seed.kind, []byte(seed.body))
	}
	kinds := []Kind{KindStarted, KindHeartbeat, KindCompleted}
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		kind := kinds[int(k)%len(kinds)]
		r, ferr := DecodeRequest(kind, body)
		if ferr == nil {
			ferr = r.Validate()
		}
		if ferr != nil {
			if ferr.Field == "" {
				t.Fatalf("field error without a field: %v", ferr)
			}
			if len(body) >= 8 && strings.Contains(ferr.Message, string(body)) {
				t.Fatalf("error message quotes the body: %q", ferr.Message)
			}
			return
		}
		if r.Attempt < 1 || r.WorkerID == "" {
			t.Fatalf("valid request without attempt or worker: %+v", r)
		}
		// Text that reaches people holds no control character but tab,
		// newline and CRLF (a bare CR, ESC or NUL is refused).
		texts := map[string]string{"workerId": r.WorkerID}
		if h := r.Heartbeat; h != nil {
			texts["message"] = h.Message
		}
		if c := r.Completed; c != nil {
			texts["cancelledDuringPhase"] = c.CancelledDuringPhase
			if c.Error != nil {
				texts["error.message"], texts["error.stackTrace"] = c.Error.Message, c.Error.StackTrace
			}
		}
		for field, s := range texts {
			for i, c := range s {
				if unicode.IsControl(c) && c != '\t' && c != '\n' && (c != '\r' || !strings.HasPrefix(s[i:], "\r\n")) {
					t.Fatalf("accepted %s holding U+%04X at %d: %q", field, c, i, s)
				}
			}
		}
		var typed any
		switch kind {
		case KindStarted:
			typed = r.Started
		case KindHeartbeat:
			typed = r.Heartbeat
		case KindCompleted:
			typed = r.Completed
		}
		again, err := json.Marshal(typed)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, ferr := DecodeRequest(kind, again)
		if ferr == nil {
			ferr = r2.Validate()
		}
		if ferr != nil {
			t.Fatalf("re-encoded request %s is refused: %v", again, ferr)
		}
		if r2.Attempt != r.Attempt || r2.WorkerID != r.WorkerID {
			t.Fatalf("round trip changed the request: %+v vs %+v", r, r2)
		}
		if kind == KindCompleted && task.CompletionDigest(r.Completed) != task.CompletionDigest(r2.Completed) {
			t.Fatalf("round trip changed the completion digest")
		}
		if kind == KindHeartbeat && !bytes.Equal(compact(r.Heartbeat.Checkpoint), compact(r2.Heartbeat.Checkpoint)) {
			t.Fatalf("round trip changed the checkpoint")
		}
	})
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if len(b) == 0 || json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
