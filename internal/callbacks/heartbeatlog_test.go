package callbacks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/telemetry"
)

// acceptedCounted scrapes servo.callbacks for accepted callbacks of kind.
func acceptedCounted(t *testing.T, h http.Handler, kind callbacks.Kind) int {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	m := regexp.MustCompile(`servo_callbacks_total\{http_response_status_code="200",[^}]*servo_callback="` + string(kind) + `",servo_disposition="CONTINUE"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestHeartbeatLogLines: an accepted heartbeat writes no INFO line (it is
// counted in servo.callbacks instead) unless LogHeartbeats, nor an
// accepted started unless LogStarted; a refused one and every completed
// callback still log their line, with taskId, attempt and tenantId.
func TestHeartbeatLogLines(t *testing.T) {
	for _, tc := range []struct {
		name          string
		logHeartbeats bool
		logStarted    bool
		worker        string // the heartbeat's workerId (w1 holds the lease)
		wantStatus    int
		wantLevel     string // the heartbeat's line, "" for none at INFO
		wantStarted   string // the started line's level, "" for none at INFO
	}{
		{name: "accepted", worker: "w1", wantStatus: http.StatusOK},
		{name: "accepted, SERVO_LOG_HEARTBEATS", logHeartbeats: true, worker: "w1", wantStatus: http.StatusOK, wantLevel: "INFO"},
		{name: "accepted, SERVO_LOG_STARTED", logStarted: true, worker: "w1", wantStatus: http.StatusOK, wantStarted: "INFO"},
		{name: "refused: another worker", worker: "w2", wantStatus: http.StatusConflict, wantLevel: "WARNING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
			for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
				t.Setenv(v, "")
			}
			tl, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "callbacks-test", Prometheus: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tl.Shutdown(context.Background()) })
			info := &servotest.Buffer{}
			e := newEnv(t, func(c *callbacks.Config) {
				c.LogHeartbeats = tc.logHeartbeats
				c.LogStarted = tc.logStarted
				c.Logger = logs.New(info, slog.LevelInfo)
			})
			tk := e.queued()
			tok := e.token(tk, 1)
			if rp := e.do(request{kind: callbacks.KindStarted, taskID: tk.ID, token: tok, body: mustJSON(t, startedReq(1, "w1"))}); rp.status != http.StatusOK {
				t.Fatalf("started: %d %s", rp.status, rp.raw)
			}
			const beats = 3
			for range beats {
				if rp := e.do(request{kind: callbacks.KindHeartbeat, taskID: tk.ID, token: tok, body: mustJSON(t, heartbeatReq(1, tc.worker))}); rp.status != tc.wantStatus {
					t.Fatalf("heartbeat: %d %s, want %d", rp.status, rp.raw, tc.wantStatus)
				}
			}
			// A started from another worker is refused, and logged whatever
			// LogStarted says.
			if rp := e.do(request{kind: callbacks.KindStarted, taskID: tk.ID, token: tok, body: mustJSON(t, startedReq(1, "w3"))}); rp.status != http.StatusConflict {
				t.Fatalf("started by another worker: %d %s, want 409", rp.status, rp.raw)
			}
			if rp := e.do(request{kind: callbacks.KindCompleted, taskID: tk.ID, token: tok, body: mustJSON(t, completedReq(1, "w1", api.OutcomeSucceeded))}); rp.status != http.StatusOK {
				t.Fatalf("completed: %d %s", rp.status, rp.raw)
			}
			var started, refusedStarted, heartbeats, completed int
			sc := bufio.NewScanner(strings.NewReader(info.String()))
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("not a JSON line: %q", sc.Text())
				}
				if m["taskId"] != tk.ID || m["attempt"] != float64(1) || m["tenantId"] != "acme" {
					t.Errorf("line without its task, attempt or tenant: %v", m)
				}
				switch m["kind"] {
				case string(callbacks.KindStarted):
					if m["status"] != float64(http.StatusOK) {
						refusedStarted++
						if m["severity"] != "WARNING" {
							t.Errorf("refused started line at %v, want WARNING: %v", m["severity"], m)
						}
						continue
					}
					started++
					if m["severity"] != tc.wantStarted {
						t.Errorf("started line at %v, want %s: %v", m["severity"], tc.wantStarted, m)
					}
				case string(callbacks.KindCompleted):
					completed++
					if m["severity"] != "INFO" {
						t.Errorf("completed line at %v, want INFO: %v", m["severity"], m)
					}
				case string(callbacks.KindHeartbeat):
					heartbeats++
					if m["severity"] != tc.wantLevel {
						t.Errorf("heartbeat line at %v, want %s: %v", m["severity"], tc.wantLevel, m)
					}
				}
			}
			wantLines := 0
			if tc.wantLevel != "" {
				wantLines = beats
			}
			wantStarted := 0
			if tc.wantStarted != "" {
				wantStarted = 1
			}
			if started != wantStarted || refusedStarted != 1 || heartbeats != wantLines || completed != 1 {
				t.Fatalf("%d accepted and %d refused started, %d heartbeat and %d completed lines at INFO or above, want %d, 1, %d and 1:\n%s",
					started, refusedStarted, heartbeats, completed, wantStarted, wantLines, info.String())
			}
			wantCounted := 0
			if tc.wantStatus == http.StatusOK {
				wantCounted = beats
			}
			if got := acceptedCounted(t, tl.MetricsHandler(), callbacks.KindHeartbeat); got != wantCounted {
				t.Fatalf("servo.callbacks counted %d accepted heartbeats, want %d", got, wantCounted)
			}
			if got := acceptedCounted(t, tl.MetricsHandler(), callbacks.KindStarted); got != 1 {
				t.Fatalf("servo.callbacks counted %d accepted started, want 1", got)
			}
		})
	}
}
