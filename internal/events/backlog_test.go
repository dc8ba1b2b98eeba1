package events_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/task"
)

// TestOutboxBacklogMetricDuringOutage: while Pub/Sub is unreachable the
// outbox backlog gauge (servo.outbox.backlog, servo.outbox.oldest_age)
// counts the undelivered entries on every re-drive pass, also once they
// are backed off after a failed delivery and no pass may retry them yet,
// so that the outbox alert holds for as long as the outage lasts; after
// recovery it drops to 0 (a pass reports what it found, then delivered).
func TestOutboxBacklogMetricDuringOutage(t *testing.T) {
	// The metrics only: a meter provider of Prometheus text, no tracer
	// provider (spans would add traceparent to the other tests' messages).
	reg := prometheus.NewRegistry()
	exp, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	otel.SetMeterProvider(mp) // telemetry's instruments follow the global provider
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	gauge := func(name string) float64 {
		t.Helper()
		rr := httptest.NewRecorder()
		metrics.ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
		m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} ([0-9.e+-]+)$`).FindStringSubmatch(rr.Body.String())
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}

	e := newEnv(t)
	ctx := context.Background()
	bad, err := pubsub.NewClient(ctx, e.project, option.WithEndpoint(servotest.DeadAddr(t)),
		option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Close() })
	down := e.publisher(t, events.Config{Client: bad, EventsTopic: "ev-bl", DeadLetterTopic: "dl-bl", PublishTimeout: 300 * time.Millisecond})
	e.st.OnCommit(down.Hook())
	now := time.Now()
	tk := submitted(now, "run_bl", api.RetryPolicy{})
	run(t, e.st, []task.Task{tk}, [][]step{succeed})
	_ = down.Flush(ctx)
	e.st.OnCommit(nil)
	entries := len(outboxIDs(t, e.st, false, tk))

	// Past the grace period: the pass retries, fails, backs the entries off.
	e.clock.Advance(time.Minute)
	_ = down.Redrive(ctx)
	if n := gauge("servo_outbox_backlog"); int(n) != entries {
		t.Fatalf("backlog after the failed re-drive %v, want %d", n, entries)
	}
	// Later passes may not retry them yet (backed off): still the backlog.
	for range 2 {
		e.clock.Advance(5 * time.Second)
		if err := down.Redrive(ctx); err != nil {
			t.Fatalf("Redrive with nothing due: %v", err)
		}
		if n, age := gauge("servo_outbox_backlog"), gauge("servo_outbox_oldest_age_seconds"); int(n) != entries || age < 60 {
			t.Fatalf("backlog while backed off: %v entries, oldest %vs; want %d, at least 60s", n, age, entries)
		}
	}
	// Recovered (the topics exist): delivered, 0.
	e.subscribe(t, "ev-bl")
	e.subscribe(t, "dl-bl")
	up := e.publisher(t, events.Config{EventsTopic: "ev-bl", DeadLetterTopic: "dl-bl"})
	e.clock.Advance(time.Hour)
	for range 2 { // the first pass found them (and delivered them), the next none
		if err := up.Redrive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := gauge("servo_outbox_backlog"); n != 0 {
		t.Fatalf("backlog after recovery %v, want 0", n)
	}
}
