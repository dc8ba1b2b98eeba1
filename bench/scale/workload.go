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
	"github.com/servo-dev/servo/internal/task"
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
// key, every 4th is submitted twice with it. Each tenant's tasks go into
// runs of up to the target's run size, submitted the target's batch a
// request; task outageTask's completion meets an outage (its commit
// refused unavailable, the callback sent again); the last ordinary worker
// is limited (run slots, and a share a tenant: perTenant).
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
	// runSize is the most tasks of one tenant in one recorded run (the
	// target's run size; 1: no run id, each task its own run); batch the
	// tasks of one submit request (1: POST /v1/tasks, else
	// POST /v1/tasks:batch).
	runSize, batch int
	// limitedWorker is the worker with quota limits: its run slots, and
	// each tenant's share of them (perTenant). Only ordinary tenants'
	// tasks go to it.
	limitedWorker string
	// decl is what the deployment declares (-var-file).
	decl declared
}

// newPlan is the recorded workload of tasks tasks for target tg, with
// runs of tg.RunSize and requests of tg.Batch tasks, under what the
// deployment declares.
func newPlan(tasks, heartbeats int, tg scale.Target, decl declared) plan {
	p := plan{tasks: tasks, heartbeats: heartbeats, dueShards: store.DefaultDueShards,
		tenants: map[string]scale.Role{hotTenant: scale.Hot}, workers: map[string]scale.Role{bigWorker: scale.Hot},
		quotas:  &quota.Policy{Tenants: map[string]quota.Limits{}, Workers: map[string]quota.Limits{}, Shards: decl.quotaShards},
		runSize: max(1, tg.RunSize), batch: max(1, tg.Batch), decl: decl}
	// The hot tenant's limits size its shards, and are never reached; a
	// hot tenant the deployment declares no limit for has no counters.
	if hot := decl.tenantLimits(tg, scale.Hot); hot.Limited() {
		hot.MaxRunning, hot.MaxQueued = 10_000_000, 0
		p.quotas.Tenants[hotTenant] = hot
	}
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
	// The last ordinary worker is limited: two run slots, one a tenant,
	// so that its tasks and its tenants' shares wait for slots.
	p.limitedWorker = fmt.Sprintf("worker-%d", ordinaryWorkers)
	p.quotas.Workers[p.limitedWorker] = quota.Limits{MaxRunning: limitedWorkerSlots, PerTenant: &quota.Limits{MaxRunning: 1}}
	return p
}

// limitedWorkerSlots are the limited worker's run slots in the recording.
const limitedWorkerSlots = 2

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

// workerOf is task i's worker: every other task the big worker's, the
// rest the ordinary workers', of several ordinary tenants each; the limited worker takes only
// ordinary tenants' tasks (the hot and limited tenants' go to the first
// ordinary worker instead).
func (p plan) workerOf(i int, tenant string) string {
	if i%2 == 0 {
		return bigWorker
	}
	// (i/2 + i/8): not (i/2) alone, which would give the last worker
	// only tasks of one ordinary tenant (i mod 4 = 3).
	w := fmt.Sprintf("worker-%d", (i/2+i/8)%ordinaryWorkers+1)
	if w == p.limitedWorker && p.tenants[tenant] != scale.Ordinary {
		w = "worker-1"
	}
	return w
}

// layout is the recorded workload in submit order: each task's tenant,
// worker and run id ("" for a task that is its own run), and the submit
// requests, each the numbers of the tasks it carries (one tenant's, of
// one run, at most plan.batch).
type layout struct {
	tenant, worker, run []string
	requests            [][]int
}

// layout lays p out: each tenant's tasks in runs of p.runSize (ids made
// at now), and in requests of p.batch, each sent when its first task's
// turn comes.
func (p plan) layout(hotShare float64, now time.Time) layout {
	l := layout{tenant: make([]string, p.tasks), worker: make([]string, p.tasks), run: make([]string, p.tasks)}
	seen := map[string]int{}    // tenant → its tasks so far
	runs := map[string]string{} // tenant and run number → run id
	open := map[string]int{}    // tenant → its request still taking tasks
	for i := range p.tasks {
		tn := p.tenantOf(i, hotShare)
		l.tenant[i], l.worker[i] = tn, p.workerOf(i, tn)
		k := seen[tn]
		seen[tn]++
		if p.runSize > 1 {
			key := fmt.Sprint(tn, "/", k/p.runSize)
			if runs[key] == "" {
				runs[key] = task.NewRunID(now)
			}
			l.run[i] = runs[key]
		}
		if j, ok := open[tn]; ok && len(l.requests[j]) < p.batch && l.run[l.requests[j][0]] == l.run[i] {
			l.requests[j] = append(l.requests[j], i)
			continue
		}
		open[tn] = len(l.requests)
		l.requests = append(l.requests, []int{i})
	}
	return l
}

// driver plays the workload against a stack at base.
type driver struct {
	base string
	box  *mailbox
	rec  *recorder
	mu   sync.Mutex
	ids  map[string]scale.TaskInfo
	// requests counts the submit requests that carried tasks of each run
	// and tenant (runKey).
	requests map[string]int
}

// runKey names tenant's part of run (a run document).
func runKey(run, tenant string) string { return run + "\x00" + tenant }

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

// callback sends a worker's callback, again after a 503 (the store
// unavailable: the recorded outage), as the worker SDKs do.
func (d *driver) callback(env api.Envelope, kind string, body any) (api.CallbackResponse, error) {
	var r api.CallbackResponse
	for try := 0; ; try++ {
		st, out, err := d.do("POST", "/v1/tasks/"+env.TaskID+"/"+kind, body, env.TaskToken)
		if err == nil && st == http.StatusServiceUnavailable && try < 20 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err == nil {
			err = json.Unmarshal(out, &r)
		}
		if err == nil && st != http.StatusOK {
			err = fmt.Errorf("%s of %s: %d %s", kind, env.TaskID, st, out)
		}
		return r, err
	}
}

