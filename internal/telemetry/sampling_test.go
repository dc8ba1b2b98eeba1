package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"
)

// fixedIDs gives every new trace the trace id next and counts span ids.
type fixedIDs struct {
	next trace.TraceID
	span atomic.Uint64
}

func (f *fixedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	return f.next, f.NewSpanID(ctx, f.next)
}

func (f *fixedIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var s trace.SpanID
	binary.BigEndian.PutUint64(s[:], f.span.Add(1))
	return s
}

// traceIDAt returns a trace id whose TraceIDRatioBased value (its low 8
// bytes, shifted right once) is x.
func traceIDAt(x uint64) trace.TraceID {
	var id trace.TraceID
	id[0] = 0xab
	binary.BigEndian.PutUint64(id[8:], x<<1)
	return id
}

// TestSampling: with a 10 % ratio, a trace whose id falls under the
// ratio's threshold is exported whole; one above it only when a span ended
// with an error or its root was slow, then whole and with its parent links
// intact; a remote parent's sampled flag is followed.
func TestSampling(t *testing.T) {
	ratio := 0.1
	threshold := uint64(ratio * (1 << 63)) // as sdktrace.TraceIDRatioBased
	in, out := traceIDAt(threshold-1), traceIDAt(threshold)
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		id        trace.TraceID
		remote    *trace.SpanContext // the request's remote parent
		childErr  bool               // the child span ends with an error
		rootErr   bool
		took      time.Duration // the root span's duration
		internal  bool          // the root is an internal span (a sweeper pass), not a request
		wantSpans int           // exported
	}{
		{name: "sampled by ratio", id: in, took: 10 * time.Millisecond, wantSpans: 2},
		{name: "unsampled success", id: out, took: 10 * time.Millisecond, wantSpans: 0},
		{name: "unsampled, child error", id: out, childErr: true, took: 10 * time.Millisecond, wantSpans: 2},
		{name: "unsampled, root error", id: out, rootErr: true, took: 10 * time.Millisecond, wantSpans: 2},
		{name: "unsampled, slow", id: out, took: 1500 * time.Millisecond, wantSpans: 2},
		{name: "unsampled, just under slow", id: out, took: 999 * time.Millisecond, wantSpans: 0},
		{name: "unsampled, slow internal root", id: out, took: 1500 * time.Millisecond, internal: true, wantSpans: 0},
		{name: "unsampled, internal root with an error", id: out, took: 10 * time.Millisecond, internal: true, childErr: true, wantSpans: 2},
		{name: "remote parent sampled", id: out, remote: &trace.SpanContext{}, took: 10 * time.Millisecond, wantSpans: 2},
		{name: "remote parent not sampled, id under the ratio", id: in, remote: &trace.SpanContext{}, took: 10 * time.Millisecond, wantSpans: 2},
		{name: "remote parent not sampled, id over the ratio", id: out, remote: &trace.SpanContext{}, took: 10 * time.Millisecond, wantSpans: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			ids := &fixedIDs{next: tc.id}
			opts := append(traceOptions(&Sampling{Ratio: ratio, Slow: time.Second}, exp), sdktrace.WithIDGenerator(ids))
			tp := sdktrace.NewTracerProvider(opts...)
			tr := tp.Tracer("test")
			ctx := context.Background()
			if tc.remote != nil {
				flags := trace.TraceFlags(0)
				if tc.name == "remote parent sampled" {
					flags = trace.FlagsSampled
				}
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: tc.id, SpanID: trace.SpanID{9}, TraceFlags: flags, Remote: true,
				}))
			}
			kind := trace.SpanKindServer
			if tc.internal {
				kind = trace.SpanKindInternal
			}
			ctx, root := tr.Start(ctx, "POST /v1/tasks/{taskId}/heartbeat", trace.WithTimestamp(t0), trace.WithSpanKind(kind))
			_, child := tr.Start(ctx, "firestore.transaction", trace.WithTimestamp(t0))
			if tc.childErr {
				child.RecordError(errors.New("unavailable"))
				child.SetStatus(codes.Error, "unavailable")
			}
			child.End(trace.WithTimestamp(t0.Add(tc.took / 2)))
			if tc.rootErr {
				root.SetStatus(codes.Error, "503")
			}
			root.End(trace.WithTimestamp(t0.Add(tc.took)))
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			got := exp.GetSpans()
			if len(got) != tc.wantSpans {
				t.Fatalf("exported %d spans, want %d", len(got), tc.wantSpans)
			}
			if len(got) == 0 {
				return
			}
			// Exported whole and consistent: sampled, one trace, the child
			// under the root.
			byName := map[string]tracetest.SpanStub{}
			for _, s := range got {
				if !s.SpanContext.IsSampled() || s.SpanContext.TraceID() != tc.id {
					t.Fatalf("exported span %s: %v", s.Name, s.SpanContext)
				}
				byName[s.Name] = s
			}
			if byName["firestore.transaction"].Parent.SpanID() != byName["POST /v1/tasks/{taskId}/heartbeat"].SpanContext.SpanID() {
				t.Fatalf("the child's parent is not the root: %+v", got)
			}
		})
	}
}

