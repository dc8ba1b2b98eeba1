package worker

import (
	"context"
	"time"

	"github.com/servo-dev/servo/internal/spanattr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// The SDK's spans and metrics. Like OpenTelemetry's instrumentation
// libraries, the SDK takes its providers from the application
// ([WithTracerProvider], [WithMeterProvider]; default: the global ones, set
// with otel.SetTracerProvider and otel.SetMeterProvider) and links no
// exporter of its own. Trace context travels as W3C traceparent on every
// callback and is read from every delivery, whatever the global propagator.
const (
	scopeName = "github.com/servo-dev/servo/worker"

	metricRuns       = "servo.worker.runs"
	metricDuration   = "servo.worker.run.duration"
	metricHeartbeats = "servo.worker.heartbeats"
	metricRetries    = "servo.worker.retry_attempts"
)

// WithTracerProvider sets where the SDK's spans go (default: the global
// TracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets where the SDK's metrics go (default: the global
// MeterProvider): servo.worker.runs, servo.worker.run.duration,
// servo.worker.heartbeats and servo.worker.retry_attempts.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// instruments are one handler's tracer and metric instruments.
type instruments struct {
	tracer                    trace.Tracer
	runs, heartbeats, retries metric.Int64Counter
	duration                  metric.Float64Histogram
}

func newInstruments(tp trace.TracerProvider, mp metric.MeterProvider) *instruments {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(scopeName)
	in := &instruments{tracer: tp.Tracer(scopeName)}
	// A provider that fails to make an instrument returns a no-op one with
	// the error; the SDK then records nothing for it rather than fail work.
	in.runs, _ = m.Int64Counter(metricRuns, metric.WithDescription("Attempts the worker SDK executed, by outcome and error category."), metric.WithUnit("{run}"))
	in.duration, _ = m.Float64Histogram(metricDuration, metric.WithDescription("Time the worker's function ran for an attempt, by outcome."), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(spanattr.LatencyBuckets...))
	in.heartbeats, _ = m.Int64Counter(metricHeartbeats, metric.WithDescription("Heartbeats the worker SDK sent, by result (sent, failed)."), metric.WithUnit("{heartbeat}"))
	in.retries, _ = m.Int64Counter(metricRetries, metric.WithDescription("Retry attempts (attempt > 1) the worker SDK executed."), metric.WithUnit("{run}"))
	return in
}

// recordRun counts one executed attempt.
func (in *instruments) recordRun(ctx context.Context, outcome, category string, attempt int, d time.Duration) {
	in.runs.Add(ctx, 1, metric.WithAttributes(spanattr.OutcomeKey.String(outcome), spanattr.CategoryKey.String(category)))
	in.duration.Record(ctx, d.Seconds(), metric.WithAttributes(spanattr.OutcomeKey.String(outcome)))
	if attempt > 1 {
		in.retries.Add(ctx, 1)
	}
}

// recordHeartbeat counts one heartbeat sent (ok) or not delivered.
func (in *instruments) recordHeartbeat(ctx context.Context, ok bool) {
	r := "sent"
	if !ok {
		r = "failed"
	}
	in.heartbeats.Add(ctx, 1, metric.WithAttributes(spanattr.ResultKey.String(r)))
}
