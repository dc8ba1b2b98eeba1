package dispatcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/zombie"
)

func quotaEnv(t *testing.T, p quota.Policy, opts ...store.Option) *env {
	t.Helper()
	// Generous: the concurrent-submit test queues 50 transactions on one
	// tenant's counters of a loaded emulator.
	return newEnv(t, envOptions{store: append(opts, store.WithQuotas(&p)), config: func(c *Config) { c.RequestTimeout = 5 * time.Minute }})
}

func (e *env) usage(tenant string) api.UsageResponse {
	e.t.Helper()
	r := e.do("GET", "/v1/tenants/"+tenant+"/usage", nil, "")
	if r.status != http.StatusOK {
		e.t.Fatalf("usage %s: %d %s", tenant, r.status, r.body)
	}
	var u api.UsageResponse
	r.decode(e.t, &u)
	return u
}

func (e *env) sweeper() *zombie.Sweeper {
	e.t.Helper()
	sw, err := zombie.New(zombie.Config{Store: e.st, Enqueuer: e.enq, Logger: testLogger(e.t), QuotaRepairEvery: time.Nanosecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return sw
}

// 50 concurrent submits against maxQueued 10 admit exactly 10; the others
// are 429 quota_exceeded with a Retry-After and store nothing; another
// tenant is not affected.
func TestMaxQueuedAdmitsExactly(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"burst": {MaxQueued: 10}}})
	e.submit(validSubmit("other"), http.StatusCreated) // warms the emulator up for this project
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range 50 {
		wg.Go(func() {
			b := validSubmit("burst")
			b["taskKey"] = fmt.Sprintf("k-%d", i)
			r := e.do("POST", "/v1/tasks", b, "")
			if r.status == http.StatusTooManyRequests {
				if er := r.err(t); er.Code != api.CodeQuotaExceeded || r.header.Get("Retry-After") == "" {
					t.Errorf("429 answer %s (Retry-After %q)", r.body, r.header.Get("Retry-After"))
				}
			}
			mu.Lock()
			statuses[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if want := map[int]int{http.StatusCreated: 10, http.StatusTooManyRequests: 40}; !maps.Equal(statuses, want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	if n := len(e.tenantTasks("burst")); n != 10 {
		t.Fatalf("%d tasks stored, want 10", n)
	}
	if u := e.usage("burst"); u.Queued != 10 || u.Limits.MaxQueued != 10 || u.Source != "counters" {
		t.Fatalf("usage %+v, want 10 queued of maxQueued 10", u)
	}
	e.submit(validSubmit("other"), http.StatusCreated)

	// A batch past the limit is refused as a whole with 429.
	r := e.do("POST", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("burst"), validSubmit("burst")}}, "")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("batch past maxQueued: %d %s", r.status, r.body)
	}
}

// With maxRunning 2, the third and later tasks stay QUEUED with no Cloud
// Task; when a task ends, the sweeper's admit duty enqueues the oldest
// waiting one, and only it.
func TestMaxRunningHoldsTasksUntilASlotFrees(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 2}}})
	var ids []string
	for i := range 5 {
		b := validSubmit("acme")
		b["taskKey"] = fmt.Sprintf("k-%d", i)
		sr := e.submit(b, http.StatusCreated)
		if sr.State != api.Queued {
			t.Fatalf("task %d: state %s", i, sr.State)
		}
		ids = append(ids, sr.TaskID)
	}
	// enqueued lists the tasks holding a run slot, after checking that
	// Cloud Tasks delivered exactly those.
	enqueued := func() (out []string) {
		t.Helper()
		for _, id := range ids {
			if tk := e.storedTask(id); tk.Quota != nil && tk.Quota.Slot {
				out = append(out, id)
			}
		}
		var delivered []string
		for _, d := range e.waitDeliveries(len(out)) {
			var env api.Envelope
			if err := json.Unmarshal(d.body, &env); err != nil {
				t.Fatal(err)
			}
			delivered = append(delivered, env.TaskID)
		}
		if len(delivered) != len(out) {
			t.Fatalf("delivered %v, want the tasks holding a slot %v", delivered, out)
		}
		for _, id := range out {
			if !contains(delivered, id) {
				t.Fatalf("task %s holds a slot but was not delivered (delivered %v)", id, delivered)
			}
		}
		return out
	}
	slotted := enqueued()
	if len(slotted) != 2 {
		t.Fatalf("%d tasks enqueued, want 2 (maxRunning)", len(slotted))
	}
	for _, id := range ids {
		tk := e.storedTask(id)
		if waiting := tk.WaitingSince != nil; waiting == contains(slotted, id) {
			t.Fatalf("task %s: waiting %v, enqueued %v", id, waiting, !waiting)
		}
	}
	if u := e.usage("acme"); u.Running != 2 || u.Queued != 5 {
		t.Fatalf("usage %+v, want 2 running (slots) and 5 queued", u)
	}
	// Nothing frees: a sweep admits nothing.
	if st, err := e.sweeper().Sweep(e.ctx); err != nil || st.Admit.Applied != 0 {
		t.Fatalf("sweep with no free slot: %+v %v", st.Admit, err)
	}
	// One task ends: the oldest waiting task, and only it, is enqueued.
	e.start(slotted[0], 1)
	e.complete(slotted[0], 1, api.OutcomeSucceeded)
	st, err := e.sweeper().Sweep(e.ctx)
	if err != nil || st.Admit.Applied != 1 {
		t.Fatalf("sweep after a slot freed: %+v %v", st.Admit, err)
	}
	var oldestWaiting string
	for _, id := range ids {
		if !contains(slotted, id) {
			oldestWaiting = id
			break
		}
	}
	now := enqueued()
	if len(now) != 3 || !contains(now, oldestWaiting) {
		t.Fatalf("enqueued %v, want the 2 first plus the oldest waiting %s", now, oldestWaiting)
	}
	// Queued: the admitted task (not yet started) and the 3 still waiting.
	if u := e.usage("acme"); u.Running != 2 || u.Queued != 4 {
		t.Fatalf("usage %+v, want 2 running and 4 queued", u)
	}
	// Cancelling a waiting task gives back its queued count.
	last := ids[4]
	if r := e.do("POST", "/v1/tasks/"+last+"/cancel", nil, ""); r.status != 200 {
		t.Fatalf("cancel waiting: %d %s", r.status, r.body)
	}
	if u := e.usage("acme"); u.Running != 2 || u.Queued != 3 {
		t.Fatalf("usage after cancel %+v, want 2 running and 3 queued", u)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A counter shard corrupted on purpose is recounted and rewritten by the
// sweeper's repair duty.
func TestSweeperRepairsACorruptedCounter(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 1, MaxQueued: 100}}})
	for i := range 3 {
		b := validSubmit("acme")
		b["taskKey"] = fmt.Sprintf("k-%d", i)
		e.submit(b, http.StatusCreated)
	}
	if u := e.usage("acme"); u.Running != 1 || u.Queued != 3 {
		t.Fatalf("usage %+v, want 1 running, 3 queued", u)
	}
	corruptCounter(t, e.project, 40, 7)
	if u := e.usage("acme"); u.Running == 1 && u.Queued == 3 {
		t.Fatalf("the counter was not corrupted: %+v", u)
	}
	st, err := e.sweeper().Sweep(e.ctx)
	if err != nil || st.QuotaRepairs != 1 {
		t.Fatalf("sweep: %d repairs, err %v; want 1", st.QuotaRepairs, err)
	}
	if u := e.usage("acme"); u.Running != 1 || u.Queued != 3 {
		t.Fatalf("usage after repair %+v, want 1 running, 3 queued", u)
	}
	if st, err := e.sweeper().Sweep(e.ctx); err != nil || st.QuotaRepairs != 0 {
		t.Fatalf("second sweep repaired %d (err %v), want 0", st.QuotaRepairs, err)
	}
}

