package functions

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/telemetry"
)

// telemetryOnce sets OpenTelemetry up once per instance: the standard
// OTEL_* variables choose the exporters; without them traces go to Cloud
// Trace and metrics to Cloud Monitoring (package telemetry). A failure is
// logged and the function runs without telemetry rather than not at all.
var telemetryOnce sync.Once

func setupTelemetry(ctx context.Context, project, service string, sampling telemetry.Sampling) {
	telemetryOnce.Do(func() {
		// The exporters' and clients' own notices (the log package) as
		// JSON lines, not plain text among the function's logs.
		logs.CaptureStdLog(logs.Default(), slog.LevelWarn)
		t, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, Project: project, Default: telemetry.DefaultGoogleCloud, Sampling: &sampling})
		if err != nil {
			logs.Default().ErrorContext(ctx, "telemetry: not set up; the function runs without traces and metrics", "error", err)
			return
		}
		logs.Default().InfoContext(ctx, "telemetry set up", "exporters", t.Exporters, "sampling", sampling.String())
		noteTraceExporters(t.Exporters, project)
	})
}

// cloudTraceProject is the project whose Cloud Trace receives this
// instance's spans; nil while they go elsewhere (an OTEL_* exporter) or
// nowhere. The dashboard links a task's trace there.
var cloudTraceProject atomic.Pointer[string]

// noteTraceExporters sets cloudTraceProject from the exporters set up.
func noteTraceExporters(exporters []string, project string) {
	if slices.Contains(exporters, "traces:googlecloud") {
		cloudTraceProject.Store(&project)
	} else {
		cloudTraceProject.Store(nil)
	}
}

// traceProject is cloudTraceProject's value, "" when unset.
func traceProject() string {
	if p := cloudTraceProject.Load(); p != nil {
		return *p
	}
	return ""
}
