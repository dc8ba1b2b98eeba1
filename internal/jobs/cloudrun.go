package jobs

import (
	"context"
	"errors"
	"fmt"

	run "cloud.google.com/go/run/apiv2"
	"cloud.google.com/go/run/apiv2/runpb"
	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CloudRun is the Runner on the Cloud Run Admin API (run/apiv2). Run
// calls RunJob with a container override that sets api.EnvelopeEnv and
// task.ExecutionLabelsEnv for that execution only (RunJob cannot set an
// execution's Cloud Run labels, so Servo's labels travel as an environment
// override, which the execution's template records); Find lists the job's
// executions and matches that variable; Cancel calls CancelExecution. None
// of them waits for the long-running operation.
type CloudRun struct {
	jobs  *run.JobsClient
	execs *run.ExecutionsClient
	// container is the container the override applies to; empty: the
	// job's only container.
	container string
}

// NewCloudRun dials the Cloud Run Admin API. container names the job's
// container the overrides apply to (empty for a job with one container).
func NewCloudRun(ctx context.Context, container string, opts ...option.ClientOption) (*CloudRun, error) {
	jc, err := run.NewJobsClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("jobs: cloud run jobs client: %w", err)
	}
	ec, err := run.NewExecutionsClient(ctx, opts...)
	if err != nil {
		jc.Close()
		return nil, fmt.Errorf("jobs: cloud run executions client: %w", err)
	}
	return &CloudRun{jobs: jc, execs: ec, container: container}, nil
}

// Close closes the clients.
func (c *CloudRun) Close() error { return errors.Join(c.jobs.Close(), c.execs.Close()) }

// Run implements Runner.
func (c *CloudRun) Run(ctx context.Context, job string, envelope []byte, labels map[string]string) (Execution, error) {
	op, err := c.jobs.RunJob(ctx, &runpb.RunJobRequest{
		Name: job,
		Overrides: &runpb.RunJobRequest_Overrides{ContainerOverrides: []*runpb.RunJobRequest_Overrides_ContainerOverride{{
			Name: c.container,
			Env: []*runpb.EnvVar{
				{Name: api.EnvelopeEnv, Values: &runpb.EnvVar_Value{Value: string(envelope)}},
				{Name: task.ExecutionLabelsEnv, Values: &runpb.EnvVar_Value{Value: EncodeLabels(labels)}},
			},
		}}},
	})
	if err != nil {
		return Execution{}, fmt.Errorf("jobs: run %s: %w", job, err)
	}
	md, err := op.Metadata()
	if err == nil && md.GetName() != "" {
		return Execution{Name: md.GetName()}, nil
	}
	// The operation's metadata names the execution; without it, look it up.
	e, ok, ferr := c.Find(ctx, job, labels)
	if ferr != nil || !ok {
		return Execution{}, fmt.Errorf("jobs: run %s: the operation %s names no execution (%v) and none was found: %w", job, op.Name(), err, errors.Join(ferr, errors.New("not found")))
	}
	return e, nil
}

// Find implements Runner.
func (c *CloudRun) Find(ctx context.Context, job string, labels map[string]string) (Execution, bool, error) {
	want := EncodeLabels(labels)
	it := c.execs.ListExecutions(ctx, &runpb.ListExecutionsRequest{Parent: job})
	var (
		best  *runpb.Execution
		found bool
	)
	for {
		e, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return Execution{}, false, fmt.Errorf("jobs: list executions of %s: %w", job, err)
		}
		if !hasLabels(e, want) {
			continue
		}
		if !found || better(e, best) {
			best, found = e, true
		}
	}
	if !found {
		return Execution{}, false, nil
	}
	return Execution{Name: best.GetName(), Done: best.GetCompletionTime() != nil}, true, nil
}

// better reports whether Find prefers e to best: one that still runs to
// one that ended (a superseded execution, cancelled, may have been created
// after the attempt's own), else the newer.
func better(e, best *runpb.Execution) bool {
	if running, bestRunning := e.GetCompletionTime() == nil, best.GetCompletionTime() == nil; running != bestRunning {
		return running
	}
	return e.GetCreateTime().AsTime().After(best.GetCreateTime().AsTime())
}

func hasLabels(e *runpb.Execution, want string) bool {
	for _, ct := range e.GetTemplate().GetContainers() {
		for _, v := range ct.GetEnv() {
			if v.GetName() == task.ExecutionLabelsEnv && v.GetValue() == want {
				return true
			}
		}
	}
	return false
}

// Cancel implements Runner.
func (c *CloudRun) Cancel(ctx context.Context, execution string) error {
	_, err := c.execs.CancelExecution(ctx, &runpb.CancelExecutionRequest{Name: execution})
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.FailedPrecondition:
		// FailedPrecondition: the execution has already finished.
		return nil
	}
	return fmt.Errorf("jobs: cancel %s: %w", execution, err)
}
