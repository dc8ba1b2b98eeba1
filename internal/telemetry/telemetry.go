package telemetry

import (
	"context"
	"sync/atomic"

	"github.com/servo-dev/servo/internal/spanattr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every Servo span and metric.
const ScopeName = "github.com/servo-dev/servo"

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
func Inject(ctx context.Context, c propagation.TextMapCarrier) { spanattr.Propagator.Inject(ctx, c) }
