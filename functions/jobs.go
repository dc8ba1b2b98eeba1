package functions

import (
	"context"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/server"
)

func init() { functions.HTTP("ServoJobs", ServoJobs) }

var jobsEntry = newEntry("ServoJobs", func(ctx context.Context, s *server.Server) (http.Handler, error) {
	return s.Jobs, nil
}, "application/json", false, func(err error) any {
	return jobs.Answer{Error: server.FailureCode(err), Message: "the jobs dispatch is not configured or cannot reach its dependencies"}
})

// ServoJobs is the jobs dispatch function (HTTP; IAM-protected: only the
// Cloud Tasks invoker account may call it): the Cloud Tasks of job workers
// deliver their envelope here, and the Server's jobs handler runs the
// attempt's Cloud Run Job execution. It is a function of its own so that
// only its service account holds the right to run jobs (with overrides)
// and list and cancel their executions. When the handler cannot be built
// it answers 503 with a Retry-After, and Cloud Tasks retries the delivery.
func ServoJobs(w http.ResponseWriter, r *http.Request) { jobsEntry.ServeHTTP(w, r) }
