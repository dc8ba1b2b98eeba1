package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
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

// TestHealthReportsIdentity: the production API reports how it identifies
// callers on GET /v1/health. Without SERVO_API_AUDIENCE it accepts no
// Google ID token and says so (servo doctor fails on it); under an access
// policy a caller with a token is then refused. With the audience set it
// accepts Google ID tokens and reports no problem; IAP's header is listed
// only with SERVO_IAP_AUDIENCE.
func TestHealthReportsIdentity(t *testing.T) {
	for _, c := range []struct {
		name, audience, iap, policy string
		accepts                     []string
		problem                     bool
	}{
		{"unset", "", "", "", nil, true},
		{"set", "https://us-central1-p.cloudfunctions.net/servo-api, https://servo-api-1.us-central1.run.app", "", "", []string{"google"}, false},
		{"behind IAP", "https://us-central1-p.cloudfunctions.net/servo-api", "/projects/1/global/backendServices/2", "", []string{"iap", "google"}, false},
		{"unset, under a policy", "", "", `{"principals":{"alice@example.com":{"acme":"viewer"}}}`, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			instanceEnv(t)
			t.Setenv("SERVO_API_AUDIENCE", c.audience)
			t.Setenv("SERVO_IAP_AUDIENCE", c.iap)
			t.Setenv("SERVO_ACCESS", c.policy)
			_, ring, err := auth.GenerateKeyRing("k1")
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(auth.EnvKeys, string(ring))
			freshInstance(nil)

			req := httptest.NewRequest(http.MethodGet, "/v1/health", nil)
			if c.policy != "" {
				req.Header.Set("Authorization", "Bearer x.y.z")
			}
			rec := httptest.NewRecorder()
			ServoAPI(rec, req)
			if c.policy != "" {
				if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "no identity verifier") {
					t.Fatalf("a token under a policy without an audience: %d %s, want 401", rec.Code, rec.Body)
				}
				return
			}
			var h api.HealthResponse
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &h) != nil {
				t.Fatalf("GET /v1/health: %d %s", rec.Code, rec.Body)
			}
			if !slices.Equal(h.Identity.Accepts, c.accepts) || (len(h.Identity.Problems) > 0) != c.problem {
				t.Fatalf("identity %+v, want accepts %v, a problem %v", h.Identity, c.accepts, c.problem)
			}
			if c.problem && !strings.Contains(h.Identity.Problems[0], "SERVO_API_AUDIENCE") {
				t.Fatalf("the problem does not name the variable: %q", h.Identity.Problems)
			}
		})
	}
}

// TestServoAPIRefusesAnOlderSchema: against a database holding data of an
// older layout (here: tasks and no meta/schema, schema 0), the API does
// not start (503, as while any dependency is missing) instead of reading
// older names; after `servo migrate` (store.Migrate) it serves.
func TestServoAPIRefusesAnOlderSchema(t *testing.T) {
	instanceEnv(t)
	_, ring, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(ring))
	ctx := context.Background()
	st, err := store.New(ctx, os.Getenv("SERVO_PROJECT"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old := task.Task{ID: task.NewTaskID(time.Now()), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w", Payload: json.RawMessage(`{}`)}
	if _, _, err := st.Create(ctx, old, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	health := func() int {
		freshInstance(nil)
		rec := httptest.NewRecorder()
		ServoAPI(rec, httptest.NewRequest(http.MethodGet, "/v1/health", nil))
		return rec.Code
	}
	if code := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /v1/health against schema 0: %d, want 503 (the API refuses to start)", code)
	}
	if _, err := st.Migrate(ctx, store.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := health(); code != http.StatusOK {
		t.Fatalf("GET /v1/health after the migration: %d, want 200", code)
	}
}
