package jobs

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Label keys of an attempt's execution (see Labels).
const (
	LabelTaskID  = "servo-task-id"
	LabelAttempt = "servo-attempt"
)

// ErrUnknownJob: the runner does not know the job (local runner: no
// --job-worker command for it).
var ErrUnknownJob = errors.New("unknown job")

// Execution is one run of a job.
type Execution struct {
	// Name identifies the execution: for Cloud Run,
	// projects/P/locations/L/jobs/J/executions/E.
	Name string
	// Done says the execution has finished (succeeded, failed or
	// cancelled): it will not call Servo any more.
	Done bool
}

// Runner runs, finds and cancels job executions: the Cloud Run Admin API
// in production ([CloudRun]), subprocesses locally ([Local]).
type Runner interface {
	// Run starts one execution of job with the envelope in its environment
	// (api.EnvelopeEnv) and the labels (task.ExecutionLabelsEnv), both as
	// overrides of that execution only.
	Run(ctx context.Context, job string, envelope []byte, labels map[string]string) (Execution, error)
	// Find returns the execution of job that carries labels and still
	// runs (the newest, if several), else the newest that ended; ok is
	// false when there is none.
	Find(ctx context.Context, job string, labels map[string]string) (e Execution, ok bool, err error)
	// Cancel stops an execution; one that has finished or is gone is not an
	// error.
	Cancel(ctx context.Context, execution string) error
}

// Labels are the labels of the execution that runs attempt n of a task.
func Labels(taskID string, attempt int) map[string]string {
	return map[string]string{LabelTaskID: taskID, LabelAttempt: strconv.Itoa(attempt)}
}

// EncodeLabels is the canonical form of labels in task.ExecutionLabelsEnv:
// "k=v,k=v", sorted by key.
func EncodeLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}
