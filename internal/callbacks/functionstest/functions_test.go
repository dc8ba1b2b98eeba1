package functionstest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/functions"
)

// TestServoCallbacksUnconfigured: without its configuration the function
// answers every callback 503 misconfigured, disposition RETRY, with
// Retry-After, and does not tell the caller why.
func TestServoCallbacksUnconfigured(t *testing.T) {
	for _, v := range []string{"SERVO_PROJECT", "GOOGLE_CLOUD_PROJECT", "SERVO_TOKEN_KEYS", "SERVO_TOKEN_KEYS_FILE"} {
		t.Setenv(v, "")
	}
	for range 2 { // within its backoff the failure is remembered, not retried per request
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/tasks/task_x/heartbeat", strings.NewReader(`{"attempt":1,"workerId":"w"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer abc.def.ghi")
		functions.ServoCallbacks(w, r)
		var resp api.CallbackResponse
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("body %q: %v", w.Body.String(), err)
		}
		if w.Code != http.StatusServiceUnavailable || resp.Error != api.CodeMisconfigured || resp.Disposition != api.Retry || resp.ServerTime.IsZero() {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
		// Retry-After is the time to the next start-up try: 1 s after a
		// first failure (functions/lazy.go).
		if w.Header().Get("Retry-After") != "1" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", w.Header())
		}
		if strings.Contains(w.Body.String(), "SERVO_PROJECT") {
			t.Errorf("the configuration error reached the caller: %s", w.Body.String())
		}
	}
}
