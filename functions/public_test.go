package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/callbacks"
	"github.com/servo-dev/servo/dispatcher"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/zombie"
)

// TestPublicPackagesFromEnv: the design card's public packages build what
// the functions serve from the environment, against the emulator: the
// control API answers (404 for an unknown task), the callbacks handler
// authenticates (401 without a token), and a sweeper pass is recorded
// where GET /v1/health reads it. A missing variable is named by each.
func TestPublicPackagesFromEnv(t *testing.T) {
	ctx := t.Context()
	t.Run("missing variable", func(t *testing.T) {
		instanceEnv(t)
		t.Setenv("SERVO_CALLBACK_BASE_URL", "")
		for name, build := range map[string]func(context.Context) error{
			"dispatcher": func(ctx context.Context) error { _, err := dispatcher.New(ctx); return err },
			"callbacks":  func(ctx context.Context) error { _, err := callbacks.New(ctx); return err },
			"zombie":     func(ctx context.Context) error { _, err := zombie.New(ctx); return err },
		} {
			if err := build(ctx); err == nil || !strings.Contains(err.Error(), "SERVO_CALLBACK_BASE_URL") || !strings.HasPrefix(err.Error(), name+": ") {
				t.Errorf("%s.New without a callbacks URL: %v", name, err)
			}
		}
	})

	pubsub := os.Getenv("PUBSUB_EMULATOR_HOST") // the emulator's (TestMain)
	instanceEnv(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", pubsub)
	_, ring, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(ring))

	h, err := dispatcher.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/tasks/"+task.NewTaskID(time.Now()), nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("dispatcher: GET an unknown task: %d %s", rec.Code, rec.Body)
	}

	cb, err := callbacks.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/tasks/"+task.NewTaskID(time.Now())+"/started", strings.NewReader(`{"attempt":1,"workerId":"w1"}`))
	req.Header.Set("Content-Type", "application/json")
	cb.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("callbacks: started without a token: %d %s", rec.Code, rec.Body)
	}

	sw, err := zombie.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := sw.Sweep(ctx); err != nil {
		t.Fatalf("zombie: Sweep: %v", err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/health", nil))
	var health api.HealthResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &health); err != nil || health.Sweeper == nil || health.Sweeper.Passes != 1 {
		t.Fatalf("health after one pass: %d %s (%v)", rec.Code, rec.Body, err)
	}
}