// TestSamplingBoundsWaitingTraces: traces whose root never ends (in this
// process) wait at most maxPendingTraces at a time, the oldest dropped.
func TestSamplingBoundsWaitingTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	ids := &fixedIDs{}
	k := newKeeper(sdktrace.NewSimpleSpanProcessor(exp), time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(headSampler{ratio: sdktrace.NeverSample()}), sdktrace.WithSpanProcessor(k), sdktrace.WithIDGenerator(ids))
	tr := tp.Tracer("test")
	const extra = 10
	for i := range maxPendingTraces + extra {
		ids.next = traceIDAt(uint64(i) + 1)
		ctx, root := tr.Start(context.Background(), "root")
		_, child := tr.Start(ctx, "child")
		child.End()
		_ = root // never ends
	}
	k.mu.Lock()
	n := len(k.pending)
	k.mu.Unlock()
	if n != maxPendingTraces || k.dropped.Load() != extra {
		t.Fatalf("%d traces waiting, %d dropped; want %d, %d", n, k.dropped.Load(), maxPendingTraces, extra)
	}
}

// TestSetupSampling: Setup applies Config.Sampling to the exported traces
// (here ratio 0: only the failed request's trace is exported), unless
// OTEL_TRACES_SAMPLER chooses the sampler; without Sampling every span is.
func TestSetupSampling(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sampling   *Sampling
		samplerEnv string
		want       int // spans exported of one successful and one failed request
	}{
		{name: "sampling, ratio 0", sampling: &Sampling{Ratio: 0}, want: 1},
		{name: "OTEL_TRACES_SAMPLER wins", sampling: &Sampling{Ratio: 0}, samplerEnv: "always_on", want: 2},
		{name: "no sampling", want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTEL(t)
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			t.Setenv("OTEL_TRACES_SAMPLER", tc.samplerEnv)
			recv := newTraceReceiver(t)
			useGoogleOTLP(t, recv.addr, func(context.Context) (credentials.PerRPCCredentials, error) { return bearer("t"), nil })
			ctx := context.Background()
			tel, err := Setup(ctx, Config{ServiceName: "s", Project: "p", Default: DefaultGoogleCloud, Sampling: tc.sampling})
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(ctx)
			tr := tel.TracerProvider.Tracer("test")
			_, ok := tr.Start(ctx, "POST /v1/tasks/{taskId}/heartbeat", trace.WithSpanKind(trace.SpanKindServer))
			ok.End()
			_, failed := tr.Start(ctx, "POST /v1/tasks/{taskId}/completed", trace.WithSpanKind(trace.SpanKindServer))
			failed.SetStatus(codes.Error, "503")
			failed.End()
			if err := tel.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			got := 0
			for _, r := range recv.reqs {
				for _, rs := range r.GetResourceSpans() {
					for _, ss := range rs.GetScopeSpans() {
						got += len(ss.GetSpans())
					}
				}
			}
			if got != tc.want {
				t.Fatalf("%d spans exported, want %d", got, tc.want)
			}
		})
	}
}
