package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/detectors/gcp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"

	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/spanattr"
)

// Default says where traces and metrics go when no OTEL_* variable
// chooses an exporter.
type Default int

const (
	// DefaultNone exports nothing (servo dev, tests): spans still reach a
	// Recorder, metrics a Prometheus handler.
	DefaultNone Default = iota
	// DefaultGoogleCloud exports traces to Cloud Trace and metrics to Cloud
	// Monitoring, both over OTLP to Google's Telemetry API
	// (GoogleTelemetryEndpoint, with the Application Default Credentials),
	// with the resource Google's detector finds (the Cloud Functions in
	// production). In Cloud Monitoring a metric servo.x of kind K is
	// prometheus.googleapis.com/servo.x/K on resource prometheus_target
	// (MonitoringType).
	DefaultGoogleCloud
)

// GoogleTelemetryEndpoint is Google Cloud's OTLP endpoint (the Telemetry
// API), through which DefaultGoogleCloud sends spans to Cloud Trace and
// metrics to Cloud Monitoring.
const GoogleTelemetryEndpoint = "telemetry.googleapis.com:443"

// GCPProjectIDKey is the resource attribute that names the project whose
// Cloud Trace receives the spans sent to GoogleTelemetryEndpoint.
const GCPProjectIDKey = attribute.Key("gcp.project_id")

// googleOTLP is where DefaultGoogleCloud sends spans and metrics and how it
// authenticates; tests point it at a local receiver.
var googleOTLP = struct {
	endpoint string
	insecure bool
	creds    func(context.Context) (credentials.PerRPCCredentials, error)
}{
	endpoint: GoogleTelemetryEndpoint,
	creds: func(ctx context.Context) (credentials.PerRPCCredentials, error) {
		return oauth.NewApplicationDefault(ctx, "https://www.googleapis.com/auth/cloud-platform")
	},
}

// googleSpanExporter is DefaultGoogleCloud's span exporter: OTLP over gRPC
// to googleOTLP.endpoint, each call carrying an access token.
func googleSpanExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	creds, err := googleOTLP.creds(ctx)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	opts := []otlptracegrpc.Option{
		otlptracegrpc.WithEndpoint(googleOTLP.endpoint),
		otlptracegrpc.WithDialOption(grpc.WithPerRPCCredentials(creds)),
	}
	if googleOTLP.insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

// googleMetricExporter is DefaultGoogleCloud's metric exporter: OTLP over
// gRPC to googleOTLP.endpoint, each call carrying an access token.
func googleMetricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	creds, err := googleOTLP.creds(ctx)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	opts := []otlpmetricgrpc.Option{
		otlpmetricgrpc.WithEndpoint(googleOTLP.endpoint),
		otlpmetricgrpc.WithDialOption(grpc.WithPerRPCCredentials(creds)),
	}
	if googleOTLP.insecure {
		opts = append(opts, otlpmetricgrpc.WithInsecure())
	}
	return otlpmetricgrpc.New(ctx, opts...)
}

// detectors are the resource detectors of DefaultGoogleCloud: Google's
// (cloud.*, faas.* on Cloud Run and Cloud Functions); tests replace them.
var detectors = func() []resource.Detector { return []resource.Detector{gcp.NewDetector()} }

// Config configures Setup.
type Config struct {
	// ServiceName names the service unless OTEL_SERVICE_NAME does.
	ServiceName string
	// Project is the Google Cloud project (Cloud Trace/Monitoring, and the
	// logs' trace field).
	Project string
	// Default applies when no OTEL_* variable chooses an exporter.
	Default Default
	// Prometheus adds a pull reader; Telemetry.MetricsHandler serves it.
	Prometheus bool
	// Recorder, when set, receives every ended span (servo dev's
	// `GET /v1/tasks/{id}/trace`, tests).
	Recorder *Recorder
	// MetricInterval is the push exporters' period; default 60 s, or
	// OTEL_METRIC_EXPORT_INTERVAL.
	MetricInterval time.Duration
	// Sampling, when set and OTEL_TRACES_SAMPLER is not, samples the
	// exported traces (see Sampling); nil exports every span, as the
	// SDK's default sampler decides (servo dev's trace view needs them).
	Sampling *Sampling
}

// Telemetry is what Setup installed.
type Telemetry struct {
	// TracerProvider and MeterProvider are the SDK providers.
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// Exporters names the exporters in use ("otlp", "googlecloud",
	// "prometheus", "recorder"), for a start-up log line.
	Exporters []string
	metrics   http.Handler
}

// MetricsHandler serves the Prometheus text exposition of every metric
// (nil unless Config.Prometheus).
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.TracerProvider.Shutdown(ctx), t.MeterProvider.Shutdown(ctx))
}

// ForceFlush exports what is buffered now.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	return errors.Join(t.TracerProvider.ForceFlush(ctx), t.MeterProvider.ForceFlush(ctx))
}

