package dispatcher

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// A submitted task reaches the worker through Cloud Tasks with a complete
// envelope, a token the key ring verifies for exactly that attempt, the
// Cloud Tasks headers and an OIDC token for the worker URL.
func TestSubmitDeliversEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := validSubmit("acme")
	body["assetId"] = "raw.events"
	body["resources"] = map[string]any{"cpu": 2, "memoryMb": 4096}
	body["deadline"] = deadline.Format(time.RFC3339)
	body["heartbeatIntervalMs"] = 1000
	body["heartbeatTimeoutMs"] = 3000
	body["cancelGracePeriodMs"] = 2000
	body["retry"] = map[string]any{"maxAttempts": 5, "initialBackoffMs": 200, "backoffCoefficient": 3, "maxBackoffMs": 5000}

	sr := e.submit(body, http.StatusCreated)
	if !task.ValidID(sr.TaskID, task.TaskIDPrefix) || !task.ValidID(sr.RunID, task.RunIDPrefix) || sr.Attempt != 1 || sr.State != api.Queued {
		t.Fatalf("submit answer = %+v, want new ids, attempt 1, QUEUED", sr)
	}

	d := e.waitDeliveries(1)[0]
	if got := d.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	stored := e.storedTask(sr.TaskID)
	for h, want := range map[string]string{
		cloudtasks.HeaderQueueName:      "servo-test",
		cloudtasks.HeaderTaskName:       task.DispatchName(sr.TaskID, 1),
		cloudtasks.HeaderRetryCount:     "0",
		cloudtasks.HeaderExecutionCount: "0",
	} {
		if got := d.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if d.header.Get(cloudtasks.HeaderETA) == "" {
		t.Errorf("%s missing", cloudtasks.HeaderETA)
	}

	// The OIDC token Cloud Tasks attaches: the worker's service account,
	// audience = the worker URL.
	bearer, ok := strings.CutPrefix(d.header.Get("Authorization"), "Bearer ")
	if !ok {
		t.Fatalf("Authorization = %q, want a bearer token", d.header.Get("Authorization"))
	}
	var oidc cloudtasks.OIDCClaims
	if _, err := jwt.ParseWithClaims(bearer, &oidc, func(*jwt.Token) (any, error) { return e.ct.PublicKey(), nil },
		jwt.WithValidMethods([]string{"RS256"})); err != nil {
		t.Fatalf("OIDC token: %v", err)
	}
	if oidc.Email != workerSA || len(oidc.Audience) != 1 || oidc.Audience[0] != e.workers["render"].URL {
		t.Errorf("OIDC claims email=%q aud=%v, want %q and [%s]", oidc.Email, oidc.Audience, workerSA, e.workers["render"].URL)
	}

	var env api.Envelope
	if err := json.Unmarshal(d.body, &env); err != nil {
		t.Fatalf("envelope: %v: %s", err, d.body)
	}
	want := api.Envelope{
		TaskID: sr.TaskID, RunID: sr.RunID, AssetID: "raw.events", TaskKey: "raw.events/2030-01-15", TenantID: "acme",
		WorkspaceID: "ws-1", Attempt: 1, Worker: "render", CallbackBaseURL: "http://127.0.0.1:1/callbacks",
		HeartbeatIntervalMs: 1000, HeartbeatTimeoutMs: 3000, CancelGracePeriodMs: 2000,
	}
	if env.TaskID != want.TaskID || env.RunID != want.RunID || env.AssetID != want.AssetID || env.TaskKey != want.TaskKey ||
		env.TenantID != want.TenantID || env.WorkspaceID != want.WorkspaceID || env.Attempt != 1 || env.Worker != want.Worker ||
		env.CallbackBaseURL != want.CallbackBaseURL || env.HeartbeatIntervalMs != 1000 || env.HeartbeatTimeoutMs != 3000 ||
		env.CancelGracePeriodMs != 2000 {
		t.Errorf("envelope = %+v, want %+v", env, want)
	}
	if string(env.Payload) != `{"partition":5}` || string(env.Resources) != `{"cpu":2,"memoryMb":4096}` {
		t.Errorf("payload %s resources %s", env.Payload, env.Resources)
	}
	if env.Deadline == nil || !env.Deadline.Equal(deadline) {
		t.Errorf("deadline = %v, want %v", env.Deadline, deadline)
	}
	if env.EnqueuedAt.IsZero() {
		t.Error("enqueuedAt missing")
	}
	claims, err := e.keys.Verify(env.TaskToken, time.Now())
	if err != nil {
		t.Fatalf("task token: %v", err)
	}
	wantScope := auth.Scope{TenantID: "acme", WorkspaceID: "ws-1", RunID: sr.RunID, TaskID: sr.TaskID, Attempt: 1}
	if claims.Scope != wantScope {
		t.Errorf("token scope = %+v, want %+v", claims.Scope, wantScope)
	}
	if !claims.ExpiresAtTime().Equal(env.TokenExpiresAt) {
		t.Errorf("tokenExpiresAt = %v, token exp = %v", env.TokenExpiresAt, claims.ExpiresAtTime())
	}
	if !claims.ExpiresAtTime().After(deadline) {
		t.Errorf("token expires %v, before the deadline %v", claims.ExpiresAtTime(), deadline)
	}

	// The stored task: QUEUED, policy and timers as submitted.
	if stored.State != api.Queued || stored.Retry.MaxAttempts != 5 || stored.Retry.BackoffCoefficient != 3 ||
		stored.Timing.HeartbeatTimeoutMs != 3000 || stored.Timing.StartTimeoutMs != api.DefaultStartTimeout.Milliseconds() {
		t.Errorf("stored = %+v", stored)
	}
	if v := e.getTask(sr.TaskID); v.State != api.Queued || len(v.Attempts) != 1 || v.Attempts[0].Attempt != 1 {
		t.Errorf("GET = %+v", v)
	}
}

