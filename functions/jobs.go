package functions

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/logs"
)

func init() { functions.HTTP("ServoJobs", ServoJobs) }

// jobsInit builds the dispatch handler; see dependencies for retries.
var jobsInit = newLazy(func(ctx context.Context) (http.Handler, error) {
	h, err := newServoJobs(ctx)
	if err != nil {
		logs.Default().ErrorContext(ctx, "ServoJobs: configuration failed; a later request retries", "error", err)
	}
	return h, err
})

// ServoJobs is the jobs dispatch function (HTTP; IAM-protected: only the
// Cloud Tasks invoker account may call it): the Cloud Tasks of job workers
// deliver their envelope here, and jobs.Handler runs the attempt's Cloud
// Run Job execution. It is a function of its own so that only its service
// account holds the right to run jobs (with overrides) and list and cancel
// their executions. When its dependencies cannot be built it answers 503
// with a Retry-After, and Cloud Tasks retries the delivery.
func ServoJobs(w http.ResponseWriter, r *http.Request) {
	h, err := jobsInit.get(r.Context())
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter(err)/time.Second)))
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(jobs.Answer{Error: api.CodeUnavailable, Message: "the jobs dispatch is not configured or cannot reach its dependencies"})
		return
	}
	h.ServeHTTP(w, r)
}

func newServoJobs(ctx context.Context) (http.Handler, error) {
	d, err := dependencies(ctx)
	if err != nil {
		return nil, err
	}
	var runner jobs.Runner = d.Jobs
	if d.Jobs == nil {
		// No job worker: every dispatch is refused (400) before a runner
		// is asked; one that knows no job stands in.
		runner = jobs.NewLocal(nil, nil, d.Logger)
	}
	return jobs.NewHandler(jobs.Config{Store: d.Store, Keys: d.Keys, Workers: d.Enqueuer.Workers(), Runner: runner, Logger: d.Logger, Project: d.Project})
}
