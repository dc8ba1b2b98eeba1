// Package benchworker is the workload of the servo dev benchmarks
// (BenchmarkDevWorkload in cmd/servo, BenchmarkDevRPCs in devstack, and,
// in its own module, bench/temporal's Temporal counterpart): no-op tasks
// that each report progress Beats times, 100 ms apart, and end once the
// last is acknowledged, run by a worker a few at a time, submitted by a few
// goroutines at once.
package benchworker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// Name is the worker name the benchmarks register the worker under.
const Name = "bench"

// Beats is how many heartbeats a task sends: SERVO_BENCH_HEARTBEATS, or
// 1. Each carries new progress, so that the SDK sends it at its next tick
// (the heartbeat interval, 100 ms) whatever Servo's pacing hint says:
// Beats times, the task reports progress, works 100 ms, and waits until
// Servo has acknowledged that heartbeat, as bench/temporal's activity
// records a heartbeat and works 100 ms.
var Beats = beatsFromEnv()

func beatsFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv("SERVO_BENCH_HEARTBEATS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Worker is an external worker on a local HTTP server, counting the
// callbacks Servo acknowledged.
type Worker struct {
	// URL is where Servo pushes the worker's tasks.
	URL string
	// Heartbeats and Completed count acknowledged callbacks.
	Heartbeats, Completed atomic.Int64

	perTask sync.Map // task id → *atomic.Int64
}

// Start starts a worker that runs at most concurrency tasks at once; the
// server closes when tb ends.
func Start(tb testing.TB, concurrency int) *Worker {
	w := &Worker{}
	sem := make(chan struct{}, concurrency)
	h := worker.Handler(func(ctx context.Context, t *worker.Task) (any, error) {
		n := w.taskHeartbeats(t.ID())
		deadline := time.Now().Add(time.Minute)
		for i := 1; i <= Beats; i++ {
			t.Progress(i*100/Beats, "")
			time.Sleep(100 * time.Millisecond)
			for n.Load() < int64(i) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		return nil, nil
	}, worker.WithHTTPClient(&http.Client{Transport: w}), worker.WithLogger(slog.New(slog.DiscardHandler)))
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sem <- struct{}{}
		defer func() { <-sem }()
		h.ServeHTTP(rw, r)
	}))
	tb.Cleanup(srv.Close)
	w.URL = srv.URL
	return w
}

// taskHeartbeats returns the counter of a task's acknowledged heartbeats.
func (w *Worker) taskHeartbeats(id string) *atomic.Int64 {
	n, _ := w.perTask.LoadOrStore(id, new(atomic.Int64))
	return n.(*atomic.Int64)
}

// transport keeps as many idle connections to Servo as the worker SDK's
// default (http.DefaultTransport keeps 2 a host).
var transport = func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()

// RoundTrip is the worker's transport to Servo: it counts the callbacks
// answered with success.
func (w *Worker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := transport.RoundTrip(r)
	if err == nil && resp.StatusCode < 300 {
		switch {
		case strings.HasSuffix(r.URL.Path, "/heartbeat"):
			w.Heartbeats.Add(1)
			w.taskHeartbeats(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/tasks/"), "/heartbeat")).Add(1)
		case strings.HasSuffix(r.URL.Path, "/completed"):
			w.Completed.Add(1)
		}
	}
	return resp, err
}

// Run submits tasks tasks of a new run to worker Name, from submitters
// goroutines calling submit with each task's JSON body, then waits until
// the worker has completed them all (failing tb after timeout). It
// returns the run's id, and how long the submits and the whole run took.
func (w *Worker) Run(tb testing.TB, submit func(body []byte) error, tasks, submitters int, timeout time.Duration) (run string, submitted, elapsed time.Duration) {
	done0 := w.Completed.Load()
	run = task.NewRunID(time.Now())
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range submitters {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(tasks); n = next.Add(1) {
				body := fmt.Sprintf(`{"tenantId":"bench","workspaceId":"ws","runId":%q,"taskKey":"t%d","worker":%q,"payload":{},"heartbeatIntervalMs":100,"heartbeatTimeoutMs":2000}`, run, n, Name)
				if err := submit([]byte(body)); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	submitted = time.Since(began)
	for w.Completed.Load()-done0 < int64(tasks) {
		if time.Since(began) > timeout {
			tb.Fatalf("%d of %d tasks completed", w.Completed.Load()-done0, tasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return run, submitted, time.Since(began)
}
