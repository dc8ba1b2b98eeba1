package pull_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// A task submitted to a pull pool is claimed by worker.Pull and runs to
// SUCCEEDED; its attempt belongs to the claiming worker, and the SDK counts
// the run in its metrics as a push worker does.
func TestPulledTaskSucceeds(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "succeed"
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Pull(ctx, worker.PullConfig{API: e.stack.URL, Pool: gpu, MaxWait: time.Second,
			Options: []worker.Option{worker.WithWorkerID("puller-1"), worker.WithMeterProvider(mp)}}, partitions.Process)
	}()
	sub := e.submit(gpu, nil)
	v := e.WaitState(sub.TaskID, api.Succeeded)
	if len(v.Attempts) != 1 || v.Attempts[0].WorkerID != "puller-1" || v.Attempts[0].Outcome != api.OutcomeSucceeded {
		t.Fatalf("attempts %+v", v.Attempts)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Pull: %v", err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var runs int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "servo.worker.runs" {
				for _, dp := range sum.DataPoints {
					if o, _ := dp.Attributes.Value("servo.outcome"); o.AsString() == string(api.OutcomeSucceeded) {
						runs += dp.Value
					}
				}
			}
		}
	}
	if runs != 1 {
		t.Fatalf("servo.worker.runs SUCCEEDED = %d, want 1", runs)
	}
}

// An empty pool answers claimed:false once maxWaitMs has passed.
func TestEmptyPoolAnswersAfterMaxWait(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "empty"
	for _, wait := range []int{0, 1000} {
		began := time.Now()
		status, r := e.claim(gpu, "", "w-1", wait)
		took := time.Since(began)
		if status != http.StatusOK || r.Claimed || r.Envelope != nil || r.Disposition != api.Continue {
			t.Fatalf("maxWaitMs %d: %d %+v", wait, status, r)
		}
		// It waited (never less than asked), and not the default 20 s.
		if took < time.Duration(wait)*time.Millisecond || took > 15*time.Second {
			t.Fatalf("maxWaitMs %d answered after %v", wait, took)
		}
	}
}

