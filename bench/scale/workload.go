package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

// Workload shape (docs/scale.md): the hot tenant submits HotShare of the
// tasks, under a quota it never reaches; LimitedTenants tenants at
// MaxRunning 1 submit LimitedTasks each at once, so that all but one wait
// for a slot; the rest spread over OrdinaryTenants. Worker "big" takes half
// of the tasks, OrdinaryWorkers the rest. By task number: every 10th fails
// once and is retried, every 10th (+1) is cancelled while running, every
// 10th (+2) is a zombie (started, then silent: the sweeper retries it);
// every 10th (+5) has its first event publish refused (the outbox
// re-drive sends it); every 10th (+7) starts 300 ms after its submit
// (startDelayMs: a Cloud Task with a scheduleTime); half the tasks (both workers') carry an idempotency
// key, every 4th is submitted twice with it.
const (
	hotTenant       = "hot"
	bigWorker       = "big"
	limitedTenants  = 2
	limitedTasks    = 3
	ordinaryTenants = 4
	ordinaryWorkers = 2
	// heartbeatTimeout is short so that zombies are found within seconds;
	// the others beat back to back, well within it.
	heartbeatTimeout = 3 * time.Second
)

// mailbox is the worker endpoint: it hands each delivery to its task's
// channel.
type mailbox struct {
	srv *httptest.Server
	mu  sync.Mutex
	ch  map[string]chan api.Envelope
	// each, when set, takes every delivery instead (on its own goroutine).
	each func(api.Envelope)
}

func newMailbox() *mailbox {
	m := &mailbox{ch: map[string]chan api.Envelope{}}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env api.Envelope
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if m.each != nil {
			go m.each(env)
			w.WriteHeader(http.StatusOK)
			return
		}
		select {
		case m.of(env.TaskID) <- env:
		default: // a duplicate delivery nobody waits for
		}
		w.WriteHeader(http.StatusOK)
	}))
	return m
}

func (m *mailbox) of(id string) chan api.Envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ch[id]
	if c == nil {
		c = make(chan api.Envelope, 8)
		m.ch[id] = c
	}
	return c
}

func (m *mailbox) next(id string, attempt int) (api.Envelope, error) {
	timeout := time.After(90 * time.Second)
	for {
		select {
		case env := <-m.of(id):
			if env.Attempt == attempt {
				return env, nil
			}
		case <-timeout:
			return api.Envelope{}, fmt.Errorf("task %s: no delivery of attempt %d", id, attempt)
		}
	}
}

// plan is the recorded workload: who submits what.
type plan struct {
	tasks      int
	heartbeats int
	dueShards  int // the stack's due shards (production's by default)
	tenants    map[string]scale.Role
	workers    map[string]scale.Role
	quotas     *quota.Policy
}

func newPlan(tasks, heartbeats int, tg scale.Target) plan {
	p := plan{tasks: tasks, heartbeats: heartbeats, dueShards: store.DefaultDueShards,
		tenants: map[string]scale.Role{hotTenant: scale.Hot}, workers: map[string]scale.Role{bigWorker: scale.Hot},
		quotas: &quota.Policy{Tenants: map[string]quota.Limits{hotTenant: targetLimits(tg, scale.Hot)}}}
	for i := 1; i <= limitedTenants; i++ {
		name := fmt.Sprintf("limited-%d", i)
		p.tenants[name] = scale.Limited
		p.quotas.Tenants[name] = quota.Limits{MaxRunning: 1}
	}
	for i := 1; i <= ordinaryTenants; i++ {
		p.tenants[fmt.Sprintf("tenant-%d", i)] = scale.Ordinary
	}
	for i := 1; i <= ordinaryWorkers; i++ {
		p.workers[fmt.Sprintf("worker-%d", i)] = scale.Ordinary
	}
	return p
}

// tenantOf is task i's tenant: limitedTenants×limitedTasks tasks in the
// middle of the run go to the limited tenants (played together, so that
// all but one of each tenant wait; in the middle, so that their documents
// and index entries are not all written before the others', which would
// read as a sequential range: at the target every tenant writes all the
// time), then HotShare of all to the hot one, the rest round robin.
func (p plan) tenantOf(i int, hotShare float64) string {
	first := max(0, p.tasks/2-limitedTenants*limitedTasks/2)
	if i >= first && i < first+limitedTenants*limitedTasks {
		return fmt.Sprintf("limited-%d", (i-first)/limitedTasks+1)
	}
	// i×7 mod 10 spreads the hot tenant over every scenario and worker.
	if float64(i*7%10) < hotShare*10 {
		return hotTenant
	}
	return fmt.Sprintf("tenant-%d", i%ordinaryTenants+1)
}

func (p plan) workerOf(i int) string {
	if i%2 == 0 {
		return bigWorker
	}
	return fmt.Sprintf("worker-%d", (i/2)%ordinaryWorkers+1)
}

// driver plays the workload against a stack at base.
type driver struct {
	base string
	box  *mailbox
	rec  *recorder
	mu   sync.Mutex
	ids  map[string]scale.TaskInfo
}

