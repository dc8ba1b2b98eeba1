package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
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
