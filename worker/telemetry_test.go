package worker_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/worker"
)

// The SDK's spans and metrics go to the providers the application gives
// it, and every callback carries the attempt's trace as W3C traceparent.
func TestTelemetryProviders(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	f := newFake(t, nil)
	h, _ := testHandler(t, func(ctx context.Context, tk *worker.Task) (any, error) { return nil, nil },
		worker.WithTracerProvider(tp), worker.WithMeterProvider(mp))
	if status, ans := deliverEnv(t, h, f.envelope()); status != http.StatusOK || ans.Outcome != "SUCCEEDED" {
		t.Fatalf("answer %d %+v", status, ans)
	}

	var process trace.SpanContext
	names := map[string]int{}
	for _, s := range spans.Ended() {
		names[s.Name()]++
		if s.SpanKind() == trace.SpanKindServer {
			process = s.SpanContext()
		}
	}
	if names["POST /v1/tasks/{taskId}/started"] != 1 || names["POST /v1/tasks/{taskId}/completed"] != 1 || !process.IsValid() {
		t.Fatalf("spans %v: want a server span and one client span per callback", names)
	}
	for _, c := range f.ops("") {
		if c.traceparent == "" || c.traceparent[3:35] != process.TraceID().String() {
			t.Fatalf("%s: traceparent %q, want trace %s", c.op, c.traceparent, process.TraceID())
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	runs := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "servo.worker.runs" {
				for _, dp := range sum.DataPoints {
					o, _ := dp.Attributes.Value(attribute.Key("servo.outcome"))
					runs[o.AsString()] += dp.Value
				}
			}
		}
	}
	if runs["SUCCEEDED"] != 1 {
		t.Fatalf("servo.worker.runs by outcome %v, want SUCCEEDED 1", runs)
	}
}
