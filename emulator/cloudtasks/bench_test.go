package cloudtasks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
)

// latencyWorker records, for every task it receives, the time since the
// creation timestamp the task carries in its body.
type latencyWorker struct {
	*httptest.Server
	mu        sync.Mutex
	latencies []time.Duration
	count     atomic.Int64
	want      int64
	done      chan struct{}
}

func newLatencyWorker(want int) *latencyWorker {
	w := &latencyWorker{want: int64(want), done: make(chan struct{})}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		if ns, err := strconv.ParseInt(string(body), 10, 64); err == nil {
			w.mu.Lock()
			w.latencies = append(w.latencies, now.Sub(time.Unix(0, ns)))
			w.mu.Unlock()
		}
		rw.WriteHeader(http.StatusOK)
		if w.count.Add(1) == w.want {
			close(w.done)
		}
	}))
	return w
}

func (w *latencyWorker) report(b *testing.B) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.latencies) == 0 {
		return
	}
	slices.Sort(w.latencies)
	pct := func(p float64) float64 {
		i := int(p * float64(len(w.latencies)-1))
		return float64(w.latencies[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

func benchServer(b *testing.B) (*Server, *cloudtasksapi.Client) {
	b.Helper()
	srv := NewServer(Options{})
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c, err := cloudtasksapi.NewClient(context.Background(), ClientOptions(addr)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		srv.Stop()
	})
	return srv, c
}

func benchTask(url string) *pb.Task {
	return &pb.Task{MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{
		Url: url, Body: []byte(strconv.FormatInt(time.Now().UnixNano(), 10)),
	}}}
}

// BenchmarkDispatchThroughput creates b.N tasks from 8 concurrent callers
// over 16 queues (each capped at the documented maximum of 500 dispatches/s)
// and measures until the worker has received them all. It reports tasks/s
// and the CreateTask-to-delivery latency under that load.
func BenchmarkDispatchThroughput(b *testing.B) {
	_, c := benchServer(b)
	ctx := context.Background()
	const queues, callers = 16, 8
	names := make([]string, queues)
	for i := range names {
		q, err := c.CreateQueue(ctx, &pb.CreateQueueRequest{Parent: testParent, Queue: &pb.Queue{
			Name:       fmt.Sprintf("%s/queues/bench-%d", testParent, i),
			RateLimits: &pb.RateLimits{MaxDispatchesPerSecond: 500, MaxConcurrentDispatches: 1000},
		}})
		if err != nil {
			b.Fatal(err)
		}
		names[i] = q.Name
	}
	w := newLatencyWorker(b.N)
	defer w.Close()

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := c.CreateTask(ctx, &pb.CreateTaskRequest{Parent: names[i%queues], Task: benchTask(w.URL)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		b.Fatalf("only %d of %d tasks delivered", w.count.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	w.report(b)
}

// BenchmarkCreateToDeliveryLatency creates one task at a time on an idle
// queue and waits for its delivery: the emulator's unloaded latency.
func BenchmarkCreateToDeliveryLatency(b *testing.B) {
	_, c := benchServer(b)
	ctx := context.Background()
	q, err := c.CreateQueue(ctx, &pb.CreateQueueRequest{Parent: testParent, Queue: &pb.Queue{Name: testParent + "/queues/latency"}})
	if err != nil {
		b.Fatal(err)
	}
	w := newLatencyWorker(b.N)
	defer w.Close()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.CreateTask(ctx, &pb.CreateTaskRequest{Parent: q.Name, Task: benchTask(w.URL)}); err != nil {
			b.Fatal(err)
		}
		for w.count.Load() <= int64(i) {
			time.Sleep(20 * time.Microsecond)
		}
	}
	b.StopTimer()
	w.report(b)
}
