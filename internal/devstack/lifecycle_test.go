package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

var lifecycleTasks = flag.Int("lifecycle.tasks", 10000, "how many tasks BenchmarkLifecycle runs through the stack")

// lifecycle is a load of whole task lifecycles through the real stack:
// batch submits to the control API, Cloud Tasks deliveries from Servo's
// emulator, simulated workers that report started, heartbeats and
// completed over HTTP to the real callbacks, and the sweeper, all on the
// real Firestore and Pub/Sub emulators.
type lifecycle struct {
	tasks, workers, heartbeats int
	// silentEvery makes every n-th task's first attempt go silent after
	// started (0: none), so the sweeper must find it and retry it.
	silentEvery int
	timeout     time.Duration
}

// lifecycleResult is what a lifecycle run saw.
type lifecycleResult struct {
	tasks, silent, callbacks int
	elapsed                  time.Duration
	latencies, sweepLags     []time.Duration
	statuses                 map[int]int
	usage                    store.Usage
	counts                   map[api.State]int
}

// The simulated workers send their heartbeats back to back; the timeout is
// long enough that a loaded machine's slow answers never cost a lease, and
// short enough that the silent attempts' zombies are found quickly.
const (
	lcIntervalMs = 1000
	lcTimeoutMs  = 8000
)

