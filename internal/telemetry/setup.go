package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	mexporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
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
	// DefaultGoogleCloud exports traces to Cloud Trace, over OTLP to
	// Google's Telemetry API (GoogleTelemetryEndpoint, with the Application
	// Default Credentials), and metrics to Cloud Monitoring (the Cloud
	// Functions in production).
	DefaultGoogleCloud
)

// GoogleTelemetryEndpoint is Google Cloud's OTLP endpoint (the Telemetry
// API), through which DefaultGoogleCloud sends spans to Cloud Trace.
const GoogleTelemetryEndpoint = "telemetry.googleapis.com:443"

// GCPProjectIDKey is the resource attribute that names the project whose
// Cloud Trace receives the spans sent to GoogleTelemetryEndpoint.
const GCPProjectIDKey = attribute.Key("gcp.project_id")

// googleOTLP is where DefaultGoogleCloud sends spans and how it
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
// does. The sampler follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG
// (default parentbased_always_on), the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.ServiceName)}
	if cfg.Default == DefaultGoogleCloud && cfg.Project != "" {
		// The Telemetry API files spans under this project.
		attrs = append(attrs, GCPProjectIDKey.String(cfg.Project))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
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
			topts = append(topts, sdktrace.WithBatcher(exp))
			t.Exporters = append(t.Exporters, "traces:"+envOr("OTEL_TRACES_EXPORTER", "otlp"))
		}
	case cfg.Default == DefaultGoogleCloud:
		exp, err := googleSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: cloud trace exporter (OTLP to %s): %w", googleOTLP.endpoint, err)
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
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
		exp, err := mexporter.New(mexporter.WithProjectID(cfg.Project))
		if err != nil {
			return nil, fmt.Errorf("telemetry: cloud monitoring exporter: %w", err)
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
