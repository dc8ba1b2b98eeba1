// Package telemetry is Servo's OpenTelemetry: the tracer and meter every
// component uses, the instruments (defined here, once, with bounded
// attribute sets), W3C trace-context helpers, and Setup, which builds the
// tracer and meter providers from the standard OTEL_* variables (OTLP over
// gRPC or HTTP/protobuf; by default in production Cloud Trace, through
// Google's OTLP endpoint, and Cloud Monitoring; Prometheus text for
// `servo dev`).
//
// Components call Tracer and the Record* functions; until Setup runs they
// are no-ops (OpenTelemetry's global no-op providers), so libraries and unit
// tests pay nothing. Setup may run more than once in a process (tests): the
// instruments follow the latest providers.
//
// Nothing here ever records a task token or a payload: spans and metrics
// carry ids, attempt numbers, states, reasons and dispositions only.
package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every Servo span and metric.
const ScopeName = "github.com/servo-dev/servo"

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
)

// TraceParentHeader is the W3C trace-context header (and the Pub/Sub
// message attribute) that carries a span context between hops.
const TraceParentHeader = "traceparent"

// providers is what the current Setup installed: the tracer and the
// instruments made from its meter provider.
type providers struct {
	tracer trace.Tracer
	inst   *instruments
}

var current atomic.Pointer[providers]

func init() { install(otel.GetTracerProvider(), otel.GetMeterProvider()) }

// install makes tp and mp the providers of Tracer and the instruments.
func install(tp trace.TracerProvider, mp metric.MeterProvider) {
	current.Store(&providers{tracer: tp.Tracer(ScopeName), inst: newInstruments(mp.Meter(ScopeName))})
}

// Tracer is Servo's tracer (a no-op until Setup).
func Tracer() trace.Tracer { return current.Load().tracer }

func inst() *instruments { return current.Load().inst }

// Propagator is the W3C trace-context (and baggage) propagator Servo uses
// on every hop; Setup also installs it as the global one.
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

// TraceParent returns ctx's span context as a W3C traceparent value
// ("00-<trace id>-<span id>-<flags>", 55 bytes), or "" when ctx carries no
// valid span context.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[TraceParentHeader]
}

// SpanContextOf parses a W3C traceparent value; the result is invalid when
// tp is empty or malformed.
func SpanContextOf(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{TraceParentHeader: tp})
	return trace.SpanContextFromContext(ctx)
}

// LinkTo returns a link to the span context in tp and whether there is one.
func LinkTo(tp string, attrs ...attribute.KeyValue) (trace.Link, bool) {
	sc := SpanContextOf(tp)
	return trace.Link{SpanContext: sc, Attributes: attrs}, sc.IsValid()
}

// Inject writes ctx's trace context into the carrier (HTTP headers,
// Pub/Sub attributes); nothing when ctx carries none.
func Inject(ctx context.Context, c propagation.TextMapCarrier) { Propagator.Inject(ctx, c) }

// Extract returns ctx with the trace context the carrier holds, if any.
func Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return Propagator.Extract(ctx, c)
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