// userKey is a caller's key for task i: callers' keys (an order number, a
// file name) are not in submit order.
func userKey(prefix string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprint(prefix, i)))
	return prefix + "-" + hex.EncodeToString(h[:6])
}

// body is task i's submit request.
func (p plan) body(l layout, i int) map[string]any {
	body := map[string]any{"tenantId": l.tenant[i], "workspaceId": "ws", "taskKey": userKey("k", i), "worker": l.worker[i],
		"payload": map[string]any{"n": i}, "heartbeatIntervalMs": 500, "heartbeatTimeoutMs": heartbeatTimeout.Milliseconds(),
		"cancelGracePeriodMs": 30000, "retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 100}}
	if l.run[i] != "" {
		body["runId"] = l.run[i]
	}
	if i%10 == 7 { // a delayed start (its Cloud Task scheduled at it)
		body["startDelayMs"] = 300
	}
	if i/2%2 == 0 {
		body["idempotencyKey"] = userKey("idem", i)
	}
	return body
}

// submit sends one request of tasks req (POST /v1/tasks for a single
// task when p submits one a request, else POST /v1/tasks:batch) and
// returns their ids in order.
func (d *driver) submit(p plan, l layout, req []int) ([]string, error) {
	d.mu.Lock()
	counted := map[string]bool{}
	for _, i := range req {
		if k := runKey(l.run[i], l.tenant[i]); l.run[i] != "" && !counted[k] {
			counted[k] = true
			d.requests[k]++
		}
	}
	d.mu.Unlock()
	if p.batch == 1 {
		id, err := d.submitOne(p.body(l, req[0]), http.StatusCreated)
		return []string{id}, err
	}
	batch := map[string]any{"runId": l.run[req[0]]}
	var tasks []map[string]any
	for _, i := range req {
		tasks = append(tasks, p.body(l, i))
	}
	batch["tasks"] = tasks
	if l.run[req[0]] == "" {
		delete(batch, "runId")
	}
	st, out, err := d.do("POST", "/v1/tasks:batch", batch, "")
	if err != nil {
		return nil, fmt.Errorf("batch submit: %w", err)
	}
	var r api.BatchResponse
	if st != http.StatusCreated || json.Unmarshal(out, &r) != nil || len(r.Tasks) != len(req) {
		return nil, fmt.Errorf("batch submit: %d %s", st, out)
	}
	ids := make([]string, len(req))
	for j, t := range r.Tasks {
		if t.Status != http.StatusCreated {
			return nil, fmt.Errorf("batch submit: task %d: %d %s %s", req[j], t.Status, t.Error, t.Message)
		}
		ids[j] = t.TaskID
	}
	return ids, nil
}

// submitOne sends one task's submit, answered want (201 a new task, 200
// a repeated idempotency key), and returns its id.
func (d *driver) submitOne(body map[string]any, want int) (string, error) {
	st, out, err := d.do("POST", "/v1/tasks", body, "")
	if err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	var r api.SubmitResponse
	if st != want || json.Unmarshal(out, &r) != nil {
		return "", fmt.Errorf("submit: %d %s, want %d", st, out, want)
	}
	return r.TaskID, nil
}

// outageTask is the task whose completion meets the recorded outage: its
// completed callback's commit is refused unavailable once, the callback
// answers 503 and is sent again; the store records the outage it saw
// (outages/{id}) when its next call succeeds.
const outageTask = 4

// life plays the whole life of task i, submitted as id.
func (d *driver) life(p plan, l layout, i int, id string) error {
	d.mu.Lock()
	d.ids[id] = scale.TaskInfo{Tenant: l.tenant[i], Worker: l.worker[i]}
	d.mu.Unlock()
	if i%10 == 5 {
		d.rec.mu.Lock()
		d.rec.failOnce[id] = true
		d.rec.mu.Unlock()
	}
	if i%4 == 0 { // a duplicate submit: the same task
		if again, err := d.submitOne(p.body(l, i), http.StatusOK); err != nil || again != id {
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
	if i == outageTask {
		d.rec.armOutage(id)
	}
	_, err = d.callback(env, "completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: "w", Outcome: api.OutcomeSucceeded, Output: json.RawMessage(`{"ok":true}`)})
	return err
}

// run plays p with parallel tasks at a time (at least a request's),
// request by request, then lists, then waits for the refused publishes'
// re-drive.
func (d *driver) run(ctx context.Context, p plan, parallel int, hotShare float64) error {
	l := p.layout(hotShare, time.Now())
	slots := make(chan struct{}, max(parallel, p.batch))
	errs := make(chan error, p.tasks+len(l.requests))
	var wg sync.WaitGroup
	for _, req := range l.requests {
		for range req {
			slots <- struct{}{}
		}
		wg.Go(func() {
			ids, err := d.submit(p, l, req)
			if err != nil {
				errs <- err
				for range req {
					<-slots
				}
				return
			}
			for j, i := range req {
				wg.Go(func() {
					defer func() { <-slots }()
					if err := d.life(p, l, i, ids[j]); err != nil {
						errs <- err
					}
				})
			}
		})
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
	if p.tasks > outageTask && !d.rec.outageMet() {
		return fmt.Errorf("the outage was not met: no commit of task %d's completion was refused", outageTask)
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
