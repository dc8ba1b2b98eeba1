package callbacks_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/task"
)

// BenchmarkCallbacksSizing measures what one callbacks instance sustains:
// the handler over real HTTP against the Firestore emulator, heartbeats
// from `concurrency` workers at once (each on its own running task, as
// in production), for concurrency 1, 2, 4, ... 64. Each sub-benchmark
// reports callbacks/s, p50/p99 latency and the process's peak Go memory
// (heap in use + stacks, sampled every 20 ms) at that load, and the CPU
// this process spent per callback (user + system: the handler, its
// Firestore client and the benchmark's own HTTP client, an upper bound
// on what an instance spends). The sizing in
// terraform/README.md is the highest rate whose p99 stays under 100 ms.
//
//	go test -run '^$' -bench CallbacksSizing -benchtime 400x ./callbacks/
func BenchmarkCallbacksSizing(b *testing.B) {
	e := newEnv(b, func(c *callbacks.Config) {
		c.Logger = logs.New(io.Discard, nil)
		c.Now = func() time.Time { return time.Now().UTC() }
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	client := newClient(64)
	longLease := func(tk *task.Task) { tk.Timing = api.Timing{HeartbeatIntervalMs: 30000, HeartbeatTimeoutMs: 3600000} }
	type running struct {
		tk  task.Task
		tok string
	}
	newRunning := func() running {
		tk := e.create(longLease)
		e.apply(tk.ID, task.Event{Kind: task.EventStarted, Attempt: 1, WorkerID: "w1", Now: time.Now().UTC()})
		return running{tk, e.tokenFor(scopeOf(tk, 1), time.Hour, time.Now())}
	}
	heartbeat := func(b *testing.B, r running, lat *latencies) {
		start := time.Now()
		rp, err := httpPost(client, srv.URL, callbacks.KindHeartbeat, r.tk.ID, r.tok, heartbeatReq(1, "w1"))
		lat.add(time.Since(start))
		if err != nil || rp.status != 200 {
			b.Errorf("heartbeat: %v %d %s", err, rp.status, rp.raw)
		}
	}
	var tasks []running
	for range 64 {
		tasks = append(tasks, newRunning())
	}
	// Warm the emulator's JVM (see BenchmarkCallbacks).
	for i := range 1000 {
		heartbeat(b, tasks[i%len(tasks)], &latencies{})
	}

	for _, conc := range []int{1, 2, 4, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			var lat latencies
			stopMem := servotest.PeakMemory(20 * time.Millisecond)
			var next atomic.Int64
			n := int64(b.N)
			cpu0 := servotest.CPUTime()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						heartbeat(b, tasks[w], &lat)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := servotest.CPUTime() - cpu0
			peak := stopMem()
			lat.report(b, "callbacks/s", elapsed)
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/callback")
		})
	}
}