// corruptCounter overwrites the first counter shard of the project's
// quotas collection through the emulator's REST API.
func corruptCounter(t *testing.T, project string, queued, running int) {
	t.Helper()
	base := "http://" + os.Getenv(store.EmulatorHostEnv) + "/v1/projects/" + project + "/databases/(default)/documents/"
	send := func(method, url string, body any) []byte {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url, rd)
		req.Header.Set("Authorization", "Bearer owner")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, data)
		}
		return data
	}
	var list struct {
		Documents []struct{ Name string } `json:"documents"`
	}
	if err := json.Unmarshal(send("GET", base+quota.Collection, nil), &list); err != nil || len(list.Documents) == 0 {
		t.Fatalf("no counter shard to corrupt (%v)", err)
	}
	name := list.Documents[0].Name
	send("PATCH", "http://"+os.Getenv(store.EmulatorHostEnv)+"/v1/"+name+"?updateMask.fieldPaths=queued&updateMask.fieldPaths=running",
		map[string]any{"fields": map[string]any{"queued": map[string]any{"integerValue": fmt.Sprint(queued)}, "running": map[string]any{"integerValue": fmt.Sprint(running)}}})
}

// The Firestore cost quotas add: a limited submit is a transaction, begun
// explicitly so that it can always be rolled back (store/doc.go), with one
// read of the tenant's and the worker's counter shards, then the commit;
// a completion is the same transaction as without quotas, with the shard
// updates among its writes (blind increments: no read).
func TestQuotaRoundTrips(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 100, MaxQueued: 1000}},
		Workers: map[string]quota.Limits{"render": {MaxRunning: 100}}}, store.WithRPCCounter(rc))
	rc.Reset()
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	if got, want := rc.Counts(), map[string]int{"BeginTransaction": 1, "BatchGetDocuments": 1, "Commit": 1}; !maps.Equal(got, want) {
		t.Errorf("limited submit: Firestore RPCs %v, want %v", got, want)
	}
	submitWrites := rc.Usage().DocsWritten
	e.start(sr.TaskID, 1)
	rc.Reset()
	e.complete(sr.TaskID, 1, api.OutcomeSucceeded)
	if got, want := rc.Counts(), map[string]int{"BatchGetDocuments": 1, "Commit": 1}; !maps.Equal(got, want) {
		t.Errorf("completion: Firestore RPCs %v, want %v", got, want)
	}
	completionWrites := rc.Usage().DocsWritten
	t.Logf("limited submit: 3 RPCs, %d writes; completion: 2 RPCs, %d writes", submitWrites, completionWrites)
}
