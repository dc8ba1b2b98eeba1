package telemetry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Sampling (SERVO_TRACE_SAMPLE_RATIO, SERVO_TRACE_SLOW).
const (
	// DefaultSampleRatio exports one trace in a hundred in full: enough
	// for latency percentiles of healthy traffic (ten thousand full
	// traces per million lifecycles), at a hundredth of the spans (errors
	// and slow requests are exported whatever the ratio).
	DefaultSampleRatio = 0.01
	// DefaultSlow is the request time from which a request's trace is
	// always exported: well above a callback's or a submit's (tens of
	// milliseconds), below the store timeout.
	DefaultSlow = time.Second
)

// Sampling configures Setup's trace sampling: a ratio of traces exported
// in full, chosen by trace id, and every other trace exported only when
// it went wrong:
//
//   - head: a span whose parent is sampled is sampled (a caller's or the
//     task's sampled trace stays whole); a local parent's decision is
//     followed; a root, or a remote parent that was not sampled, is
//     sampled by trace id at Ratio (sdktrace.TraceIDRatioBased, so every
//     service with the same ratio decides alike). A span that is not
//     sampled is still recorded (sdktrace.RecordOnly), never dropped.
//   - tail: the recorded spans of a trace that was not sampled wait in
//     memory until their local root (the request's server span, the
//     sweeper's pass) ends; if any of them ended with an error status, or
//     the local root took Slow or longer, all of them are exported,
//     marked sampled; otherwise they are dropped. Slow is a request's: a
//     local root of kind server or consumer (a sweeper pass, an internal
//     root that grows with its due tasks, is kept by ratio or error only).
//
// A kept error trace therefore holds every span of that request in this
// process (its server span, the store transaction, the enqueue, the
// failed call), but not the spans other processes recorded for the same
// trace unless they kept theirs too (a worker, another function). At most
// maxPendingTraces traces of maxPendingSpans spans wait at once: past
// that, the oldest waiting traces are dropped.
type Sampling struct {
	// Ratio is the share of traces exported in full, in [0, 1].
	Ratio float64
	// Slow is the local root span's duration from which its trace is
	// exported; zero: DefaultSlow.
	Slow time.Duration
}

// Bounds of the spans waiting for their local root.
const (
	maxPendingTraces = 4096
	maxPendingSpans  = 256
)

func (s Sampling) String() string {
	return fmt.Sprintf("ratio %g, errors and requests over %v kept", s.Ratio, s.slow())
}

func (s Sampling) slow() time.Duration {
	if s.Slow <= 0 {
		return DefaultSlow
	}
	return s.Slow
}

// traceOptions are the tracer provider options that export to exp with
// sampling s (nil: every span sampled, as the SDK's default sampler
// decides, and exported).
func traceOptions(s *Sampling, exp sdktrace.SpanExporter) []sdktrace.TracerProviderOption {
	if s == nil {
		return []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}
	}
	return []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(headSampler{ratio: sdktrace.TraceIDRatioBased(s.Ratio), desc: s.String()}),
		sdktrace.WithSpanProcessor(newKeeper(sdktrace.NewBatchSpanProcessor(exp), s.slow())),
	}
}

// headSampler is Sampling's head decision.
type headSampler struct {
	ratio sdktrace.Sampler
	desc  string
}

func (h headSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	parent := trace.SpanContextFromContext(p.ParentContext)
	var sampled bool
	switch {
	case parent.IsValid() && parent.IsSampled():
		sampled = true
	case parent.IsValid() && !parent.IsRemote():
		sampled = false
	default:
		sampled = h.ratio.ShouldSample(p).Decision == sdktrace.RecordAndSample
	}
	d := sdktrace.RecordOnly
	if sampled {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: parent.TraceState()}
}

func (h headSampler) Description() string { return "servo(" + h.desc + ")" }

// keeper is Sampling's tail: sampled spans go to next at once, the others
// wait for their local root's end (see Sampling).
type keeper struct {
	next    sdktrace.SpanProcessor
	slow    time.Duration
	mu      sync.Mutex
	pending map[trace.TraceID]*pendingTrace
	seq     uint64
	dropped atomic.Int64 // waiting traces dropped past maxPendingTraces
}

type pendingTrace struct {
	spans []sdktrace.ReadOnlySpan
	keep  bool
	seq   uint64 // order of arrival, to drop the oldest
}

func newKeeper(next sdktrace.SpanProcessor, slow time.Duration) *keeper {
	return &keeper{next: next, slow: slow, pending: make(map[trace.TraceID]*pendingTrace)}
}

func (k *keeper) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { k.next.OnStart(ctx, s) }

func (k *keeper) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	if sc.IsSampled() {
		k.next.OnEnd(s)
		return
	}
	root := !s.Parent().IsValid() || s.Parent().IsRemote()
	request := s.SpanKind() == trace.SpanKindServer || s.SpanKind() == trace.SpanKindConsumer
	bad := s.Status().Code == codes.Error || root && request && s.EndTime().Sub(s.StartTime()) >= k.slow
	k.mu.Lock()
	p := k.pending[sc.TraceID()]
	if p == nil {
		if len(k.pending) >= maxPendingTraces {
			k.dropOldest()
		}
		k.seq++
		p = &pendingTrace{seq: k.seq}
		k.pending[sc.TraceID()] = p
	}
	p.keep = p.keep || bad
	if len(p.spans) < maxPendingSpans {
		p.spans = append(p.spans, s)
	}
	if !root {
		k.mu.Unlock()
		return
	}
	delete(k.pending, sc.TraceID())
	k.mu.Unlock()
	if p.keep {
		for _, sp := range p.spans {
			k.next.OnEnd(keptSpan{sp})
		}
	}
}

// dropOldest forgets the waiting trace that arrived first (k.mu held).
func (k *keeper) dropOldest() {
	var (
		oldest trace.TraceID
		seq    uint64
	)
	for id, p := range k.pending {
		if seq == 0 || p.seq < seq {
			oldest, seq = id, p.seq
		}
	}
	delete(k.pending, oldest)
	k.dropped.Add(1)
}

func (k *keeper) Shutdown(ctx context.Context) error   { return k.next.Shutdown(ctx) }
func (k *keeper) ForceFlush(ctx context.Context) error { return k.next.ForceFlush(ctx) }

// keptSpan is a span recorded without being sampled that the tail keeps:
// exported as sampled (the batch processor exports sampled spans only).
type keptSpan struct{ sdktrace.ReadOnlySpan }

func (k keptSpan) SpanContext() trace.SpanContext {
	sc := k.ReadOnlySpan.SpanContext()
	return sc.WithTraceFlags(sc.TraceFlags().WithSampled(true))
}
