package functions

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/task"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }

// TestEntryPointsRecoverFromAFailedStart: the first request finds the key
// ring broken and is answered 503 unavailable with a Retry-After; once the
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
			// A fresh instance with the test's clock.
			depsInit, apiInit, callbacksInit = newLazy(depsInit.build), newLazy(apiInit.build), newLazy(callbacksInit.build)
			for _, now := range []*func() time.Time{&depsInit.now, &apiInit.now, &callbacksInit.now} {
				*now = clk.Now
			}

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
				if rec.Code != http.StatusServiceUnavailable || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != api.CodeUnavailable {
					t.Fatalf("%s: %d %s, want 503 %s", step, rec.Code, rec.Body, api.CodeUnavailable)
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
