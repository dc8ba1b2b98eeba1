// Package spanattr names what Servo's spans and metrics share with the
// worker SDK's: the attribute keys, a task attempt's attributes, the W3C
// trace-context propagator of every hop, and how a span ends with an
// error. It depends on OpenTelemetry's API only, apart from package
// telemetry, so that the worker SDK links no exporter.
package spanattr

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Servo's span and metric attribute keys (besides OpenTelemetry's semantic
// conventions).
const (
	TaskIDKey      = attribute.Key("servo.task_id")
	AttemptKey     = attribute.Key("servo.attempt")
	TenantIDKey    = attribute.Key("servo.tenant_id")
	WorkerKey      = attribute.Key("servo.worker")
	DispositionKey = attribute.Key("servo.disposition")
	// DutyKey names a sweeper duty (deadline, cancel, lease, dispatch).
	DutyKey = attribute.Key("servo.duty")
	// CallbackKey names a callback (started, heartbeat, completed).
	CallbackKey = attribute.Key("servo.callback")
	// OutcomeKey is an attempt's outcome; CategoryKey its error category.
	OutcomeKey  = attribute.Key("servo.outcome")
	CategoryKey = attribute.Key("error.type")
	// ResultKey is how an operation ended (sent, failed, applied, …).
	ResultKey = attribute.Key("servo.result")
)

// LatencyBuckets are the bucket bounds, in seconds, of Servo's and the
// SDK's duration histograms.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Propagator is the W3C trace-context (and baggage) propagator of every
// hop between Servo and its workers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// TaskAttrs are the attributes naming a task's attempt on a span.
func TaskAttrs(taskID string, attempt int, tenantID, worker string) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, 4)
	if taskID != "" {
		as = append(as, TaskIDKey.String(taskID))
	}
	if attempt > 0 {
		as = append(as, AttemptKey.Int(attempt))
	}
	if tenantID != "" {
		as = append(as, TenantIDKey.String(tenantID))
	}
	if worker != "" {
		as = append(as, WorkerKey.String(worker))
	}
	return as
}

// EndSpan ends span, marking it an error when err is not nil (the error's
// message is recorded: Servo's errors name ids and causes, never a token).
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
