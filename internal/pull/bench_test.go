package pull_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClaim measures pull-pool claims on the local stack with 8
// claiming workers (raw claims over HTTP, nothing run): the latency from
// message published (the envelope's enqueuedAt, Pub/Sub's publish time)
// to claim answered, p50/p99, for tasks submitted one at a time while the
// workers long-poll; then claims/s, a backlog of 400 tasks drained by the
// 8 workers. Run it with
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 1x ./internal/pull/
func BenchmarkClaim(b *testing.B) {
	e := sharedEnv(b)
	const pool, workers, latencyTasks, backlog = "bench", 8, 100, 400
	slow := map[string]any{"heartbeatIntervalMs": 10000, "heartbeatTimeoutMs": 300000}
	for range b.N {
		// Latency: workers waiting, tasks arriving one by one.
		var mu sync.Mutex
		var lat []time.Duration
		var claimed atomic.Int64
		stop := make(chan struct{})
		claimers := func(want int64) *sync.WaitGroup {
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for claimed.Load() < want {
						select {
						case <-stop:
							return
						default:
						}
						status, r := e.claim(pool, "", fmt.Sprintf("bench-%d", w), 2000)
						at := time.Now()
						if status == http.StatusServiceUnavailable {
							time.Sleep(time.Second)
							continue
						}
						if status != http.StatusOK {
							b.Errorf("claim: %d %+v", status, r)
							return
						}
						if r.Claimed {
							claimed.Add(1)
							mu.Lock()
							lat = append(lat, at.Sub(r.Envelope.EnqueuedAt))
							mu.Unlock()
						}
					}
				}()
			}
			return &wg
		}
		wg := claimers(latencyTasks)
		for i := range latencyTasks {
			x := maps(slow, "taskKey", fmt.Sprint("lat-", i))
			e.submit(pool, x)
		}
		waitUntil(b, func() bool { return claimed.Load() >= latencyTasks })
		close(stop)
		wg.Wait()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")

		// Throughput: a backlog drained by the workers.
		var tasks []map[string]any
		for i := range backlog {
			tasks = append(tasks, maps(slow, "tenantId", "acme", "workspaceId", "ws", "worker", pool, "taskKey", fmt.Sprint("tp-", i)))
		}
		for i := 0; i < len(tasks); i += 100 {
			if status, _, out := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": tasks[i : i+100]}); status != http.StatusOK && status != http.StatusCreated {
				b.Fatalf("batch: %d %s", status, out)
			}
		}
		claimed.Store(0)
		stop = make(chan struct{})
		began := time.Now()
		wg = claimers(backlog)
		waitUntil(b, func() bool { return claimed.Load() >= backlog })
		took := time.Since(began)
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(backlog)/took.Seconds(), "claims/s")
	}
}

func maps(base map[string]any, kv ...string) map[string]any {
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func waitUntil(b *testing.B, ok func() bool) {
	deadline := time.Now().Add(10 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
