package functions

import "testing"

// TestTraceProject: the dashboard links Cloud Trace only when the spans go
// there.
func TestTraceProject(t *testing.T) {
	defer cloudTraceProject.Store(nil)
	for _, c := range []struct {
		exporters []string
		want      string
	}{
		{[]string{"traces:googlecloud", "metrics:googlecloud"}, "p1"},
		{[]string{"traces:otlp", "metrics:otlp"}, ""},
		{[]string{"metrics:googlecloud"}, ""},
		{nil, ""},
	} {
		noteTraceExporters(c.exporters, "p1")
		if got := traceProject(); got != c.want {
			t.Errorf("exporters %v: trace project %q, want %q", c.exporters, got, c.want)
		}
	}
}
