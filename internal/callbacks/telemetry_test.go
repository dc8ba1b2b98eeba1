package callbacks_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// withTelemetry sets the process's telemetry up with sampler (an
// OTEL_TRACES_SAMPLER value) and a span recorder, and returns the recorder.
func withTelemetry(t testing.TB, sampler string) *telemetry.Recorder {
	t.Helper()
	t.Setenv("OTEL_TRACES_SAMPLER", sampler)
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		t.Setenv(v, "")
	}
	rec := telemetry.NewRecorder(0)
	tl, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "callbacks-test", Prometheus: true, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tl.Shutdown(context.Background()) })
	return rec
}

// TestTelemetryAddsNoFirestoreRPC runs started, heartbeat and completed
// with tracing sampled off and on: each callback is its one transaction of
// 2 RPCs either way (telemetry adds no Firestore call), and with sampling
// on the callback's server span has the transaction as its child.
func TestTelemetryAddsNoFirestoreRPC(t *testing.T) {
	for _, tc := range []struct {
		sampler string
		spans   bool
	}{
		{"parentbased_always_off", false},
		{"parentbased_always_on", true},
	} {
		t.Run(tc.sampler, func(t *testing.T) {
			rec := withTelemetry(t, tc.sampler)
			e := newEnv(t, nil) // built after Setup: its server spans use these providers
			tk := e.queued()
			tok := e.token(tk, 1)
			for _, step := range []struct {
				kind callbacks.Kind
				body any
			}{
				{callbacks.KindStarted, startedReq(1, "w1")},
				{callbacks.KindHeartbeat, heartbeatReq(1, "w1")},
				{callbacks.KindCompleted, completedReq(1, "w1", api.OutcomeSucceeded)},
			} {
				e.rpc.Reset()
				rp := e.do(request{kind: step.kind, taskID: tk.ID, token: tok, body: mustJSON(t, step.body)})
				if rp.status != http.StatusOK {
					t.Fatalf("%s: %d %s", step.kind, rp.status, rp.raw)
				}
				if got := e.rpc.Total(); got != 2 {
					t.Errorf("%s made %d Firestore RPCs (%v), want 2", step.kind, got, e.rpc.Counts())
				}
			}
			var server, tx sdktrace.ReadOnlySpan
			for _, s := range rec.TaskSpans(tk.ID) {
				switch s.Name() {
				case "POST /v1/tasks/{taskId}/completed":
					server = s
				case "firestore.transaction COMPLETED":
					tx = s
				}
			}
			if !tc.spans {
				if server != nil || tx != nil {
					t.Errorf("sampling off recorded spans")
				}
				return
			}
			if server == nil || tx == nil {
				t.Fatalf("sampling on: no server span (%v) or transaction span (%v)", server != nil, tx != nil)
			}
			if tx.Parent().SpanID() != server.SpanContext().SpanID() {
				t.Errorf("the transaction's parent is %s, want the server span %s", tx.Parent().SpanID(), server.SpanContext().SpanID())
			}
		})
	}
}

// BenchmarkCallbackTracing measures accepted heartbeats through two
// handlers on the same emulator in the same run, interleaved call by call:
// one whose traces are sampled off (parentbased_always_off: spans are not
// recorded; metrics still are), one sampled on (every span recorded, here
// by the in-memory recorder). The difference is what tracing costs.
//
//	go test -run '^$' -bench BenchmarkCallbackTracing -benchtime 1000x ./callbacks/
func BenchmarkCallbackTracing(b *testing.B) {
	quiet := func(c *callbacks.Config) {
		c.Logger = logs.New(io.Discard, nil)
		c.Now = func() time.Time { return time.Now().UTC() }
	}
	withTelemetry(b, "parentbased_always_off")
	off := newEnv(b, quiet)
	withTelemetry(b, "parentbased_always_on")
	on := newEnv(b, quiet)
	client := newClient(2)
	type side struct {
		srv *httptest.Server
		tk  task.Task
		tok string
		lat latencies
	}
	mk := func(e *env) *side {
		srv := httptest.NewServer(e.h)
		b.Cleanup(srv.Close)
		tk := e.create(func(tk *task.Task) { tk.Timing = api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 3600000} })
		e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
		return &side{srv: srv, tk: tk, tok: e.tokenFor(scopeOf(tk, 1), time.Hour, time.Now())}
	}
	sides := []*side{mk(off), mk(on)}
	beat := func(s *side, lat *latencies) {
		start := time.Now()
		rp, err := httpPost(client, s.srv.URL, callbacks.KindHeartbeat, s.tk.ID, s.tok, heartbeatReq(1, "w1"))
		if lat != nil {
			lat.add(time.Since(start))
		}
		if err != nil || rp.status != 200 {
			b.Fatalf("heartbeat: %v %d %s", err, rp.status, rp.raw)
		}
	}
	for range 500 { // warm the emulator's JVM on both paths
		beat(sides[0], nil)
		beat(sides[1], nil)
	}
	b.ResetTimer()
	start := time.Now()
	i := 0
	for b.Loop() {
		s := sides[i%2]
		beat(s, &s.lat)
		i++
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "callbacks/s")
	for i, name := range []string{"off", "on"} {
		d := sides[i].lat.d
		slices.Sort(d)
		pct := func(p float64) float64 {
			return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
		}
		if len(d) > 0 {
			b.ReportMetric(pct(0.50), name+"-p50-ms")
			b.ReportMetric(pct(0.99), name+"-p99-ms")
		}
	}
}
