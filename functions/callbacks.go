package functions

import (
	"context"
	"net/http"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/server"
)

func init() { functions.HTTP("ServoCallbacks", ServoCallbacks) }

var callbacksEntry = newEntry("ServoCallbacks", func(ctx context.Context, s *server.Server) (http.Handler, error) {
	return s.Callbacks, nil
}, "application/json", true, func(err error) any {
	return api.CallbackResponse{
		Disposition: api.Retry, ServerTime: time.Now().UTC(), Error: server.FailureCode(err),
		Message: "the callbacks service is not configured or cannot reach its dependencies; retry with the same body",
	}
})

// ServoCallbacks is the worker callbacks function (HTTP; public, every
// request is authenticated by its task token): POST
// /v1/tasks/{taskId}/started|heartbeat|completed, served by the Server's
// callbacks handler (built on the first request). When it cannot be built
// it answers 503 unavailable with disposition RETRY and a Retry-After
// (when the next build may run: 1 s doubling to 30 s), so workers retry
// rather than give up; the reason is logged, never sent to the
// (unauthenticated) caller.
func ServoCallbacks(w http.ResponseWriter, r *http.Request) { callbacksEntry.ServeHTTP(w, r) }
