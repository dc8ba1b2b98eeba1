package functions

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/task"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// TestEntryPointsRecoverFromAFailedStart: the first request finds the key
// ring broken and is answered 503 misconfigured with a Retry-After; once the
// key ring is fixed, a request inside the backoff is still refused at once
// (no rebuild), and the first request after the backoff builds the
// dependencies and is served by the real handler against the Firestore
// emulator. With sync.Once the instance stayed 503 until recycled.
func TestEntryPointsRecoverFromAFailedStart(t *testing.T) {
	tests := []struct {
		name string
		// req is a request that the function's real handler answers with
		// want.
		req  func() *http.Request
		fn   http.HandlerFunc
		want int
	}{
		{
			name: "ServoAPI",
			fn:   ServoAPI,
			req: func() *http.Request {
				// An unknown task: the handler asks Firestore, which says 404.
				return httptest.NewRequest(http.MethodGet, "/v1/tasks/"+task.NewTaskID(time.Now()), nil)
			},
			want: http.StatusNotFound,
		},
		{
			name: "ServoCallbacks",
			fn:   ServoCallbacks,
			req: func() *http.Request {
				// No task token: the handler answers 401.
				r := httptest.NewRequest(http.MethodPost, "/v1/tasks/"+task.NewTaskID(time.Now())+"/started",
					strings.NewReader(`{"attempt":1,"workerId":"w1"}`))
				r.Header.Set("Content-Type", "application/json")
				return r
			},
			want: http.StatusUnauthorized,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			instanceEnv(t)
			t.Setenv(auth.EnvKeys, `{"broken":`)
			clk := servotest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			freshInstance(clk.Now)

			do := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				tc.fn(rec, tc.req())
				return rec
			}
			unavailable := func(step string, rec *httptest.ResponseRecorder) {
				t.Helper()
				var body struct {
					Error string `json:"error"`
				}
				if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != api.CodeMisconfigured {
					t.Fatalf("%s: %d %s, want 503 %s", step, rec.Code, rec.Body, api.CodeMisconfigured)
				}
				if ra := rec.Header().Get("Retry-After"); ra != "1" {
					t.Fatalf("%s: Retry-After %q, want 1", step, ra)
				}
			}
			unavailable("broken key ring", do())

			keys, ring, err := auth.GenerateKeyRing("k1")
			if err != nil || keys == nil {
				t.Fatal(err)
			}
			t.Setenv(auth.EnvKeys, string(ring))
			clk.Advance(500 * time.Millisecond)
			unavailable("fixed, within the backoff", do())

			clk.Advance(500 * time.Millisecond)
			if rec := do(); rec.Code != tc.want {
				t.Fatalf("after the backoff: %d %s, want %d", rec.Code, rec.Body, tc.want)
			}
			// Built once, kept.
			if rec := do(); rec.Code != tc.want {
				t.Fatalf("next request: %d %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

// instanceEnv sets what a function instance of these tests needs besides
// its keys: a project of the test's own, a callbacks URL, no workers, and
// Pub/Sub and Cloud Tasks at an address where nothing answers.
func instanceEnv(t *testing.T) {
	t.Helper()
	t.Setenv("SERVO_PROJECT", emulatortest.ProjectID(t))
	t.Setenv("SERVO_CALLBACK_BASE_URL", "https://callbacks.example.com")
	t.Setenv("SERVO_WORKERS", "")
	t.Setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
	t.Setenv("CLOUD_TASKS_EMULATOR_HOST", "127.0.0.1:1")
}

// freshInstance makes the lazy builds new, as in a new instance, on the
// clock now (nil: time.Now).
func freshInstance(now func() time.Time) {
	serverInit = newLazy(serverInit.build)
	serverInit.now = now
	for _, e := range []*entry{apiEntry, callbacksEntry, claimEntry, jobsEntry} {
		e.init = newLazy(e.init.build)
		e.init.now = now
	}
}

// TestEntryPointsUnavailable pins each entry point's answer while its
// handler cannot be built (here: no project): 503 misconfigured, its content type, the
// callbacks' and claim's no-store, a Retry-After, and its own JSON body
// (RETRY for the workers' endpoints), never naming the configuration
// problem to the unauthenticated callers.
func TestEntryPointsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fn           http.HandlerFunc
		contentType  string
		cacheControl string
		// body checks the decoded body.
		body func(map[string]any) bool
	}{
		{"ServoAPI", ServoAPI, "application/json; charset=utf-8", "", func(b map[string]any) bool {
			return b["error"] == api.CodeMisconfigured && strings.Contains(b["message"].(string), "SERVO_PROJECT")
		}},
		{"ServoCallbacks", ServoCallbacks, "application/json", "no-store", func(b map[string]any) bool {
			return b["error"] == api.CodeMisconfigured && b["disposition"] == string(api.Retry) && b["serverTime"] != nil
		}},
		{"ServoClaim", ServoClaim, "application/json", "no-store", func(b map[string]any) bool {
			return b["error"] == api.CodeMisconfigured && b["disposition"] == string(api.Retry) && b["serverTime"] != nil
		}},
		{"ServoJobs", ServoJobs, "application/json", "", func(b map[string]any) bool {
			return b["error"] == api.CodeMisconfigured
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			instanceEnv(t)
			t.Setenv("SERVO_PROJECT", "")
			t.Setenv("GOOGLE_CLOUD_PROJECT", "")
			freshInstance(nil)
			rec := httptest.NewRecorder()
			tc.fn(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`)))
			h := rec.Header()
			if rec.Code != http.StatusServiceUnavailable || h.Get("Content-Type") != tc.contentType || h.Get("Cache-Control") != tc.cacheControl || h.Get("Retry-After") != "1" {
				t.Fatalf("%d, headers %v; want 503, Content-Type %q, Cache-Control %q, Retry-After 1", rec.Code, h, tc.contentType, tc.cacheControl)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || !tc.body(body) {
				t.Fatalf("body %s (%v)", rec.Body, err)
			}
			if tc.name != "ServoAPI" && strings.Contains(rec.Body.String(), "SERVO_") {
				t.Errorf("the configuration error reached the caller: %s", rec.Body)
			}
		})
	}
	t.Run("ServoSweeper", func(t *testing.T) {
		instanceEnv(t)
		t.Setenv("SERVO_PROJECT", "")
		t.Setenv("GOOGLE_CLOUD_PROJECT", "")
		freshInstance(nil)
		if err := ServoSweeper(t.Context(), cloudevents.NewEvent()); err == nil || !strings.Contains(err.Error(), "SERVO_PROJECT") {
			t.Fatalf("ServoSweeper: %v, want the configuration error", err)
		}
	})
}

// TestEntryPointsNameTheCause: while the function cannot start, its 503
// names what to fix with the error code the runbook routes: the key ring's
// secret unreadable (secret_unavailable), its configuration
// (misconfigured); a dependency that does not answer stays unavailable
// (server.FailureCode, unit-tested in internal/server).
func TestEntryPointsNameTheCause(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"secret unreadable", map[string]string{auth.EnvKeys: "", auth.EnvKeysSecret: "projects/servo-test/secrets/servo-token-keys",
			"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/servo-test-credentials.json"}, api.CodeSecretUnavailable},
		{"key ring broken", map[string]string{auth.EnvKeys: `{"broken":`}, api.CodeMisconfigured},
		{"no project", map[string]string{"SERVO_PROJECT": "", "GOOGLE_CLOUD_PROJECT": ""}, api.CodeMisconfigured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			instanceEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			freshInstance(nil)
			for _, fn := range []http.HandlerFunc{ServoAPI, ServoCallbacks} {
				rec := httptest.NewRecorder()
				fn(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`)))
				var body struct {
					Error string `json:"error"`
				}
				if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != tc.want {
					t.Fatalf("%d %s, want 503 %s", rec.Code, rec.Body, tc.want)
				}
			}
		})
	}
}