// otelChoosesTraces and otelChoosesMetrics report whether the standard
// variables ask for an exporter.
func otelChoosesTraces() bool {
	return anyEnv("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

func otelChoosesMetrics() bool {
	return anyEnv("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
}

func anyEnv(names ...string) bool {
	for _, n := range names {
		if os.Getenv(n) != "" {
			return true
		}
	}
	return false
}

// Setup builds the tracer and meter providers, installs them (and the W3C
// propagator) as OpenTelemetry's globals and as this package's, and
// returns them.
//
// Exporters: when OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER or an
// OTEL_EXPORTER_OTLP_*ENDPOINT is set, the standard variables decide
// (autoexport: "otlp" with OTEL_EXPORTER_OTLP_PROTOCOL grpc or
// http/protobuf, "console", "prometheus", "none"); otherwise cfg.Default
// does. The sampler is cfg.Sampling's, unless OTEL_TRACES_SAMPLER /
// OTEL_TRACES_SAMPLER_ARG choose one (without either: parentbased_always_on);
// the resource follows OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{}
	var topts []sdktrace.TracerProviderOption
	topts = append(topts, sdktrace.WithResource(res))
	switch {
	case otelChoosesTraces():
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: span exporter: %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			topts = append(topts, traceOptions(sampling(cfg), exp)...)
			t.Exporters = append(t.Exporters, "traces:"+envOr("OTEL_TRACES_EXPORTER", "otlp"))
		}
	case cfg.Default == DefaultGoogleCloud:
		exp, err := googleSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: cloud trace exporter (OTLP to %s): %w", googleOTLP.endpoint, err)
		}
		topts = append(topts, traceOptions(sampling(cfg), exp)...)
		t.Exporters = append(t.Exporters, "traces:googlecloud")
	}
	if cfg.Recorder != nil {
		topts = append(topts, sdktrace.WithSpanProcessor(cfg.Recorder))
		t.Exporters = append(t.Exporters, "traces:recorder")
	}

	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	var periodic []sdkmetric.PeriodicReaderOption
	if cfg.MetricInterval > 0 && os.Getenv("OTEL_METRIC_EXPORT_INTERVAL") == "" {
		periodic = append(periodic, sdkmetric.WithInterval(cfg.MetricInterval))
	}
	switch {
	case otelChoosesMetrics():
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: metric reader: %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			mopts = append(mopts, sdkmetric.WithReader(r))
			t.Exporters = append(t.Exporters, "metrics:"+envOr("OTEL_METRICS_EXPORTER", "otlp"))
		}
	case cfg.Default == DefaultGoogleCloud:
		exp, err := googleMetricExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: cloud monitoring exporter (OTLP to %s): %w", googleOTLP.endpoint, err)
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, periodic...)))
		t.Exporters = append(t.Exporters, "metrics:googlecloud")
	}
	if cfg.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := promexporter.New(promexporter.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		mopts = append(mopts, sdkmetric.WithReader(exp))
		t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
		t.Exporters = append(t.Exporters, "metrics:prometheus")
	}
	t.TracerProvider = sdktrace.NewTracerProvider(topts...)
	t.MeterProvider = sdkmetric.NewMeterProvider(mopts...)
	otel.SetTracerProvider(t.TracerProvider)
	otel.SetMeterProvider(t.MeterProvider)
	otel.SetTextMapPropagator(spanattr.Propagator)
	install(t.TracerProvider, t.MeterProvider)
	if cfg.Project != "" {
		logs.SetProject(cfg.Project)
	}
	return t, nil
}

// sampling is cfg.Sampling unless OTEL_TRACES_SAMPLER chooses the sampler.
func sampling(cfg Config) *Sampling {
	if os.Getenv("OTEL_TRACES_SAMPLER") != "" {
		return nil
	}
	return cfg.Sampling
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newResource is the resource of every span and metric: the SDK's
// defaults, service.name, a service.instance.id of this process (Cloud
// Run's instance id when the detector finds one, else a random one) so
// that each instance writes its own series, and with DefaultGoogleCloud
// what Google's resource detector finds (cloud.region, cloud.platform,
// faas.*) and gcp.project_id; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES win.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.ServiceName)}
	var detected *resource.Resource
	if cfg.Default == DefaultGoogleCloud {
		if cfg.Project != "" {
			// The Telemetry API files spans and metrics under this project.
			attrs = append(attrs, GCPProjectIDKey.String(cfg.Project))
		}
		detected = detect(ctx)
	}
	instance := ""
	if detected != nil {
		if v, ok := detected.Set().Value(semconv.FaaSInstanceKey); ok {
			instance = v.AsString()
		}
	}
	if instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		instance = hex.EncodeToString(b[:])
	}
	attrs = append(attrs, semconv.ServiceInstanceID(instance))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	for _, r := range []*resource.Resource{detected, envResource(ctx)} {
		if r == nil {
			continue
		}
		if merged, err := resource.Merge(res, r); err == nil {
			res = merged
		} else if merged, err := resource.Merge(res, resource.NewSchemaless(r.Attributes()...)); err == nil {
			// Another schema URL: keep the attributes.
			res = merged
		}
	}
	return res, nil
}

// detectTimeout bounds the resource detection: off Google Cloud the
// metadata server's probe would otherwise delay a start by seconds.
var detectTimeout = 2 * time.Second

// detect runs the detectors, within detectTimeout; a partial resource (an
// error) is still what could be found, none at all is nil.
func detect(ctx context.Context) *resource.Resource {
	ctx, cancel := context.WithTimeout(ctx, detectTimeout)
	defer cancel()
	found := make(chan *resource.Resource, 1)
	go func() {
		r, _ := resource.New(ctx, resource.WithDetectors(detectors()...))
		found <- r
	}()
	select {
	case r := <-found:
		return r
	case <-ctx.Done():
		return nil
	}
}

func envResource(ctx context.Context) *resource.Resource {
	r, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil
	}
	return r
}