// A task's priority is the submit's, default 3, in the stored task, GET,
// the listing and its events.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	plain := e.submit(validSubmit("acme"), http.StatusCreated)
	body := validSubmit("acme")
	body["priority"] = 1
	urgent := e.submit(body, http.StatusCreated)
	for _, c := range []struct {
		id   string
		want int
	}{{plain.TaskID, task.DefaultPriority}, {urgent.TaskID, 1}} {
		if got := e.storedTask(c.id).Priority; got != c.want {
			t.Errorf("%s: stored priority %d, want %d", c.id, got, c.want)
		}
		if got := e.getTask(c.id).Priority; got != c.want {
			t.Errorf("%s: GET priority %d, want %d", c.id, got, c.want)
		}
		r := e.do(http.MethodGet, "/v1/tasks/"+c.id+"/events", nil, "")
		var evs struct {
			Events []api.Event `json:"events"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &evs) != nil || len(evs.Events) == 0 {
			t.Fatalf("%s: events: %d %s", c.id, r.status, r.body)
		}
		for _, ev := range evs.Events {
			if ev.Priority != c.want {
				t.Errorf("%s: event %s priority %d, want %d", c.id, ev.Reason, ev.Priority, c.want)
			}
		}
	}
	r := e.do(http.MethodGet, "/v1/tasks?tenantId=acme", nil, "")
	var list struct {
		Tasks []api.Task `json:"tasks"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Tasks) != 2 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	for _, v := range list.Tasks {
		if want := map[string]int{plain.TaskID: 3, urgent.TaskID: 1}[v.TaskID]; v.Priority != want {
			t.Errorf("listed %s: priority %d, want %d", v.TaskID, v.Priority, want)
		}
	}
}

