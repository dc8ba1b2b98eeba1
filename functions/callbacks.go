package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/callbacks"
	"github.com/servo-dev/servo/internal/logs"
)

func init() { functions.HTTP("ServoCallbacks", ServoCallbacks) }

// callbacksInit builds the callbacks handler; see dependencies for retries.
var callbacksInit = newLazy(func(ctx context.Context) (http.Handler, error) {
	h, err := newServoCallbacks(ctx)
	if err != nil {
		logs.Default().ErrorContext(ctx, "ServoCallbacks: configuration failed; a later request retries", "error", err)
	}
	return h, err
})

// ServoCallbacks is the worker callbacks function (HTTP; public, every
// request is authenticated by its task token): POST
// /v1/tasks/{taskId}/started|heartbeat|completed, served by
// callbacks.NewHandler with the instance's shared dependencies (built on
// the first request). When those cannot be built it answers 503
// unavailable with disposition RETRY and a Retry-After (when the next build
// may run: 1 s doubling to 30 s), so workers retry rather than give up; the
// reason is logged, never sent to the (unauthenticated) caller.
func ServoCallbacks(w http.ResponseWriter, r *http.Request) {
	h, err := callbacksInit.get(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(err)/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.CallbackResponse{
			Disposition: api.Retry, ServerTime: time.Now().UTC(), Error: api.CodeUnavailable,
			Message: "the callbacks service is not configured or cannot reach its dependencies; retry with the same body",
		})
		return
	}
	h.ServeHTTP(w, r)
}

func newServoCallbacks(ctx context.Context) (http.Handler, error) {
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	maxBody, err := EnvInt("SERVO_MAX_BODY_BYTES", callbacks.DefaultMaxBodyBytes)
	if err != nil {
		return nil, err
	}
	return callbacks.NewHandler(callbacks.Config{
		Store: d.Store, Keys: d.Keys, Enqueuer: d.Enqueuer, Logger: d.Logger,
		MaxBodyBytes: int64(maxBody), Project: d.Project,
	}), nil
}
