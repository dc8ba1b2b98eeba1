package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/spanattr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

func TestTraceParentRoundTrip(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	tp := TraceParent(trace.ContextWithSpanContext(context.Background(), sc))
	if tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("TraceParent = %q", tp)
	}
	if got := SpanContextOf(tp); got.TraceID() != tid || got.SpanID() != sid || !got.IsSampled() {
		t.Errorf("SpanContextOf(%q) = %v", tp, got)
	}
	for _, bad := range []string{"", "00-xyz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if SpanContextOf(bad).IsValid() {
			t.Errorf("SpanContextOf(%q) is valid", bad)
		}
		if _, ok := LinkTo(bad); ok {
			t.Errorf("LinkTo(%q) links", bad)
		}
	}
	if TraceParent(context.Background()) != "" {
		t.Errorf("TraceParent of a context without a span is not empty")
	}
}

// TestSetupChoosesExporters: the standard variables choose the exporters;
// without them the configured default applies.
func TestSetupChoosesExporters(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		cfg  Config
		want []string
	}{
		{"nothing set, no default", nil, Config{}, nil},
		{"prometheus and recorder", nil, Config{Prometheus: true, Recorder: NewRecorder(1)}, []string{"traces:recorder", "metrics:prometheus"}},
		{"OTLP endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			Config{Default: DefaultGoogleCloud}, []string{"traces:otlp", "metrics:otlp"}},
		{"OTLP gRPC", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			Config{}, []string{"traces:otlp", "metrics:otlp"}},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, Config{Default: DefaultGoogleCloud}, nil},
		{"console traces", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}, Config{}, []string{"traces:console"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
				t.Setenv(k, tc.env[k])
			}
			saved := detectors
			detectors = func() []resource.Detector { return nil } // not on Google Cloud
			defer func() { detectors = saved }()
			tl, err := Setup(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tl.Shutdown(context.Background())
			if !slices.Equal(tl.Exporters, tc.want) {
				t.Errorf("exporters %v, want %v", tl.Exporters, tc.want)
			}
			if (tl.MetricsHandler() != nil) != tc.cfg.Prometheus {
				t.Errorf("metrics handler %v, want %v", tl.MetricsHandler() != nil, tc.cfg.Prometheus)
			}
		})
	}
}