func runLifecycle(tb testing.TB, lc lifecycle) lifecycleResult {
	tb.Helper()
	deliveries := make(chan api.Envelope, 2*lc.tasks+16)
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env api.Envelope
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		deliveries <- env
		w.WriteHeader(http.StatusOK)
	}))
	defer sim.Close()
	rc := store.NewRPCCounter()
	stack := stacktest.Start(tb, devstack.Options{
		SweepEvery: 250 * time.Millisecond, Workers: map[string]string{"sim": sim.URL},
		StoreOptions: []store.Option{store.WithRPCCounter(rc)},
	})
	defer stack.Close() // before sim closes, and each of a benchmark's runs
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * lc.workers}, Timeout: time.Minute}
	post := func(url, bearer string, body any) (int, []byte, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		return res.StatusCode, out, err
	}

	var (
		mu      sync.Mutex
		res     = lifecycleResult{tasks: lc.tasks, statuses: map[int]int{}}
		leases  = map[string]time.Time{} // silent attempt's task → its lease end
		done    atomic.Int64
		allDone = make(chan struct{})
	)
	callback := func(env api.Envelope, kind string, body any) (int, api.CallbackResponse) {
		t0 := time.Now()
		status, out, err := post(env.CallbackBaseURL+"/v1/tasks/"+env.TaskID+"/"+kind, env.TaskToken, body)
		lat := time.Since(t0)
		var r api.CallbackResponse
		_ = json.Unmarshal(out, &r)
		mu.Lock()
		res.callbacks++
		res.latencies = append(res.latencies, lat)
		if err != nil {
			status = -1
		}
		res.statuses[status]++
		mu.Unlock()
		return status, r
	}
	work := func(env api.Envelope) {
		wid := fmt.Sprintf("sim-%s-%d", env.TaskID, env.Attempt)
		st, sr := callback(env, "started", api.StartedRequest{Attempt: env.Attempt, WorkerID: wid})
		if st != http.StatusOK {
			return
		}
		var p struct{ I int }
		_ = json.Unmarshal(env.Payload, &p)
		if lc.silentEvery > 0 && env.Attempt == 1 && p.I%lc.silentEvery == 0 {
			mu.Lock()
			leases[env.TaskID] = sr.ServerTime.Add(lcTimeoutMs * time.Millisecond)
			mu.Unlock()
			return // the worker died after started
		}
		for i := range lc.heartbeats {
			pct := (i + 1) * 100 / (lc.heartbeats + 1)
			if st, _ := callback(env, "heartbeat", api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: wid, ProgressPct: &pct}); st != http.StatusOK {
				return
			}
		}
		st, cr := callback(env, "completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: wid, Outcome: api.OutcomeSucceeded,
			Output: json.RawMessage(`{"ok":true}`)})
		if st == http.StatusOK && cr.Disposition == api.Committed && done.Add(1) == int64(lc.tasks) {
			close(allDone)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range lc.workers {
		wg.Go(func() {
			for {
				select {
				case env := <-deliveries:
					work(env)
				case <-stop:
					return
				}
			}
		})
	}

	run := task.NewRunID(time.Now())
	start := time.Now()
	for from := 0; from < lc.tasks; from += api.MaxBatchTasks {
		var items []map[string]any
		for i := from; i < min(from+api.MaxBatchTasks, lc.tasks); i++ {
			items = append(items, map[string]any{
				"tenantId": "bench", "workspaceId": "ws", "taskKey": fmt.Sprintf("t-%d", i), "worker": "sim",
				"payload": map[string]any{"i": i}, "heartbeatIntervalMs": lcIntervalMs, "heartbeatTimeoutMs": lcTimeoutMs,
				"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
			})
		}
		status, out, err := post(stack.URL+"/v1/tasks:batch", "", map[string]any{"runId": run, "tasks": items})
		if err != nil || status != http.StatusCreated {
			tb.Fatalf("batch submit: %d %v %s", status, err, out)
		}
	}
	select {
	case <-allDone:
	case <-time.After(lc.timeout):
		tb.Errorf("%d of %d tasks completed within %v", done.Load(), lc.tasks, lc.timeout)
	}
	res.elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	res.usage = rc.Usage()

	ctx := context.Background()
	for id, lease := range leases {
		entries, err := stack.Store.OutboxEntries(ctx, id)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range entries {
			if e.From == api.Running && e.Outcome == api.OutcomeZombie {
				res.sweepLags = append(res.sweepLags, e.OccurredAt.Sub(lease))
			}
		}
	}
	res.silent = len(leases)
	status, out, err := func() (int, []byte, error) {
		r, err := client.Get(stack.URL + "/v1/tasks:counts?runId=" + run)
		if err != nil {
			return 0, nil, err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		return r.StatusCode, b, err
	}()
	if err != nil || status != http.StatusOK {
		tb.Fatalf("counts: %d %v %s", status, err, out)
	}
	var counts struct {
		Counts map[api.State]int `json:"counts"`
	}
	if err := json.Unmarshal(out, &counts); err != nil {
		tb.Fatalf("counts: %v %s", err, out)
	}
	res.counts = counts.Counts
	return res
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TestLifecycle is the short mode of BenchmarkLifecycle: 120 tasks, some of
// whose first attempts die after started, all end SUCCEEDED with every
// callback accepted, and each zombie is retried exactly once.
func TestLifecycle(t *testing.T) {
	lc := lifecycle{tasks: 120, workers: 16, heartbeats: 3, silentEvery: 40, timeout: 3 * time.Minute}
	r := runLifecycle(t, lc)
	if r.counts[api.Succeeded] != lc.tasks {
		t.Errorf("task states %v, want %d SUCCEEDED", r.counts, lc.tasks)
	}
	if r.silent != lc.tasks/lc.silentEvery || len(r.sweepLags) != r.silent {
		t.Errorf("%d silent attempts, %d found by the sweeper, want %d each", r.silent, len(r.sweepLags), lc.tasks/lc.silentEvery)
	}
	// Every task: started, heartbeats, completed; a silent one's first
	// attempt only started.
	if want := lc.tasks*(lc.heartbeats+2) + r.silent; r.callbacks != want || r.statuses[http.StatusOK] != want {
		t.Errorf("%d callbacks (statuses %v), want %d, all 200", r.callbacks, r.statuses, want)
	}
	for _, lag := range r.sweepLags {
		if lag < 0 {
			t.Errorf("a zombie was retried %v before its lease ran out", -lag)
		}
	}
	t.Logf("%d tasks in %v: %.0f callbacks/s, callback p50 %.1f ms p99 %.1f ms, sweeper lag p50 %.0f ms max %.0f ms; Firestore per task: %.1f RPCs, %.1f docs read, %.1f docs written, %.0f B sent, %.0f B received",
		lc.tasks, r.elapsed.Round(time.Millisecond), float64(r.callbacks)/r.elapsed.Seconds(), ms(percentile(r.latencies, .5)), ms(percentile(r.latencies, .99)),
		ms(percentile(r.sweepLags, .5)), ms(percentile(r.sweepLags, 1)),
		float64(r.usage.RPCs)/float64(lc.tasks), float64(r.usage.DocsRead)/float64(lc.tasks), float64(r.usage.DocsWritten)/float64(lc.tasks),
		float64(r.usage.BytesSent)/float64(lc.tasks), float64(r.usage.BytesReceived)/float64(lc.tasks))
}

// BenchmarkLifecycle runs -lifecycle.tasks tasks (10 000 by default)
// through the real stack with 64 simulated workers:
//
//	go test -run '^$' -bench BenchmarkLifecycle -benchtime 1x -timeout 60m ./internal/devstack/
func BenchmarkLifecycle(b *testing.B) {
	lc := lifecycle{tasks: *lifecycleTasks, workers: 64, heartbeats: 3, silentEvery: 100, timeout: 45 * time.Minute}
	for range b.N {
		r := runLifecycle(b, lc)
		if r.counts[api.Succeeded] != lc.tasks {
			b.Fatalf("task states %v, want %d SUCCEEDED", r.counts, lc.tasks)
		}
		b.ReportMetric(float64(lc.tasks)/r.elapsed.Seconds(), "tasks/s")
		b.ReportMetric(float64(r.callbacks)/r.elapsed.Seconds(), "callbacks/s")
		b.ReportMetric(ms(percentile(r.latencies, .5)), "p50-ms")
		b.ReportMetric(ms(percentile(r.latencies, .99)), "p99-ms")
		b.ReportMetric(ms(percentile(r.sweepLags, .5)), "sweep-lag-p50-ms")
		b.ReportMetric(ms(percentile(r.sweepLags, .99)), "sweep-lag-p99-ms")
		b.ReportMetric(float64(r.usage.RPCs)/float64(lc.tasks), "firestore-rpcs/task")
		b.ReportMetric(float64(r.usage.DocsWritten)/float64(lc.tasks), "docs-written/task")
		b.ReportMetric(float64(r.usage.BytesSent+r.usage.BytesReceived)/float64(lc.tasks), "firestore-B/task")
		b.ReportMetric(0, "ns/op")
	}
}
