package functions

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
		installed.Store(t)
		logs.Default().InfoContext(ctx, "telemetry set up", "exporters", t.Exporters, "sampling", sampling.String())
		noteTraceExporters(t.Exporters, project)
	})
}

// installed is the telemetry setupTelemetry set up (nil until then).
var installed atomic.Pointer[telemetry.Telemetry]

// flushTimeout bounds flushTelemetry.
const flushTimeout = 2 * time.Second

// flushTelemetry exports the spans and metrics buffered now, within
// flushTimeout. Cloud Run allocates CPU to an instance only while it
// handles a request, so an invocation that ends early (the sweeper's, when
// nothing is due) flushes before it returns rather than leave its pass's
// metrics to a periodic export that may not run until the next tick.
func flushTelemetry(ctx context.Context) {
	t := installed.Load()
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if err := t.ForceFlush(ctx); err != nil {
		logs.Default().DebugContext(ctx, "telemetry flush failed", "error", err)
	}
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