// TestRecorderTaskSpans: a task's spans are its traces' spans, plus its own
// spans (and their children) from a sweeper pass, not the pass's other
// tasks'; /v1/tasks/{id}/trace answers them, or 404.
func TestRecorderTaskSpans(t *testing.T) {
	rec := NewRecorder(100)
	tl, err := Setup(context.Background(), Config{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Shutdown(context.Background())
	tr := Tracer()
	ctx, submit := tr.Start(context.Background(), "POST /v1/tasks")
	submit.SetAttributes(spanattr.TaskIDKey.String("task_a"))
	_, child := tr.Start(ctx, "send w")
	child.End()
	submit.End()

	pctx, pass := tr.Start(context.Background(), SweepPassSpan)
	for _, id := range []string{"task_a", "task_b"} {
		actx, apply := tr.Start(pctx, "servo.sweeper.apply LEASE_EXPIRED")
		apply.SetAttributes(spanattr.TaskIDKey.String(id), spanattr.DutyKey.String("lease"))
		_, tx := tr.Start(actx, "firestore.transaction LEASE_EXPIRED")
		tx.SetAttributes(spanattr.TaskIDKey.String(id))
		tx.End()
		apply.End()
	}
	pass.End()

	var names []string
	for _, s := range rec.TaskSpans("task_a") {
		names = append(names, s.Name())
	}
	want := []string{"POST /v1/tasks", "send w", "servo.sweeper.apply LEASE_EXPIRED", "firestore.transaction LEASE_EXPIRED"}
	if !slices.Equal(names, want) {
		t.Errorf("task_a spans %q, want %q", names, want)
	}

	for _, tc := range []struct {
		id     string
		status int
		body   string
	}{
		{"task_a", 200, `"name":"send w"`},
		{"task_zzz", 404, `"error":"task_trace_not_found"`},
	} {
		rr := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/tasks/"+tc.id+"/trace", nil)
		req.SetPathValue("id", tc.id)
		rec.Handler().ServeHTTP(rr, req)
		if rr.Code != tc.status || !strings.Contains(rr.Body.String(), tc.body) {
			t.Errorf("GET trace of %s: %d %s", tc.id, rr.Code, rr.Body.String())
		}
	}
}

func TestCountRPCs(t *testing.T) {
	ctx, n := CountRPCs(context.Background())
	for range 3 {
		if err := UnaryRPCTally(ctx, "/m", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	tally(context.Background()) // no tally: nothing counted, no panic
	if n.Load() != 3 {
		t.Errorf("tally %d, want 3", n.Load())
	}
}

// traceReceiver is an OTLP/gRPC trace collector on a free local port: it
// stands in for Google's Telemetry API and keeps what it is sent.
type traceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
	auths []string
}

func newTraceReceiver(t *testing.T) *traceReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &traceReceiver{addr: l.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *traceReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	r.auths = append(r.auths, md.Get("authorization")...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// bearer is per-RPC credentials with a fixed access token, over plain
// connections (the local receiver has no TLS).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// useGoogleOTLP points DefaultGoogleCloud's span exporter at endpoint,
// without TLS, with creds, until the test ends.
func useGoogleOTLP(t *testing.T, endpoint string, creds func(context.Context) (credentials.PerRPCCredentials, error)) {
	t.Helper()
	saved, savedDetectors := googleOTLP, detectors
	googleOTLP.endpoint, googleOTLP.insecure, googleOTLP.creds = endpoint, true, creds
	detectors = func() []resource.Detector { return nil } // not on Google Cloud
	t.Cleanup(func() { googleOTLP, detectors = saved, savedDetectors })
}

// TestGoogleCloudTraces: with no OTEL_* variable choosing a trace exporter,
// DefaultGoogleCloud sends spans over OTLP/gRPC to the Telemetry API (a
// local receiver here), every export carrying the Application Default
// Credentials' access token and a resource naming the project and the
// service; an OTEL_RESOURCE_ATTRIBUTES project wins.
func TestGoogleCloudTraces(t *testing.T) {
	for _, tc := range []struct {
		name, resourceEnv, wantProject string
	}{
		{"project from the configuration", "", "servo-prod-1"},
		{"project from OTEL_RESOURCE_ATTRIBUTES", "gcp.project_id=servo-other-2", "servo-other-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTEL(t)
			t.Setenv("OTEL_METRICS_EXPORTER", "none") // metrics are not this test's
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.resourceEnv)
			recv := newTraceReceiver(t)
			useGoogleOTLP(t, recv.addr, func(context.Context) (credentials.PerRPCCredentials, error) { return bearer("access-token-1"), nil })
			ctx := context.Background()
			tel, err := Setup(ctx, Config{ServiceName: "servocallbacks", Project: "servo-prod-1", Default: DefaultGoogleCloud})
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(ctx)
			if !slices.Contains(tel.Exporters, "traces:googlecloud") {
				t.Fatalf("exporters %v, want traces:googlecloud", tel.Exporters)
			}
			_, span := tel.TracerProvider.Tracer("test").Start(ctx, "POST /v1/tasks/{taskId}/heartbeat")
			span.End()
			if err := tel.ForceFlush(ctx); err != nil {
				t.Fatalf("flush to the receiver: %v", err)
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			if len(recv.reqs) != 1 {
				t.Fatalf("%d exports, want 1", len(recv.reqs))
			}
			if !slices.Equal(recv.auths, []string{"Bearer access-token-1"}) {
				t.Errorf("authorization %q, want the access token", recv.auths)
			}
			rs := recv.reqs[0].GetResourceSpans()
			if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
				t.Fatalf("export %v, want one span", recv.reqs[0])
			}
			if got := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); got != "POST /v1/tasks/{taskId}/heartbeat" {
				t.Errorf("span %q", got)
			}
			attrs := map[string]string{}
			for _, kv := range rs[0].GetResource().GetAttributes() {
				attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			if attrs[string(GCPProjectIDKey)] != tc.wantProject || attrs["service.name"] != "servocallbacks" {
				t.Errorf("resource %v, want gcp.project_id=%s and service.name=servocallbacks", attrs, tc.wantProject)
			}
		})
	}
}

// TestGoogleCloudTracesWithoutCredentials: no credentials, no telemetry,
// and an error that says why and where the spans would have gone.
func TestGoogleCloudTracesWithoutCredentials(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	useGoogleOTLP(t, "127.0.0.1:1", func(context.Context) (credentials.PerRPCCredentials, error) {
		return nil, errors.New("could not find default credentials")
	})
	_, err := Setup(context.Background(), Config{ServiceName: "servoapi", Project: "servo-prod-1", Default: DefaultGoogleCloud})
	if err == nil || !strings.Contains(err.Error(), "could not find default credentials") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Setup = %v, want the credentials' error naming the endpoint", err)
	}
}

// clearOTEL unsets, for the test, every OTEL_* variable Setup reads.
func clearOTEL(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
}

// metricReceiver is an OTLP/gRPC metrics collector on a free local port,
// standing in for the Telemetry API.
type metricReceiver struct {
	colmetricpb.UnimplementedMetricsServiceServer
	addr string

	mu    sync.Mutex
	reqs  []*colmetricpb.ExportMetricsServiceRequest
	auths []string
}

func newMetricReceiver(t *testing.T) *metricReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &metricReceiver{addr: l.Addr().String()}
	srv := grpc.NewServer()
	colmetricpb.RegisterMetricsServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *metricReceiver) Export(ctx context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	r.auths = append(r.auths, md.Get("authorization")...)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// cloudRun is a resource detector that finds what Google's finds on Cloud
// Run.
type cloudRun struct{}

func (cloudRun) Detect(context.Context) (*resource.Resource, error) {
	return resource.NewSchemaless(attribute.String("cloud.provider", "gcp"), attribute.String("cloud.platform", "gcp_cloud_run"),
		attribute.String("cloud.region", "europe-west1"), attribute.String("faas.name", "servo-sweeper"),
		attribute.String("faas.instance", "0069c7a988")), nil
}

// TestGoogleCloudMetrics: DefaultGoogleCloud sends metrics over OTLP to the
// Telemetry API (a local receiver), with the access token, and a resource
// with what Google's detector finds, the project, service.name and the
// instance's own service.instance.id (Cloud Run's instance id), so that
// each instance writes its own series; the sweeper's pass counter is a
// monotonic sum.
func TestGoogleCloudMetrics(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	recv := newMetricReceiver(t)
	useGoogleOTLP(t, recv.addr, func(context.Context) (credentials.PerRPCCredentials, error) { return bearer("access-token-2"), nil })
	saved := detectors
	detectors = func() []resource.Detector { return []resource.Detector{cloudRun{}} }
	t.Cleanup(func() { detectors = saved })
	ctx := context.Background()
	tel, err := Setup(ctx, Config{ServiceName: "servosweeper", Project: "servo-prod-1", Default: DefaultGoogleCloud})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	if !slices.Contains(tel.Exporters, "metrics:googlecloud") {
		t.Fatalf("exporters %v, want metrics:googlecloud", tel.Exporters)
	}
	RecordPass(ctx, PassOK, time.Now(), []PassDuty{{Name: "lease"}})
	if err := tel.ForceFlush(ctx); err != nil {
		t.Fatalf("flush to the receiver: %v", err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.reqs) != 1 || !slices.Equal(recv.auths, []string{"Bearer access-token-2"}) {
		t.Fatalf("%d exports with authorization %q, want 1 with the access token", len(recv.reqs), recv.auths)
	}
	rm := recv.reqs[0].GetResourceMetrics()
	attrs := map[string]string{}
	for _, kv := range rm[0].GetResource().GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	for k, v := range map[string]string{"service.name": "servosweeper", "service.instance.id": "0069c7a988", "gcp.project_id": "servo-prod-1",
		"cloud.region": "europe-west1", "cloud.platform": "gcp_cloud_run"} {
		if attrs[k] != v {
			t.Errorf("resource %s = %q, want %q (resource %v)", k, attrs[k], v, attrs)
		}
	}
	var passes bool
	for _, sm := range rm[0].GetScopeMetrics() {
		for _, m := range sm.GetMetrics() {
			if m.GetName() == MetricSweeperPasses {
				passes = m.GetSum().GetIsMonotonic() && len(m.GetSum().GetDataPoints()) == 1
			}
		}
	}
	if !passes {
		t.Errorf("no monotonic %s with one point in %v", MetricSweeperPasses, rm)
	}
}

// TestInstanceIDWithoutDetector: off Google Cloud every process still has
// a service.instance.id of its own.
func TestInstanceIDWithoutDetector(t *testing.T) {
	clearOTEL(t)
	ids := map[string]bool{}
	for range 2 {
		res, err := newResource(context.Background(), Config{ServiceName: "servo"})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := res.Set().Value("service.instance.id")
		ids[v.AsString()] = true
	}
	if len(ids) != 2 || ids[""] {
		t.Fatalf("instance ids %v, want two distinct ones", ids)
	}
}
