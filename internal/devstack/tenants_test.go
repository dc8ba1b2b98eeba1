package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/worker"
)

// gauge is a worker that runs each task for a while and records how many
// run at once, and in which order the tenants' tasks started.
type gauge struct {
	srv     *httptest.Server
	mu      sync.Mutex
	running int
	max     int
	started []string // tenant of each task, in start order
}

func newGauge(t *testing.T, hold time.Duration) *gauge {
	g := &gauge{}
	g.srv = httptest.NewServer(worker.Handler(func(ctx context.Context, tk *worker.Task) (any, error) {
		g.mu.Lock()
		g.running++
		g.max = max(g.max, g.running)
		g.started = append(g.started, tk.Envelope().TenantID)
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
		}()
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return map[string]any{"ok": true}, nil
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// batch submits n tasks of tenant to the gauge worker in one request.
func (e *env) batch(tenant string, n int) []string {
	e.T.Helper()
	var items []any
	for i := range n {
		items = append(items, map[string]any{"tenantId": tenant, "workspaceId": "ws", "taskKey": fmt.Sprintf("%s-%d", tenant, i),
			"worker": "gauge", "heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 5000})
	}
	status, out := e.Do("POST", "/v1/tasks:batch", map[string]any{"tasks": items})
	if status != http.StatusCreated {
		e.T.Fatalf("batch: %d %s", status, out)
	}
	var br api.BatchResponse
	json.Unmarshal(out, &br)
	ids := make([]string, len(br.Tasks))
	for i, r := range br.Tasks {
		ids[i] = r.TaskID
	}
	return ids
}

// waitAll waits until every task succeeded.
func (e *env) waitAll(ids []string) {
	e.T.Helper()
	for _, id := range ids {
		e.WaitState(id, api.Succeeded)
	}
}

// With maxRunning 2 for a tenant and 10 tasks submitted at once, never
// more than 2 run at once and all 10 finish.
func TestTenantMaxRunning(t *testing.T) {
	t.Parallel()
	g := newGauge(t, 300*time.Millisecond)
	e := start(t, func(o *devstack.Options) {
		o.Workers["gauge"] = g.srv.URL
		o.Quotas = &quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 2}}}
	})
	ids := e.batch("acme", 10)
	e.waitAll(ids)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max > 2 || g.max < 1 || len(g.started) != 10 {
		t.Fatalf("at most %d ran at once (want ≤ 2), %d started (want 10)", g.max, len(g.started))
	}
	status, out := e.Do("GET", "/v1/tenants/acme/usage", nil)
	var u api.UsageResponse
	json.Unmarshal(out, &u)
	if status != 200 || u.Running != 0 || u.Queued != 0 || u.Limits.MaxRunning != 2 {
		t.Fatalf("usage after: %d %s", status, out)
	}
}

// Two tenants sharing a worker limited to 2 running, 20 tasks each, the
// second tenant submitting after the first: both progress (the admit duty
// takes the tenants in turn), and all 40 finish.
func TestTenantsSharingAWorkerBothProgress(t *testing.T) {
	t.Parallel()
	g := newGauge(t, 100*time.Millisecond)
	e := start(t, func(o *devstack.Options) {
		o.Workers["gauge"] = g.srv.URL
		o.Quotas = &quota.Policy{Workers: map[string]quota.Limits{"gauge": {MaxRunning: 2}}}
	})
	a := e.batch("tenant-a", 20)
	b := e.batch("tenant-b", 20)
	e.waitAll(append(a, b...))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max > 2 || len(g.started) != 40 {
		t.Fatalf("at most %d ran at once (want ≤ 2), %d started (want 40)", g.max, len(g.started))
	}
	// Until tenant-a's last task started, tenant-b's must have been
	// started too, several times: neither waits for the other to finish.
	lastA := 0
	for i, tn := range g.started {
		if tn == "tenant-a" {
			lastA = i
		}
	}
	nb := 0
	for _, tn := range g.started[:lastA] {
		if tn == "tenant-b" {
			nb++
		}
	}
	if nb < 10 {
		t.Fatalf("only %d of tenant-b's tasks started before tenant-a's last (start order %v)", nb, g.started)
	}
}

// servo dev's API accepts the dev identity of `servo --as` under a real
// policy, and refuses a forged one.
func TestDevIdentityUnderAPolicy(t *testing.T) {
	t.Parallel()
	p, err := auth.ParsePolicy([]byte(`{"principals": {"dev@example.com": {"acme": "operator"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, func(o *devstack.Options) { o.Access = p })
	call := func(key []byte, email string) int {
		tok, _ := auth.SignDev(key, email, time.Now(), time.Minute)
		req, _ := http.NewRequest("GET", e.stack.URL+"/v1/tasks?tenantId=acme", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := call(e.stack.IdentityKey, "dev@example.com"); got != 200 {
		t.Fatalf("dev identity: %d, want 200", got)
	}
	if got := call(e.stack.IdentityKey, "other@example.com"); got != 403 {
		t.Fatalf("other identity: %d, want 403", got)
	}
	if got := call(auth.NewDevKey(), "dev@example.com"); got != 401 {
		t.Fatalf("forged identity: %d, want 401", got)
	}
	if status, _ := e.Do("GET", "/v1/tasks", nil); status != 401 {
		t.Fatalf("no identity: %d, want 401", status)
	}
}
