package functions

import (
	"context"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/server"
)

func init() {
	functions.HTTP("ServoAPI", ServoAPI)
}

// apiEntry serves the Server's control API, with the dashboard at /ui/
// under the same access policy.
var apiEntry = newEntry("ServoAPI", func(ctx context.Context, s *server.Server) (http.Handler, error) {
	if s.Config.Access.IsOpen() {
		logs.Default().WarnContext(ctx, "ServoAPI: no access policy ("+config.EnvAccess+"): every caller IAM lets through may act on every tenant")
	}
	return s.API, nil
}, "application/json; charset=utf-8", false, func(err error) any {
	return api.Error{Code: server.FailureCode(err), Message: "the Servo control API is not configured: " + err.Error()}
})

// ServoAPI is the control API (package dispatcher) as an HTTP Cloud
// Function; IAM protects it in production. Its dependencies are built from
// the environment on the first request; when that fails the request is
// answered 503 unavailable with the reason and a Retry-After, the failure
// is logged, and a request after the backoff (1 s doubling to 30 s) builds
// again.
func ServoAPI(w http.ResponseWriter, r *http.Request) { apiEntry.ServeHTTP(w, r) }

// dashboardConfig is the dashboard's: the task page links each task's
// trace in Cloud Trace when that is where this instance's spans go.
func dashboardConfig() dashboard.Config {
	return dashboard.Config{CloudTraceProject: traceProject()}
}
