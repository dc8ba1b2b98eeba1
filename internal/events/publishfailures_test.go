package events_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
)

// TestPublishFailuresCounted: with the events topic missing, every event
// the commit hook fails to publish is counted in
// servo.events.publish_failures{servo.op="publish", servo.cause="NotFound"}
// (the API and the callbacks count so, whether or not the sweeper runs),
// every one a re-drive fails to deliver with servo.op="redrive"; once the
// topic exists, nothing more is counted.
func TestPublishFailuresCounted(t *testing.T) {
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		t.Setenv(v, "")
	}
	tl, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "events-test", Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tl.Shutdown(context.Background()) })
	re := regexp.MustCompile(`(?m)^servo_events_publish_failures_total\{([^}]*)\} ([0-9.e+-]+)$`)
	failures := func(op string) (n float64) {
		t.Helper()
		rw := httptest.NewRecorder()
		tl.MetricsHandler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
		for _, m := range re.FindAllStringSubmatch(rw.Body.String(), -1) {
			if ok, _ := regexp.MatchString(`servo_cause="NotFound",servo_op="`+op+`"`, m[1]); ok {
				v, err := strconv.ParseFloat(m[2], 64)
				if err != nil {
					t.Fatal(err)
				}
				n += v
			}
		}
		return n
	}

	e := newEnv(t)
	ctx := context.Background()
	p := e.publisher(t, events.Config{EventsTopic: "ev-gone", DeadLetterTopic: "dl-gone"})
	e.st.OnCommit(p.Hook())
	pub0, redrive0 := failures("publish"), failures("redrive")
	tk := submitted(time.Now(), "run_1", api.RetryPolicy{})
	run(t, e.st, []task.Task{tk}, [][]step{succeed})
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := failures("publish") - pub0; got != float64(len(successWant)) {
		t.Fatalf("publish failures counted after the commits: %v, want %d (one per event)", got, len(successWant))
	}
	e.clock.Advance(time.Minute)
	if err := p.Redrive(ctx); err == nil {
		t.Fatal("Redrive with the topic missing succeeded")
	}
	if got := failures("redrive") - redrive0; got != float64(len(successWant)) {
		t.Fatalf("re-drive failures counted: %v, want %d", got, len(successWant))
	}

	e.subscribe(t, "ev-gone")
	if err := events.EnsureTopics(ctx, e.ps, "dl-gone"); err != nil {
		t.Fatal(err)
	}
	pub1, redrive1 := failures("publish"), failures("redrive")
	e.clock.Advance(time.Hour)
	if err := p.Redrive(ctx); err != nil {
		t.Fatalf("Redrive after the outage: %v", err)
	}
	if pub, redrive := failures("publish"), failures("redrive"); pub != pub1 || redrive != redrive1 {
		t.Fatalf("failures counted once the topic exists: publish %v → %v, redrive %v → %v", pub1, pub, redrive1, redrive)
	}
}
