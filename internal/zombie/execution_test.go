package zombie_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

// steps records the sweeper's side effects in order.
type steps struct {
	mu   sync.Mutex
	list []string
}

func (s *steps) add(v string) {
	s.mu.Lock()
	s.list = append(s.list, v)
	s.mu.Unlock()
}

type orderedEnqueuer struct{ s *steps }

func (o orderedEnqueuer) FollowUp(_ context.Context, r task.Result) error {
	o.s.add(fmt.Sprintf("follow-up cancel=%q enqueue=%v", r.CancelExecution, r.Enqueue))
	return nil
}

// TestTimersCancelJobExecutions: when the lease or the cancel grace of a
// job attempt runs out, the sweeper hands the result to FollowUp, which
// cancels the attempt's execution (and enqueues the retry, if any); a push
// attempt (no execution) has nothing to cancel.
func TestTimersCancelJobExecutions(t *testing.T) {
	const exec = "projects/p/locations/l/jobs/j/executions/e1"
	later := t0.Add(time.Hour)
	cases := []struct {
		name      string
		kinds     []task.EventKind
		execution string
		want      []string
	}{
		{"lease expired, retried", []task.EventKind{task.EventEnqueued, task.EventStarted}, exec, []string{`follow-up cancel="` + exec + `" enqueue=true`}},
		{"cancel grace over", []task.EventKind{task.EventEnqueued, task.EventStarted, task.EventCancel}, exec, []string{`follow-up cancel="` + exec + `" enqueue=false`}},
		{"push attempt", []task.EventKind{task.EventEnqueued, task.EventStarted}, "", []string{`follow-up cancel="" enqueue=true`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms, s := newMemStore(), &steps{}
			tk := build(t, 0, t0, 3, c.kinds...)
			ms.put(tk)
			a := ms.attempts[tk.ID][tk.Attempt]
			a.Execution = c.execution
			ms.attempts[tk.ID][tk.Attempt] = a
			sw, err := zombie.New(zombie.Config{Store: ms, Enqueuer: orderedEnqueuer{s}, Now: func() time.Time { return later },
				Jitter: func() float64 { return 0.5 }, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sw.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(s.list) != len(c.want) {
				t.Fatalf("side effects %q, want %q", s.list, c.want)
			}
			for i := range c.want {
				if s.list[i] != c.want[i] {
					t.Fatalf("side effects %q, want %q", s.list, c.want)
				}
			}
		})
	}
}