func (d *driver) do(method, path string, body any, token string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

func (d *driver) callback(env api.Envelope, kind string, body any) (api.CallbackResponse, error) {
	st, out, err := d.do("POST", "/v1/tasks/"+env.TaskID+"/"+kind, body, env.TaskToken)
	var r api.CallbackResponse
	if err == nil {
		err = json.Unmarshal(out, &r)
	}
	if err == nil && st != http.StatusOK {
		err = fmt.Errorf("%s of %s: %d %s", kind, env.TaskID, st, out)
	}
	return r, err
}

// userKey is a caller's key for task i: callers' keys (an order number, a
// file name) are not in submit order.
func userKey(prefix string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprint(prefix, i)))
	return prefix + "-" + hex.EncodeToString(h[:6])
}

// task plays task i's whole life.
func (d *driver) task(p plan, i int, hotShare float64) error {
	tenant, worker := p.tenantOf(i, hotShare), p.workerOf(i)
	body := map[string]any{"tenantId": tenant, "workspaceId": "ws", "taskKey": userKey("k", i), "worker": worker,
		"payload": map[string]any{"n": i}, "heartbeatIntervalMs": 500, "heartbeatTimeoutMs": heartbeatTimeout.Milliseconds(),
		"cancelGracePeriodMs": 30000, "retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 100}}
	if i%10 == 7 { // a delayed start (its Cloud Task scheduled at it)
		body["startDelayMs"] = 300
	}
	if i/2%2 == 0 {
		body["idempotencyKey"] = userKey("idem", i)
	}
	submit := func() (string, error) {
		st, out, err := d.do("POST", "/v1/tasks", body, "")
		if err != nil {
			return "", err
		}
		var r api.SubmitResponse
		if st != http.StatusCreated && st != http.StatusOK || json.Unmarshal(out, &r) != nil {
			return "", fmt.Errorf("submit: %d %s", st, out)
		}
		return r.TaskID, nil
	}
	id, err := submit()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.ids[id] = scale.TaskInfo{Tenant: tenant, Worker: worker}
	d.mu.Unlock()
	if i%10 == 5 {
		d.rec.mu.Lock()
		d.rec.failOnce[id] = true
		d.rec.mu.Unlock()
	}
	if i%4 == 0 { // a duplicate submit: the same task
		if again, err := submit(); err != nil || again != id {
			return fmt.Errorf("duplicate submit of %s: %q, %v", id, again, err)
		}
	}
	env, err := d.box.next(id, 1)
	if err != nil {
		return err
	}
	if _, err := d.callback(env, "started", api.StartedRequest{Attempt: env.Attempt, WorkerID: "w"}); err != nil {
		return err
	}
	switch i % 10 {
	case 0: // fails once, retried
		if _, err := d.callback(env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w", Outcome: api.OutcomeFailed,
			Error: &api.ErrorInfo{Category: api.CategoryInfrastructure, Message: "flaky"}}); err != nil {
			return err
		}
		if env, err = d.box.next(id, 2); err != nil {
			return err
		}
		if _, err := d.callback(env, "started", api.StartedRequest{Attempt: env.Attempt, WorkerID: "w"}); err != nil {
			return err
		}
	case 1: // cancelled while running
		if st, out, err := d.do("POST", "/v1/tasks/"+id+"/cancel", map[string]string{"reason": "user_requested"}, ""); err != nil || st != http.StatusOK {
			return fmt.Errorf("cancel %s: %d %s %v", id, st, out, err)
		}
		if _, err := d.callback(env, "heartbeat", api.HeartbeatRequest{Attempt: 1, WorkerID: "w"}); err != nil {
			return err
		}
		_, err := d.callback(env, "completed", api.CompletedRequest{Attempt: 1, WorkerID: "w", Outcome: api.OutcomeCancelled, CancelledDuringPhase: "processing"})
		return err
	case 2: // a zombie: silent until the sweeper retries it
		if env, err = d.box.next(id, 2); err != nil {
			return err
		}
		if _, err := d.callback(env, "started", api.StartedRequest{Attempt: env.Attempt, WorkerID: "w"}); err != nil {
			return err
		}
	}
	for b := range p.heartbeats {
		pct := (b + 1) * 100 / (p.heartbeats + 1)
		if _, err := d.callback(env, "heartbeat", api.HeartbeatRequest{Attempt: env.Attempt, WorkerID: "w", ProgressPct: &pct}); err != nil {
			return err
		}
	}
	_, err = d.callback(env, "completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: "w", Outcome: api.OutcomeSucceeded, Output: json.RawMessage(`{"ok":true}`)})
	return err
}

// run plays p with parallel tasks at a time, then lists, then waits for
// the refused publishes' re-drive.
func (d *driver) run(ctx context.Context, p plan, parallel int, hotShare float64) error {
	sem := make(chan struct{}, parallel)
	errs := make(chan error, p.tasks)
	var wg sync.WaitGroup
	for i := range p.tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.task(p, i, hotShare); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	for tenant := range p.tenants {
		for _, path := range []string{"/v1/tasks?tenantId=" + tenant, "/v1/runs?tenantId=" + tenant} {
			if st, out, err := d.do("GET", path, nil, ""); err != nil || st != http.StatusOK {
				return fmt.Errorf("list %s: %d %s %v", path, st, out, err)
			}
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if n, refused := d.rec.redrives(); refused == 0 || n >= refused {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the outbox re-drive did not publish the refused events")
		}
	}
}
