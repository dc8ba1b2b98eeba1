package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/store"
)

// options are clients whose servers do not answer (nothing here reaches
// them), and a key ring.
func options(t *testing.T) Options {
	t.Helper()
	t.Setenv(store.EmulatorHostEnv, "127.0.0.1:1")
	t.Setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
	ctx := context.Background()
	st, err := store.New(ctx, "servo-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ps, err := pubsub.NewClient(ctx, "servo-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	tasks, err := cloudtasks.NewClient(ctx, option.WithEndpoint("127.0.0.1:1"), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tasks.Close() })
	keys, _, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	return Options{Store: st, PubSub: ps, Tasks: tasks, Keys: keys}
}

func testConfig() config.Config {
	c := config.Default()
	c.Project = "servo-test"
	c.CallbackBaseURL = &url.URL{Scheme: "https", Host: "callbacks.example.com"}
	return c
}

// TestNew: the handlers follow the configuration and the options: the
// dashboard under any access policy, the claim endpoint only with a way
// to name the caller, production's checks of identities by default (on
// the dashboard too), the sweeper's settings.
func TestNew(t *testing.T) {
	policy, err := auth.ParsePolicy([]byte(`{"principals":{"alice@example.com":{"acme":"viewer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		config    func(*config.Config)
		options   func(*Options)
		dashboard bool // GET /ui/static/app.css is the dashboard's
		claim     bool
	}{
		{name: "production, open", dashboard: true},
		{name: "production, policy", config: func(c *config.Config) { c.Access = policy }, dashboard: true},
		{name: "claim audience", config: func(c *config.Config) { c.ClaimAudience = "https://claim.example.com" }, dashboard: true, claim: true},
		{name: "claim identity", options: func(o *Options) { o.ClaimIdentity = pull.DevIdentity() }, dashboard: true, claim: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, o := testConfig(), options(t)
			if tc.config != nil {
				tc.config(&cfg)
			}
			if tc.options != nil {
				tc.options(&o)
			}
			s, err := New(context.Background(), cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rec := httptest.NewRecorder()
			s.API.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/static/app.css", nil))
			if got := rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/css"); got != tc.dashboard {
				t.Errorf("dashboard served: %v (%d %s), want %v", got, rec.Code, rec.Header().Get("Content-Type"), tc.dashboard)
			}
			if (s.Claim != nil) != tc.claim {
				t.Errorf("claim endpoint: %v, want %v", s.Claim != nil, tc.claim)
			}
			if s.Callbacks == nil || s.Jobs == nil || s.Sweeper == nil || s.Enqueuer == nil || s.Events == nil || s.Pools == nil {
				t.Errorf("a part is missing: %+v", s)
			}
		})
	}

	t.Run("production identities", func(t *testing.T) {
		cfg := testConfig()
		cfg.Access, cfg.ClaimAudience = policy, "https://claim.example.com"
		cfg.Workers = enqueue.Workers{"gpu": {Pull: true, ServiceAccounts: []string{"alice@example.com"}}}
		s, err := New(context.Background(), cfg, options(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// The local stack's identity header, even for a listed account, is
		// not an identity here; nor is a token Google did not sign.
		r := httptest.NewRequest(http.MethodPost, "/v1/pools/gpu/claim", strings.NewReader(`{"workerId":"w"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(pull.DevIdentityHeader, "alice@example.com")
		rec := httptest.NewRecorder()
		s.Claim.ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("claim with the dev identity header: %d %s, want 401", rec.Code, rec.Body)
		}
		r = httptest.NewRequest(http.MethodGet, "/v1/tasks", nil)
		r.Header.Set("Authorization", "Bearer not.a.token")
		rec = httptest.NewRecorder()
		s.API.ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("API with an unverifiable token: %d %s, want 401", rec.Code, rec.Body)
		}
		// The dashboard under the policy: the sign-in answer without an
		// identity, with an unverifiable one, or with a forged IAP header.
		for _, h := range [][2]string{{}, {"Authorization", "Bearer not.a.token"}, {auth.IAPHeader, "not.a.token"}} {
			r = httptest.NewRequest(http.MethodGet, "/ui/", nil)
			if h[0] != "" {
				r.Header.Set(h[0], h[1])
			}
			rec = httptest.NewRecorder()
			s.API.ServeHTTP(rec, r)
			if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "signin-form") {
				t.Errorf("dashboard with %q: %d, want 401 and the sign-in form", h[0], rec.Code)
			}
		}
	})

	t.Run("sweeper settings", func(t *testing.T) {
		cfg := testConfig()
		cfg.SweepEvery, cfg.SweepWindow, cfg.MaxRedrives = 2*time.Second, 0, 9
		s, err := New(context.Background(), cfg, options(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if c := s.Sweeper.Config(); c.Every != 2*time.Second || c.Window != 0 || c.MaxRedrives != 9 {
			t.Errorf("sweeper: every %v, window %v, max redrives %d", c.Every, c.Window, c.MaxRedrives)
		}
	})

	t.Run("required", func(t *testing.T) {
		cfg := testConfig()
		cfg.CallbackBaseURL = nil
		if _, err := New(context.Background(), cfg, options(t)); err == nil || !strings.Contains(err.Error(), "CallbackBaseURL") {
			t.Errorf("no callback URL: %v", err)
		}
		o := options(t)
		o.Keys = nil
		if _, err := New(context.Background(), testConfig(), o); err == nil {
			t.Error("no key ring: no error")
		}
		cfg = testConfig()
		cfg.Workers = enqueue.Workers{"render": {Job: "projects/servo-test/locations/l/jobs/render", Queue: "projects/servo-test/locations/l/queues/render"}}
		if _, err := New(context.Background(), cfg, options(t)); err == nil || !strings.Contains(err.Error(), "JobDispatchURL") {
			t.Errorf("a job worker without a dispatch URL: %v", err)
		}
	})
}
