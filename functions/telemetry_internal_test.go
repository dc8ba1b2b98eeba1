package functions

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/servo-dev/servo/internal/telemetry"
)

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

// TestFlushTelemetry: flushTelemetry exports the spans a batch processor
// still holds (its own schedule is seconds away), and does nothing before
// telemetry is set up.
func TestFlushTelemetry(t *testing.T) {
	defer installed.Store(nil)
	flushTelemetry(context.Background()) // nothing installed: no panic
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
	installed.Store(&telemetry.Telemetry{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider()})
	_, span := tp.Tracer("test").Start(context.Background(), "servo.sweeper.pass")
	span.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported before the flush; the test needs them held", n)
	}
	flushTelemetry(context.Background())
	if n := len(exp.GetSpans()); n != 1 {
		t.Fatalf("%d spans exported after the flush, want 1", n)
	}
}