// Defaults apply to absent timers and retry fields.
func TestSubmitDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	body := validSubmit("acme")
	body["heartbeatIntervalMs"] = 40000
	body["retry"] = map[string]any{"initialBackoffMs": 900000}
	sr := e.submit(body, http.StatusCreated)
	v := e.getTask(sr.TaskID)
	if v.HeartbeatIntervalMs != 40000 || v.HeartbeatTimeoutMs != 120000 || v.CancelGracePeriodMs != 30000 {
		t.Errorf("timers = %d/%d/%d, want 40000/120000 (3 × interval)/30000", v.HeartbeatIntervalMs, v.HeartbeatTimeoutMs, v.CancelGracePeriodMs)
	}
	want := api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 900000, BackoffCoefficient: 2, MaxBackoffMs: 900000}
	if !reflect.DeepEqual(v.Retry, want) {
		t.Errorf("retry = %+v, want %+v (maxBackoff raised to the initial backoff)", v.Retry, want)
	}
}

// The same idempotency key for the same tenant answers 200 with the same
// task; another tenant's key is its own.
func TestSubmitIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	body := validSubmit("acme")
	body["idempotencyKey"] = "order-42"
	first := e.submit(body, http.StatusCreated)
	again := e.submit(body, http.StatusOK)
	if again.TaskID != first.TaskID || again.RunID != first.RunID || again.Attempt != 1 {
		t.Fatalf("repeat = %+v, want the task of %+v", again, first)
	}
	// A repeat with other fields still names the first task.
	body["taskKey"] = "something-else"
	if other := e.submit(body, http.StatusOK); other.TaskID != first.TaskID {
		t.Fatalf("repeat with another body = %s, want %s", other.TaskID, first.TaskID)
	}
	body["tenantId"] = "globex"
	if other := e.submit(body, http.StatusCreated); other.TaskID == first.TaskID {
		t.Fatal("another tenant's key returned acme's task")
	}
	if n := len(e.tenantTasks("acme")); n != 1 {
		t.Errorf("acme has %d tasks, want 1", n)
	}
	e.waitDeliveries(2)
}

// Concurrent submits with one key create one task: one 201, the rest 200.
func TestSubmitIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	body := validSubmit("acme")
	body["idempotencyKey"] = "concurrent-1"
	const n = 8
	var wg sync.WaitGroup
	got := make([]response, n)
	for i := range n {
		wg.Go(func() { got[i] = e.do("POST", "/v1/tasks", body, "") })
	}
	wg.Wait()
	created, ids := 0, map[string]bool{}
	for _, r := range got {
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var sr api.SubmitResponse
		r.decode(t, &sr)
		ids[sr.TaskID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d created, %d distinct task ids; want 1 and 1", created, len(ids))
	}
	if ts := e.tenantTasks("acme"); len(ts) != 1 {
		t.Fatalf("acme has %d tasks, want 1", len(ts))
	}
	d := e.waitDeliveries(1)
	if d[0].header.Get(cloudtasks.HeaderTaskName) == "" {
		t.Error("delivery without a task name")
	}
}

