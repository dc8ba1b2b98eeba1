package functions

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/auth"
)

// TestDashboardUnderAccessPolicy: ServoAPI serves the dashboard at /ui/
// with or without an access policy; under one, a caller without an
// identity gets the sign-in page, never the page's data.
func TestDashboardUnderAccessPolicy(t *testing.T) {
	for _, c := range []struct {
		name, policy string
		want         int
		signIn       bool
	}{
		{"open", "", http.StatusOK, false},
		{"policy", `{"principals":{"alice@example.com":{"acme":"viewer"}}}`, http.StatusUnauthorized, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			instanceEnv(t)
			t.Setenv("SERVO_ACCESS", c.policy)
			_, ring, err := auth.GenerateKeyRing("k1")
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(auth.EnvKeys, string(ring))
			freshInstance(nil)

			rec := httptest.NewRecorder()
			ServoAPI(rec, httptest.NewRequest(http.MethodGet, "/ui/health", nil))
			html := strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html")
			signIn := strings.Contains(rec.Body.String(), "signin-form")
			if rec.Code != c.want || !html || signIn != c.signIn {
				t.Fatalf("GET /ui/health: %d %s (sign-in page %v), want %d (sign-in page %v): %.300s", rec.Code, rec.Header().Get("Content-Type"), signIn, c.want, c.signIn, rec.Body)
			}
			rec = httptest.NewRecorder()
			ServoAPI(rec, httptest.NewRequest(http.MethodGet, "/ui/static/app.css", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("GET /ui/static/app.css: %d", rec.Code)
			}
		})
	}
}
