package functions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/dispatcher"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/task"
)

func init() {
	functions.HTTP("ServoAPI", ServoAPI)
}

// apiInit builds the control API handler; see dependencies for retries.
var apiInit = newLazy(func(ctx context.Context) (http.Handler, error) {
	h, err := newServoAPI(ctx)
	if err != nil {
		logs.Default().ErrorContext(ctx, "ServoAPI: configuration failed; a later request retries", "error", err)
	}
	return h, err
})

// ServoAPI is the control API (package dispatcher) as an HTTP Cloud
// Function; IAM protects it in production. Its dependencies are built from
// the environment on the first request; when that fails the request is
// answered 503 unavailable with the reason and a Retry-After, the failure
// is logged, and a request after the backoff (1 s doubling to 30 s) builds
// again.
func ServoAPI(w http.ResponseWriter, r *http.Request) {
	h, err := apiInit.get(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(err)/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.Error{Code: api.CodeUnavailable,
			Message: "the Servo control API is not configured: " + err.Error()})
		return
	}
	h.ServeHTTP(w, r)
}

func newServoAPI(ctx context.Context) (http.Handler, error) {
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	startTimeout, err := EnvDuration("SERVO_START_TIMEOUT", api.DefaultStartTimeout)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	maxBody, err := EnvInt("SERVO_MAX_BODY_BYTES", dispatcher.DefaultMaxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	policy, err := auth.LoadPolicy(os.Getenv, "SERVO_ACCESS", "SERVO_ACCESS_FILE")
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	if policy.IsOpen() {
		d.Logger.WarnContext(ctx, "ServoAPI: no access policy (SERVO_ACCESS): every caller IAM lets through may act on every tenant")
	}
	api := dispatcher.NewHandler(dispatcher.Config{
		Store: d.Store, Enqueuer: d.Enqueuer, Logger: d.Logger, Project: d.Project,
		MinTimer: task.MinTimerProduction, DefaultStartTimeout: startTimeout, MaxBodyBytes: int64(maxBody),
		// Production verifies Google ID tokens only: a dev identity token
		// is never accepted here.
		Access: policy, Verifiers: []auth.IdentityVerifier{auth.GoogleVerifier{Audience: os.Getenv("SERVO_API_AUDIENCE")}},
	})
	if !policy.IsOpen() {
		// The dashboard reads every tenant's tasks: under an access policy
		// it is off rather than a way around the policy.
		return api, nil
	}
	// The web dashboard, at /ui/, behind the same IAM as the API.
	// The task page links each task's trace in Cloud Trace when that is
	// where this instance's spans go.
	return dashboard.Mount(api, dashboard.Config{Store: d.Store, Logger: d.Logger, CloudTraceProject: traceProject()}), nil
}