// Four workers claiming concurrently from a pool of 50 tasks claim each
// task exactly once, each claim starting the attempt for its worker.
func TestConcurrentClaimsExactlyOnce(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "concurrent"
	const n, workers = 50, 4
	ids := map[string]bool{}
	for i := range n {
		// Leases long enough that no claimed task expires meanwhile.
		ids[e.submit(gpu, map[string]any{"taskKey": "k" + strconv.Itoa(i), "heartbeatIntervalMs": 10000, "heartbeatTimeoutMs": 300000}).TaskID] = true
	}
	var mu sync.Mutex
	claims := map[string][]string{} // task → workers that claimed it
	total := func() int { mu.Lock(); defer mu.Unlock(); return len(claims) }
	deadline := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "w-" + strconv.Itoa(w)
			// Claim until every task is claimed, then once more: nothing
			// is claimed twice.
			for extra := 0; extra < 1 && time.Now().Before(deadline); {
				if total() >= n {
					extra++
				}
				status, r := e.claim(gpu, "", id, 1000)
				if status == http.StatusServiceUnavailable && r.Disposition == api.Retry {
					time.Sleep(pull.RetryAfter) // a hiccup of the loaded emulators: retry, as workers do
					continue
				}
				if status != http.StatusOK {
					t.Errorf("claim: %d %+v", status, r)
					return
				}
				if r.Claimed {
					mu.Lock()
					claims[r.Envelope.TaskID] = append(claims[r.Envelope.TaskID], id)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(claims) != n {
		t.Fatalf("%d tasks claimed, want %d", len(claims), n)
	}
	for id, by := range claims {
		if !ids[id] || len(by) != 1 {
			t.Fatalf("task %s claimed by %v", id, by)
		}
		v := e.Task(id)
		if v.State != api.Running || len(v.Attempts) != 1 || v.Attempts[0].WorkerID != by[0] {
			t.Fatalf("task %s: %s %+v, claimed by %s", id, v.State, v.Attempts, by[0])
		}
	}
}

// A transport message delivered twice (the same attempt published again)
// yields one claim, even to the same worker id; the duplicate is dropped.
func TestDuplicateMessageOneClaim(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "duplicate"
	sub := e.submit(gpu, nil)
	stored, err := e.stack.Store.Get(context.Background(), sub.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if err := pull.NewTransport(e.stack.PubSub, "").Publish(context.Background(), gpu, stored); err != nil {
		t.Fatal(err)
	}
	en := e.claimUntil(gpu, "", "w-1")
	if en.TaskID != sub.TaskID || en.Attempt != 1 || en.TaskToken == "" {
		t.Fatalf("envelope %+v", en)
	}
	for range 2 {
		if status, r := e.claim(gpu, "", "w-1", 1500); status != http.StatusOK || r.Claimed {
			t.Fatalf("second claim: %d %+v", status, r)
		}
	}
	// The claim was the attempt's started; a started from the same worker
	// is a 200 repeat, and history holds one start.
	if status, r := e.callback(en, "started", api.StartedRequest{Attempt: 1, WorkerID: "w-1"}); status != http.StatusOK || r.Disposition != api.Continue {
		t.Fatalf("started after the claim: %d %+v", status, r)
	}
	if status, r := e.callback(en, "started", api.StartedRequest{Attempt: 1, WorkerID: "w-2"}); status != http.StatusConflict || r.Error != api.CodeAttemptAlreadyStarted {
		t.Fatalf("started by another worker: %d %+v", status, r)
	}
	status, _, out := e.do("GET", "/v1/tasks/"+sub.TaskID+"/events", nil)
	var hist struct {
		Events []task.Transition `json:"events"`
	}
	if status != http.StatusOK || json.Unmarshal(out, &hist) != nil {
		t.Fatalf("events: %d %s", status, out)
	}
	running := 0
	for _, tr := range hist.Events {
		if tr.To == api.Running {
			running++
		}
	}
	if running != 1 {
		t.Fatalf("%d transitions to RUNNING: %+v", running, hist.Events)
	}
}

// A task cancelled while queued is never claimed.
func TestCancelledWhileQueuedNeverClaimed(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "cancel"
	sub := e.submit(gpu, nil)
	if status, _, out := e.do("POST", "/v1/tasks/"+sub.TaskID+"/cancel", map[string]any{"reason": "user_requested"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, out)
	}
	for range 2 {
		if status, r := e.claim(gpu, "", "w-1", 1500); status != http.StatusOK || r.Claimed {
			t.Fatalf("claim: %d %+v", status, r)
		}
	}
	v := e.Task(sub.TaskID)
	if v.State != api.Cancelled || len(v.Attempts) != 1 || v.Attempts[0].WorkerID != "" || v.Attempts[0].StartedAt != nil {
		t.Fatalf("task %s %+v", v.State, v.Attempts)
	}
}

// A delayed start in a pull pool: a claim before the start gets nothing
// (the message is hidden until then), a claim after it gets the task.
func TestDelayedStartNotClaimedEarly(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	const gpu = "delayed"
	start := time.Now().Add(3 * time.Second)
	sub := e.submit(gpu, map[string]any{"startAt": start.UTC().Format(time.RFC3339Nano)})
	if sub.State != api.Queued {
		t.Fatalf("submit: %+v", sub)
	}
	if status, r := e.claim(gpu, "", "w-early", 1000); status != http.StatusOK || r.Claimed {
		t.Fatalf("claim before the start: %d %+v", status, r)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, r := e.claim(gpu, "", "w-1", 2000)
		if status == http.StatusOK && r.Claimed {
			if r.Envelope.TaskID != sub.TaskID {
				t.Fatalf("claimed %s, want %s", r.Envelope.TaskID, sub.TaskID)
			}
			if now := time.Now(); now.Before(start) {
				t.Fatalf("claimed at %v, before the start %v", now, start)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not claimed after the start: %d %+v", status, r)
		}
	}
}
