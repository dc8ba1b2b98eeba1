package functions

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/auth"
)

// TestDashboardOnlyWithoutAccessPolicy: ServoAPI serves the dashboard at
// /ui/ while no access policy is set, and not under one: its pages read
// every tenant's tasks, which would go around the policy.
func TestDashboardOnlyWithoutAccessPolicy(t *testing.T) {
	for _, c := range []struct {
		name, policy string
		want         int
	}{
		{"open", "", http.StatusOK},
		// Not the dashboard: the API itself, which wants an identity first.
		{"policy", `{"principals":{"alice@example.com":{"acme":"viewer"}}}`, http.StatusUnauthorized},
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
			if rec.Code != c.want || html != (c.want == http.StatusOK) {
				t.Fatalf("GET /ui/health: %d %s, want %d (the dashboard's page: %v): %.300s", rec.Code, rec.Header().Get("Content-Type"), c.want, c.want == http.StatusOK, rec.Body)
			}
		})
	}
}
