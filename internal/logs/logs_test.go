package logs

import (
	"bytes"
	"context"
	"encoding/json"
	stdlog "log"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"

	oteltrace "go.opentelemetry.io/otel/trace"
)

func TestCloudLoggingShape(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, slog.LevelDebug)
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-Cloud-Trace-Context", "abc123/456;o=1")
	log.WarnContext(WithTrace(context.Background(), r, "proj"), "late result", "taskId", "task_1")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"severity": "WARNING", "message": "late result", "taskId": "task_1",
		TraceKey: "projects/proj/traces/abc123", SpanKey: "456"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (line %s)", k, line[k], v, buf.String())
		}
	}
}

// TestTraceFieldsFromSpan: a line written with a context carrying an
// OpenTelemetry span gets the span's trace, span id and sampled flag in
// Cloud Logging's format, with the request's project, or SetProject's.
func TestTraceFieldsFromSpan(t *testing.T) {
	tid, _ := oteltrace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := oteltrace.SpanIDFromHex("00f067aa0ba902b7")
	for _, tc := range []struct {
		name    string
		flags   oteltrace.TraceFlags
		project string // via WithTrace; "" uses SetProject's
		want    map[string]any
	}{
		{"sampled, request project", oteltrace.FlagsSampled, "proj", map[string]any{
			TraceKey: "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736", SpanKey: "00f067aa0ba902b7", SampledKey: true}},
		{"not sampled, default project", 0, "", map[string]any{
			TraceKey: "projects/default-proj/traces/4bf92f3577b34da6a3ce929d0e0e4736", SpanKey: "00f067aa0ba902b7", SampledKey: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			SetProject("default-proj")
			defer SetProject("")
			var buf bytes.Buffer
			log := New(&buf, slog.LevelDebug)
			ctx := oteltrace.ContextWithSpanContext(context.Background(), oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: tc.flags}))
			if tc.project != "" {
				ctx = WithTrace(ctx, httptest.NewRequest("POST", "/", nil), tc.project)
			}
			log.InfoContext(ctx, "hello")
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v (line %s)", k, line[k], v, buf.String())
				}
			}
		})
	}
}

// TestCaptureStdLog: the log package's lines become JSON lines at the
// given severity.
func TestCaptureStdLog(t *testing.T) {
	var buf bytes.Buffer
	defer stdlog.SetOutput(os.Stderr)
	defer stdlog.SetFlags(stdlog.Flags())
	CaptureStdLog(New(&buf, slog.LevelDebug), slog.LevelWarn)
	stdlog.Printf("exporter %s is deprecated", "X")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
	}
	if line["severity"] != "WARNING" || line["message"] != "exporter X is deprecated" || line["logger"] != "log" {
		t.Errorf("line %v", line)
	}
}
