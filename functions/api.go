package functions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/dispatcher"
	"github.com/servo-dev/servo/logs"
	"github.com/servo-dev/servo/task"
)

func init() {
	functions.HTTP("ServoAPI", ServoAPI)
}

var (
	apiOnce    sync.Once
	apiHandler http.Handler
	apiErr     error
)

// ServoAPI is the control API (package dispatcher) as an HTTP Cloud
// Function; IAM protects it in production. Its dependencies are built from
// the environment on the first request; when that fails every request is
// answered 503 with the reason, and the failure is logged.
func ServoAPI(w http.ResponseWriter, r *http.Request) {
	h, err := servoAPIHandler(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Retry-After", fmt.Sprint(dispatcher.RetryAfter))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(dispatcher.ErrorResponse{Error: task.CodeUnavailable,
			Message: "the Servo control API is not configured: " + err.Error()})
		return
	}
	h.ServeHTTP(w, r)
}

// servoAPIHandler builds the control API handler once per instance.
func servoAPIHandler(ctx context.Context) (http.Handler, error) {
	apiOnce.Do(func() {
		// The clients built here outlive the request that triggered them.
		apiHandler, apiErr = newServoAPI(context.WithoutCancel(ctx))
		if apiErr != nil {
			logs.Default().ErrorContext(ctx, "ServoAPI: configuration failed", "error", apiErr)
		}
	})
	return apiHandler, apiErr
}

func newServoAPI(ctx context.Context) (http.Handler, error) {
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	startTimeout, err := EnvDuration("SERVO_START_TIMEOUT", task.DefaultStartTimeout)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	maxBody, err := EnvInt("SERVO_MAX_BODY_BYTES", dispatcher.DefaultMaxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	return dispatcher.NewHandler(dispatcher.Config{
		Store: d.Store, Enqueuer: d.Enqueuer, Logger: d.Logger, Project: d.Project,
		MinTimer: task.MinTimerProduction, DefaultStartTimeout: startTimeout, MaxBodyBytes: int64(maxBody),
	}), nil
}
