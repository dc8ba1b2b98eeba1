package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/servotest"
)

// otlpReceiver is an OTLP/HTTP (protobuf) collector: it keeps the spans'
// names by the task id they carry, and the metric names it was sent.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   map[string][]string // servo.task_id → span names
	traces  map[string]map[string]bool
	service map[string]bool
	metrics map[string]bool
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	r := &otlpReceiver{spans: map[string][]string{}, traces: map[string]map[string]bool{}, service: map[string]bool{}, metrics: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf", http.StatusUnsupportedMediaType)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		switch req.URL.Path {
		case "/v1/traces":
			var m coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range m.GetResourceSpans() {
				for _, a := range rs.GetResource().GetAttributes() {
					if a.GetKey() == "service.name" {
						r.service[a.GetValue().GetStringValue()] = true
					}
				}
				for _, ss := range rs.GetScopeSpans() {
					for _, s := range ss.GetSpans() {
						for _, a := range s.GetAttributes() {
							if a.GetKey() == "servo.task_id" {
								id := a.GetValue().GetStringValue()
								r.spans[id] = append(r.spans[id], s.GetName())
								if r.traces[id] == nil {
									r.traces[id] = map[string]bool{}
								}
								r.traces[id][string(s.GetTraceId())] = true
							}
						}
					}
				}
			}
			_, _ = w.Write(mustMarshal(&coltracepb.ExportTraceServiceResponse{}))
		case "/v1/metrics":
			var m colmetricpb.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rm := range m.GetResourceMetrics() {
				for _, sm := range rm.GetScopeMetrics() {
					for _, x := range sm.GetMetrics() {
						r.metrics[x.GetName()] = true
					}
				}
			}
			_, _ = w.Write(mustMarshal(&colmetricpb.ExportMetricsServiceResponse{}))
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func mustMarshal(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return b
}

func (r *otlpReceiver) has(taskID string, names ...string) (missing []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := strings.Join(r.spans[taskID], "\n") + "\n"
	for _, n := range names {
		if !strings.Contains(got, n+"\n") {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestServoDevTelemetry runs `servo dev` with OTEL_EXPORTER_OTLP_ENDPOINT
// pointing at an in-test OTLP/HTTP receiver, runs a task that fails once
// and is retried and one that fails for good (a dead letter), and checks:
// the receiver gets the task's spans (every hop) and Servo's metrics; GET
// /metrics shows the instruments with the expected counts; `servo get ID
// --trace` prints the task's timeline.
func TestServoDevTelemetry(t *testing.T) {
	ctx := context.Background()
	recv, endpoint := newOTLPReceiver(t)
	bin := servoBinary(t)
	base := startServoDevEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=servo-otlp-test", "OTEL_BSP_SCHEDULE_DELAY=200", "OTEL_METRIC_EXPORT_INTERVAL=500"})
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	submit := func(key, payload, retry string) string {
		t.Helper()
		s, _, err := c.Submit(ctx, []byte(`{"tenantId":"acme","workspaceId":"ws","taskKey":"`+key+`","worker":"example","payload":`+payload+
			`,"heartbeatIntervalMs":200,"heartbeatTimeoutMs":5000,"retry":`+retry+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return s.TaskID
	}
	retried := submit("retried", `{"partitions":4,"partitionMs":150,"failAttempts":1}`, `{"maxAttempts":3,"initialBackoffMs":100,"maxBackoffMs":200}`)
	dead := submit("dead", `{"partitions":1,"partitionMs":10,"failAttempts":1}`, `{"maxAttempts":1}`)
	wait := func(id string, want api.State) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, _, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == want {
				return
			}
			if got.State.Terminal() || time.Now().After(deadline) {
				t.Fatalf("task %s is %s (%s), want %s", id, got.State, got.Reason, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait(retried, api.Succeeded)
	wait(dead, api.Failed)

	// GET /metrics: every instrument of the run, with its count. Poll: a
	// worker's run is counted just after its `completed` is answered.
	counts := []string{
		`servo_submits_total\{[^}]*servo_result="created"\} 2\n`,
		`servo_task_transitions_total\{[^}]*servo_from="",servo_reason="SUBMITTED",servo_to="PENDING",servo_worker="example"\} 2\n`,
		`servo_task_transitions_total\{[^}]*servo_from="PENDING",[^}]*servo_to="QUEUED",servo_worker="example"\} 2\n`,
		`servo_task_transitions_total\{[^}]*servo_from="QUEUED",[^}]*servo_to="RUNNING",servo_worker="example"\} 3\n`,
		`servo_task_transitions_total\{[^}]*servo_from="RUNNING",[^}]*servo_to="QUEUED",servo_worker="example"\} 1\n`,
		`servo_task_transitions_total\{[^}]*servo_from="RUNNING",[^}]*servo_to="SUCCEEDED",servo_worker="example"\} 1\n`,
		`servo_task_transitions_total\{[^}]*servo_from="RUNNING",[^}]*servo_to="FAILED",servo_worker="example"\} 1\n`,
		`servo_retries_scheduled_total\{[^}]*servo_worker="example"\} 1\n`,
		`servo_dead_letters_total\{[^}]*servo_worker="example"\} 1\n`,
		`servo_callbacks_total\{http_response_status_code="200",[^}]*servo_callback="started",servo_disposition="CONTINUE"\} 3\n`,
		`servo_callbacks_total\{http_response_status_code="200",[^}]*servo_callback="completed",servo_disposition="COMMITTED"\} 3\n`,
		`servo_callbacks_total\{http_response_status_code="200",[^}]*servo_callback="heartbeat",servo_disposition="CONTINUE"\} [1-9]`,
		`servo_callback_duration_seconds_count\{[^}]*servo_callback="started",servo_disposition="CONTINUE"\} 3\n`,
		// Each `started` is a commit, and a read unless the store wrote
		// the task's last version (the task cache: servo dev's one store
		// usually did): 3 to 6 RPCs for 3; telemetry adds none.
		`servo_callback_firestore_rpcs_count\{[^}]*servo_callback="started"\} 3\n`,
		`servo_callback_firestore_rpcs_sum\{[^}]*servo_callback="started"\} [3-6]\n`,
		`servo_task_start_latency_seconds_count\{[^}]*servo_worker="example"\} 3\n`,
		`servo_outbox_backlog\{[^}]*\} 0\n`,
		`servo_outbox_oldest_age_seconds\{[^}]*\} 0\n`,
		`servo_worker_runs_total\{error_type="",[^}]*servo_outcome="SUCCEEDED"\} 1\n`,
		`servo_worker_runs_total\{error_type="INFRASTRUCTURE",[^}]*servo_outcome="FAILED"\} 2\n`,
		`servo_worker_run_duration_seconds_count\{[^}]*servo_outcome="FAILED"\} 2\n`,
		`servo_worker_retry_attempts_total\{[^}]*\} 1\n`,
		`servo_worker_heartbeats_total\{[^}]*servo_result="sent"\} [1-9]`,
	}
	var missing []string
	var text string
	deadline := time.Now().Add(time.Minute)
	for {
		text = get(t, base+"/metrics")
		missing = missing[:0]
		for _, m := range counts {
			if !regexp.MustCompile(m).MatchString(text) {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range missing {
		t.Errorf("GET /metrics lacks %s", m)
	}
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", grepServo(text))
	}

	// servo get --trace: the retried task's timeline.
	out, err := exec.Command(bin, "get", retried, "--trace", "--api", base).CombinedOutput()
	if err != nil {
		t.Fatalf("servo get --trace: %v\n%s", err, out)
	}
	for _, want := range []string{"OFFSET", "POST /v1/tasks ", "send example", "process example", "POST /v1/tasks/{taskId}/started",
		"POST /v1/tasks/{taskId}/completed", "firestore.transaction COMPLETED", "send servo-task-events"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("servo get --trace lacks %q:\n%s", want, out)
		}
	}
	// The trace route reads the task first, as every route naming a task.
	if out, err := exec.Command(bin, "get", "task_01HGW5N7XHJM4GX29KZRXQP6N9", "--trace", "--api", base).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "task_not_found") {
		t.Errorf("servo get --trace of an unknown task: %v\n%s", err, out)
	}

	// The OTLP receiver got the task's spans, from every hop, and the metrics.
	deadline = time.Now().Add(time.Minute)
	var lack []string
	for {
		lack = recv.has(retried, "POST /v1/tasks", "send example", "process example", "POST /v1/tasks/{taskId}/started",
			"POST /v1/tasks/{taskId}/completed", "firestore.transaction COMPLETED", "send servo-task-events")
		recv.mu.Lock()
		gotMetrics := recv.metrics["servo.task.transitions"] && recv.metrics["servo.callbacks"]
		recv.mu.Unlock()
		if len(lack) == 0 && gotMetrics || time.Now().After(deadline) {
			if !gotMetrics {
				t.Errorf("the OTLP receiver got no Servo metrics (got %v)", recv.metrics)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(lack) > 0 {
		t.Errorf("the OTLP receiver lacks spans %q of task %s", lack, retried)
	}
	recv.mu.Lock()
	if !recv.service["servo-otlp-test"] {
		t.Errorf("spans' service names %v lack OTEL_SERVICE_NAME's", recv.service)
	}
	// A retry triggered by the `completed` callback stays in the task's trace.
	if n := len(recv.traces[retried]); n != 1 {
		t.Errorf("the retried task's spans are in %d traces, want 1", n)
	}
	recv.mu.Unlock()
	// startServoDevEnv's clean-up checks that servo dev stops on SIGINT.
}

func get(t *testing.T, u string) string {
	t.Helper()
	r := servotest.Do(t, http.MethodGet, u, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, r.Status, r.Body)
	}
	return string(r.Body)
}

func grepServo(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "servo_") && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
