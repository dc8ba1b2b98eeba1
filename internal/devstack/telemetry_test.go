package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/spanattr"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/worker"
)

// The test binary's telemetry: one in-memory span recorder and one
// Prometheus reader, set up by the first test that asks (the providers are
// process-wide, as in servo dev).
var (
	telOnce sync.Once
	telRec  *telemetry.Recorder
	tel     *telemetry.Telemetry
)

func tracing(t testing.TB) (*telemetry.Recorder, *telemetry.Telemetry) {
	t.Helper()
	telOnce.Do(func() {
		telRec = telemetry.NewRecorder(200000)
		var err error
		tel, err = telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "servo-test", Prometheus: true, Recorder: telRec})
		if err != nil {
			t.Fatal(err)
		}
	})
	if tel == nil {
		t.Fatal("telemetry setup failed earlier")
	}
	return telRec, tel
}

// dropFirstAttemptHeartbeats is the worker SDK's transport with attempt
// 1's heartbeats lost on the way: Servo sees a silent worker, its lease
// expires and the sweeper schedules the retry.
type dropFirstAttemptHeartbeats struct{}

func (dropFirstAttemptHeartbeats) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/heartbeat") {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if bytes.Contains(body, []byte(`"attempt":1,`)) {
			return nil, errors.New("test: heartbeat lost")
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraceAcrossEveryHop submits a task with the caller's traceparent to a
// worker built on the SDK whose first attempt goes silent (its heartbeats
// are lost): the sweeper expires the lease (zombie) and schedules attempt
// 2, which succeeds. The in-memory exporter must then hold spans from the
// submit, the enqueue, the worker SDK, each callback with its Firestore
// transaction, the sweeper and the events publisher, all in the caller's
// trace or linked to it, with Servo's attributes and no token; the Cloud
// Task's request carries traceparent, and so does the Pub/Sub event.
func TestTraceAcrossEveryHop(t *testing.T) {
	rec, tl := tracing(t)
	const workerName = "traced"

	var mu sync.Mutex
	var deliveries []http.Header
	var tokens []string
	sdk := worker.Handler(func(ctx context.Context, wt *worker.Task) (any, error) {
		if wt.Attempt() == 1 {
			<-ctx.Done() // silent: the lease runs out
			return nil, ctx.Err()
		}
		_, span := telemetry.Tracer().Start(ctx, "handler step")
		span.End()
		return map[string]int{"ok": 1}, nil
	}, worker.WithHTTPClient(&http.Client{Transport: dropFirstAttemptHeartbeats{}}), worker.WithWorkerID("w-traced"),
		worker.WithRetryBackoff(50*time.Millisecond, 100*time.Millisecond))
	wsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		deliveries = append(deliveries, r.Header.Clone())
		if m := regexp.MustCompile(`"taskToken":"([^"]+)"`).FindSubmatch(body); m != nil {
			tokens = append(tokens, string(m[1]))
		}
		mu.Unlock()
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(wsrv.Close)

	e := start(t, func(o *devstack.Options) {
		o.Workers = map[string]string{"scripted": o.Workers["scripted"], workerName: wsrv.URL}
	})
	ctx := context.Background()
	if err := events.EnsureSubscriptions(ctx, e.stack.PubSub, events.Subscription{Name: "traced-events", Topic: events.DefaultEventsTopic}); err != nil {
		t.Fatal(err)
	}

	// The caller's own trace.
	callerTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	body := `{"tenantId":"acme","workspaceId":"ws","taskKey":"traced","worker":"traced","payload":{"n":1},
		"heartbeatIntervalMs":200,"heartbeatTimeoutMs":1000,"retry":{"maxAttempts":3,"initialBackoffMs":100,"maxBackoffMs":200}}`
	req, _ := http.NewRequest("POST", e.stack.URL+"/v1/tasks", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, out)
	}
	id := regexp.MustCompile(`"taskId":"([^"]+)"`).FindStringSubmatch(string(out))[1]
	v := e.WaitState(id, api.Succeeded)
	if v.Attempt != 2 || len(v.Attempts) != 2 || v.Attempts[0].Outcome != api.OutcomeZombie {
		t.Fatalf("want attempt 1 ZOMBIE then attempt 2 SUCCEEDED, got %+v", v.Attempts)
	}

	// The Pub/Sub event of the success carries the trace context.
	var eventTP string
	receive(t, e.stack.PubSub, "traced-events", func(m *pubsub.Message) bool {
		if m.Attributes[events.AttrTaskID] != id || m.Attributes[events.AttrState] != string(api.Succeeded) {
			return false
		}
		eventTP = m.Attributes["traceparent"]
		for k, a := range m.Attributes {
			for _, tok := range tokens {
				if strings.Contains(a, tok) {
					t.Errorf("event attribute %s carries the task token", k)
				}
			}
		}
		return true
	})
	if !telemetry.SpanContextOf(eventTP).IsValid() {
		t.Errorf("the SUCCEEDED event has no valid traceparent attribute (%q)", eventTP)
	}

	// Every delivery carried traceparent; the first continues the caller's trace.
	mu.Lock()
	if len(deliveries) < 2 {
		t.Fatalf("%d deliveries, want 2", len(deliveries))
	}
	for i, h := range deliveries {
		if !telemetry.SpanContextOf(h.Get("traceparent")).IsValid() {
			t.Errorf("delivery %d has no traceparent header (%q)", i+1, h.Get("traceparent"))
		}
	}
	if got := telemetry.SpanContextOf(deliveries[0].Get("traceparent")).TraceID(); got != callerTrace {
		t.Errorf("attempt 1's Cloud Task request is in trace %s, want the caller's %s", got, callerTrace)
	}
	toks := append([]string(nil), tokens...)
	mu.Unlock()
	if len(toks) < 2 {
		t.Fatalf("saw %d tokens in deliveries", len(toks))
	}

	// The spans: wait until attempt 2's worker span has ended.
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = rec.TaskSpans(id)
		if find(spans, "process traced", 2) != nil && find(spans, "send servo-task-events", 0) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt 2's worker span was not recorded; have %d spans", len(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Which traces belong to the task: the caller's, and those of spans
	// linked to it (the sweeper's).
	linked := map[trace.TraceID]bool{callerTrace: true}
	var sweeperSpan sdktrace.ReadOnlySpan
	for _, s := range spans {
		for _, l := range s.Links() {
			if l.SpanContext.TraceID() == callerTrace {
				linked[s.SpanContext().TraceID()] = true
				if strings.HasPrefix(s.Name(), "servo.sweeper.apply") {
					sweeperSpan = s
				}
			}
		}
	}
	if sweeperSpan == nil {
		t.Fatal("no sweeper span linked to the task's trace")
	}
	if got := attr(sweeperSpan, spanattr.DutyKey); got != "lease" {
		t.Errorf("sweeper span duty = %q, want lease", got)
	}
	if telemetry.SpanContextOf(eventTP).IsValid() && !linked[telemetry.SpanContextOf(eventTP).TraceID()] {
		t.Errorf("the event's trace %s is neither the caller's nor linked to it", telemetry.SpanContextOf(eventTP).TraceID())
	}

	type want struct {
		name    string
		attempt int
		kind    trace.SpanKind
		attrs   []string
	}
	for _, w := range []want{
		{"POST /v1/tasks", 1, trace.SpanKindServer, []string{"servo.task_id", "servo.tenant_id", "servo.worker"}},
		{"send traced", 1, trace.SpanKindProducer, []string{"servo.task_id", "servo.attempt", "servo.worker"}},
		{"process traced", 1, trace.SpanKindServer, []string{"servo.task_id", "servo.attempt", "servo.worker"}},
		{"POST /v1/tasks/{taskId}/started", 1, trace.SpanKindServer, []string{"servo.task_id", "servo.attempt", "servo.tenant_id", "servo.disposition"}},
		{"firestore.transaction STARTED", 1, trace.SpanKindClient, []string{"servo.task_id"}},
		{"servo.sweeper.apply LEASE_EXPIRED", 1, trace.SpanKindInternal, []string{"servo.task_id", "servo.duty"}},
		{"send traced", 2, trace.SpanKindProducer, []string{"servo.task_id", "servo.attempt", "servo.worker"}},
		{"process traced", 2, trace.SpanKindServer, []string{"servo.task_id", "servo.attempt"}},
		{"POST /v1/tasks/{taskId}/started", 2, trace.SpanKindServer, []string{"servo.disposition"}},
		{"POST /v1/tasks/{taskId}/completed", 2, trace.SpanKindServer, []string{"servo.task_id", "servo.attempt", "servo.disposition"}},
		{"POST /v1/tasks/{taskId}/completed", 2, trace.SpanKindClient, []string{"servo.disposition"}},
		{"firestore.transaction COMPLETED", 2, trace.SpanKindClient, []string{"servo.task_id"}},
		{"send servo-task-events", 0, trace.SpanKindProducer, []string{"servo.task_id", "messaging.system"}},
	} {
		s := findKind(spans, w.name, w.attempt, w.kind)
		if s == nil {
			t.Errorf("no %s span %q for attempt %d", w.kind, w.name, w.attempt)
			continue
		}
		if !linked[s.SpanContext().TraceID()] {
			t.Errorf("span %q (attempt %d) is in trace %s, neither the caller's nor linked to it", w.name, w.attempt, s.SpanContext().TraceID())
		}
		for _, k := range w.attrs {
			if attr(s, spanattr.TaskIDKey) != "" && attr(s, spanattr.TaskIDKey) != id {
				t.Errorf("span %q names task %s", w.name, attr(s, spanattr.TaskIDKey))
			}
			if !hasKey(s, k) {
				t.Errorf("span %q (attempt %d) lacks %s", w.name, w.attempt, k)
			}
		}
	}
	// The submit continued the caller's trace; a callback's transaction is
	// the child of its server span; the handler's own span is the child of
	// the attempt's.
	if s := find(spans, "POST /v1/tasks", 0); s == nil || s.SpanContext().TraceID() != callerTrace {
		t.Errorf("the submit span is not in the caller's trace")
	}
	if srv, tx := findKind(spans, "POST /v1/tasks/{taskId}/completed", 2, trace.SpanKindServer), find(spans, "firestore.transaction COMPLETED", 2); srv != nil && tx != nil && tx.Parent().SpanID() != srv.SpanContext().SpanID() {
		t.Errorf("the completed transaction's parent is %s, want the callback's server span %s", tx.Parent().SpanID(), srv.SpanContext().SpanID())
	}
	if step, att := find(rec.Spans(), "handler step", 0), find(spans, "process traced", 2); step == nil || att == nil ||
		step.SpanContext().TraceID() != att.SpanContext().TraceID() {
		t.Errorf("the handler's own span is not in attempt 2's trace")
	}

	// No token anywhere in any recorded span.
	for _, s := range rec.Spans() {
		var texts []string
		texts = append(texts, s.Name(), s.Status().Description)
		for _, a := range s.Attributes() {
			texts = append(texts, a.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, a := range ev.Attributes {
				texts = append(texts, a.Value.Emit())
			}
		}
		for _, x := range texts {
			for _, tok := range toks {
				if strings.Contains(x, tok) {
					t.Fatalf("span %q carries a task token", s.Name())
				}
			}
		}
	}

	// Metrics of this worker (its name is this test's own).
	scrape := scrapeMetrics(t, tl)
	for _, m := range []string{
		`servo_zombies_total\{[^}]*servo_worker="traced"\} 1\n`,
		`servo_retries_scheduled_total\{[^}]*servo_worker="traced"\} 1\n`,
		`servo_task_transitions_total\{[^}]*servo_from="RUNNING",[^}]*servo_to="SUCCEEDED",servo_worker="traced"\} 1\n`,
		`servo_task_transitions_total\{[^}]*servo_from="RUNNING",[^}]*servo_to="QUEUED",servo_worker="traced"\} 1\n`,
		`servo_task_start_latency_seconds_count\{[^}]*servo_worker="traced"\} 2\n`,
		`servo_sweeper_handled_total\{[^}]*servo_duty="lease",servo_result="applied"\} [1-9]`,
	} {
		if !regexp.MustCompile(m).MatchString(scrape) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

func scrapeMetrics(t *testing.T, tl *telemetry.Telemetry) string {
	t.Helper()
	rr := httptest.NewRecorder()
	tl.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	return rr.Body.String()
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.Emit()
		}
	}
	return ""
}

func hasKey(s sdktrace.ReadOnlySpan, k string) bool {
	for _, a := range s.Attributes() {
		if string(a.Key) == k {
			return true
		}
	}
	return false
}

// find returns the first span named name for attempt (0: any attempt).
func find(spans []sdktrace.ReadOnlySpan, name string, attempt int) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name && (attempt == 0 || attr(s, spanattr.AttemptKey) == strconv.Itoa(attempt)) {
			return s
		}
	}
	return nil
}

func findKind(spans []sdktrace.ReadOnlySpan, name string, attempt int, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.SpanKind() == kind && s.Name() == name && (attempt == 0 || attr(s, spanattr.AttemptKey) == strconv.Itoa(attempt)) {
			return s
		}
	}
	return nil
}
