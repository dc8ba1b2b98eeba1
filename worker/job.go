package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/servo-dev/servo/api"
)

// ErrNoEnvelope: RunJob found no envelope in its environment
// (api.EnvelopeEnv): the process was not started by Servo's jobs dispatch.
var ErrNoEnvelope = errors.New("worker: no Servo envelope in " + api.EnvelopeEnv)

// ErrJobNotRun: RunJob could not run the attempt for a reason a later
// execution may not have (Servo unreachable for `started`); the process
// should exit non-zero. The attempt is still QUEUED, and Servo's re-drive
// starts another execution.
var ErrJobNotRun = errors.New("worker: attempt not run")

// RunJob runs one attempt in a Cloud Run Job execution (a job worker,
// docs/contract.md §11): it reads the envelope from the environment
// (api.EnvelopeEnv, set by Servo's dispatch for this execution only) and
// runs fn under the same protocol as [Handler] (`started`, heartbeats with
// checkpoints and token refresh, cancel, the lease fence, exactly one
// `completed`).
//
// It returns nil once the attempt's fate was settled with Servo, whatever
// it was: committed, discarded, refused at `started` (a duplicate
// execution, a cancelled task), lost lease or rejected. The process should
// then exit 0, so that Cloud Run's own task retries never run an attempt
// Servo has already decided (Servo's retries are new attempts, new
// executions). It returns an error wrapping [ErrNoEnvelope] or
// [ErrJobNotRun] otherwise; exit non-zero.
//
// The default worker id is the execution's (CLOUD_RUN_EXECUTION, task
// index and Cloud Run task attempt); [WithWorkerID] overrides it.
func RunJob(ctx context.Context, fn Func, opts ...Option) error {
	raw := os.Getenv(api.EnvelopeEnv)
	if raw == "" {
		return ErrNoEnvelope
	}
	env, err := parseEnvelope([]byte(raw))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoEnvelope, err)
	}
	if id := jobWorkerID(); id != "" {
		opts = append([]Option{WithWorkerID(id)}, opts...)
	}
	h := Handler(fn, opts...).(*handler)
	status, ans := h.deliver(ctx, env)
	log := h.cfg.logger.With("taskId", env.TaskID, "attempt", env.Attempt, "tenantId", env.TenantID, "workerId", h.cfg.workerID)
	switch ans.Result {
	case resultUnreachable, resultInternal, resultClientGone:
		log.ErrorContext(ctx, "job attempt not settled with Servo", "result", ans.Result, "status", status, "detail", ans.Detail)
		return fmt.Errorf("%w: %s (%s)", ErrJobNotRun, ans.Result, ans.Detail)
	}
	log.InfoContext(ctx, "job attempt settled with Servo", "result", ans.Result, "outcome", ans.Outcome, "finalState", ans.FinalState)
	return nil
}

// jobWorkerID names this Cloud Run Job task run: execution, task index and
// Cloud Run's attempt of it; empty outside a job.
func jobWorkerID() string {
	exec := os.Getenv("CLOUD_RUN_EXECUTION")
	if exec == "" {
		return ""
	}
	parts := []string{exec, "task-" + cmp.Or(os.Getenv("CLOUD_RUN_TASK_INDEX"), "0"), "try-" + cmp.Or(os.Getenv("CLOUD_RUN_TASK_ATTEMPT"), "0")}
	return strings.Join(parts, "/")
}
