package functions

import (
	"cmp"
	"context"
	"os"
	"sync"

	"github.com/servo-dev/servo/logs"
	"github.com/servo-dev/servo/telemetry"
)

// telemetryOnce sets OpenTelemetry up once per instance: the standard
// OTEL_* variables choose the exporters; without them traces go to Cloud
// Trace and metrics to Cloud Monitoring (package telemetry). A failure is
// logged and the function runs without telemetry rather than not at all.
var telemetryOnce sync.Once

func setupTelemetry(ctx context.Context, project string) {
	telemetryOnce.Do(func() {
		// Cloud Run functions name the service in K_SERVICE.
		name := cmp.Or(os.Getenv("K_SERVICE"), "servo")
		t, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: name, Project: project, Default: telemetry.DefaultGoogleCloud})
		if err != nil {
			logs.Default().ErrorContext(ctx, "telemetry: not set up; the function runs without traces and metrics", "error", err)
			return
		}
		logs.Default().InfoContext(ctx, "telemetry set up", "exporters", t.Exporters)
	})
}
