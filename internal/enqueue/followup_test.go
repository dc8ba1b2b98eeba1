package enqueue

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/servo-dev/servo/internal/task"
)

type cancels struct {
	names []string
	err   error
}

func (c *cancels) Cancel(_ context.Context, execution string) error {
	c.names = append(c.names, execution)
	return c.err
}

// TestFollowUpCancelsTheEndedExecution: a result that ended a job attempt
// by a timer has its execution cancelled by FollowUp, best effort (a
// failure is logged, not returned); other results cancel nothing.
func TestFollowUpCancelsTheEndedExecution(t *testing.T) {
	const exec = "projects/p/locations/l/jobs/j/executions/e1"
	cases := []struct {
		name   string
		result task.Result
		fail   error
		want   int
	}{
		{"cancel timeout", task.Result{CancelExecution: exec}, nil, 1},
		{"cancel fails: logged only", task.Result{CancelExecution: exec}, errors.New("boom"), 1},
		{"nothing to cancel", task.Result{}, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := &cancels{err: c.fail}
			e := &Enqueuer{cfg: Config{Executions: cs, Logger: slog.New(slog.DiscardHandler)}}
			if err := e.FollowUp(context.Background(), c.result); err != nil {
				t.Fatalf("FollowUp: %v", err)
			}
			if len(cs.names) != c.want || (c.want == 1 && cs.names[0] != exec) {
				t.Fatalf("cancelled %q, want %d × %s", cs.names, c.want, exec)
			}
		})
	}
}
