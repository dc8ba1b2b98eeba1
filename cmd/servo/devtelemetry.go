package main

import (
	"context"
	"fmt"
	"time"

	"github.com/servo-dev/servo/internal/telemetry"
)

// devTelemetry sets OpenTelemetry up for servo dev: Prometheus text at
// GET /metrics, the most recent spans kept in memory for
// `servo get ID --trace`, and, when the standard OTEL_* variables ask
// (OTEL_EXPORTER_OTLP_ENDPOINT, ...), export there too.
func devTelemetry(ctx context.Context, project string) (*telemetry.Telemetry, *telemetry.Recorder, error) {
	rec := telemetry.NewRecorder(0)
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "servo-dev", Project: project, Prometheus: true, Recorder: rec})
	if err != nil {
		return nil, nil, fmt.Errorf("servo dev: %w", err)
	}
	return tel, rec, nil
}

// shutdownTelemetry exports what is buffered, within a few seconds.
func shutdownTelemetry(t *telemetry.Telemetry) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.Shutdown(ctx)
}