// With Cloud Tasks unreachable the submit still answers 201 PENDING (the
// task was stored QUEUED and is recorded back as PENDING, DISPATCH_FAILED); a
// later Enqueue (the sweeper's re-drive) or a repeated submit queues it.
func TestSubmitCloudTasksDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ctDown: true})
	a := e.submit(validSubmit("acme"), http.StatusCreated)
	keyed := validSubmit("acme")
	keyed["idempotencyKey"] = "k-1"
	b := e.submit(keyed, http.StatusCreated)
	for _, sr := range []api.SubmitResponse{a, b} {
		if sr.State != api.Pending || sr.Attempt != 1 {
			t.Fatalf("submit with Cloud Tasks down = %+v, want PENDING attempt 1", sr)
		}
		if v := e.getTask(sr.TaskID); v.State != api.Pending {
			t.Fatalf("stored state %s, want PENDING", v.State)
		}
		// Stored QUEUED by the submit's commit, then back to PENDING with
		// its dispatch check due at once: the next sweep re-drives it.
		st := e.storedTask(sr.TaskID)
		if st.DispatchCheckAt == nil || st.DispatchCheckAt.After(time.Now()) || st.Seq != 3 {
			t.Fatalf("stored %+v: want the dispatch check due now after →PENDING, →QUEUED, →PENDING", st)
		}
	}

	// Cloud Tasks is back: the sweeper's re-drive is Enqueuer.Enqueue.
	live := e.newEnqueuer(e.tasks)
	if err := live.Enqueue(e.ctx, e.storedTask(a.TaskID)); err != nil {
		t.Fatalf("re-drive: %v", err)
	}
	if v := e.getTask(a.TaskID); v.State != api.Queued {
		t.Fatalf("after re-drive: %s, want QUEUED", v.State)
	}
	// →QUEUED twice in one attempt (the submit's, the re-drive's): each
	// transition keeps its outbox entry (in its commit's document), so no
	// event is lost.
	entries, err := e.st.OutboxEntries(e.ctx, a.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, en := range entries {
		seqs = append(seqs, en.Seq)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3, 4}) {
		t.Fatalf("outbox of %s holds seqs %v, want 1 2 3 4 (→PENDING, →QUEUED, →PENDING, →QUEUED)", a.TaskID, seqs)
	}

	// A repeated submit of the PENDING task re-drives it too.
	e.h.cfg.Enqueuer = live
	again := e.submit(keyed, http.StatusOK)
	if again.TaskID != b.TaskID || again.State != api.Queued {
		t.Fatalf("repeat after recovery = %+v, want %s QUEUED", again, b.TaskID)
	}
	ds := e.waitDeliveries(2)
	names := map[string]bool{}
	for _, d := range ds {
		names[d.header.Get(cloudtasks.HeaderTaskName)] = true
	}
	for _, id := range []string{a.TaskID, b.TaskID} {
		if !names[task.DispatchName(id, 1)] {
			t.Errorf("task %s not delivered (got %v)", id, names)
		}
	}
}

// A Cloud Tasks that stalls until the enqueue's deadline leaves the
// submit's record of the failure its own budget: the task is PENDING with
// its dispatch check due, for the next sweep to re-drive, not QUEUED until
// the start timeout.
func TestSubmitCloudTasksStalled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ctStalled: true, config: func(c *Config) { c.CloudTasksTimeout = 300 * time.Millisecond }})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	if sr.State != api.Pending {
		t.Fatalf("submit with Cloud Tasks stalled = %+v, want PENDING", sr)
	}
	st := e.storedTask(sr.TaskID)
	if st.State != api.Pending || st.DispatchCheckAt == nil || st.DispatchCheckAt.After(time.Now()) {
		t.Fatalf("stored %s, dispatch check %v: want PENDING, due now", st.State, st.DispatchCheckAt)
	}
}

// A Firestore outage is 503 unavailable with Retry-After, on every route.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{store: []store.Option{deadStore(t)}, config: func(c *Config) { c.RequestTimeout = 300 * time.Millisecond }})
	id := task.NewTaskID(time.Now())
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/tasks", validSubmit("acme")},
		{"POST", "/v1/tasks:batch", map[string]any{"tasks": []any{validSubmit("acme")}}},
		{"GET", "/v1/tasks/" + id, nil},
		{"GET", "/v1/tasks?tenantId=acme", nil},
		{"POST", "/v1/tasks/" + id + "/cancel", nil},
		{"POST", "/v1/runs/" + task.NewRunID(time.Now()) + "/cancel", nil},
		{"GET", "/v1/health", nil},
	} {
		r := e.do(c.method, c.path, c.body, "")
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: %d (Retry-After %q), want 503 with Retry-After: %s", c.method, c.path, r.status, r.header.Get("Retry-After"), r.body)
			continue
		}
		var eb struct{ Error string }
		r.decode(t, &eb)
		if eb.Error != api.CodeUnavailable {
			t.Errorf("%s %s: error %q, want unavailable", c.method, c.path, eb.Error)
		}
	}
}
