package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/api/option"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }

const (
	// ctLocation is the Cloud Tasks location of the test queues.
	ctLocation = "projects/servo-test/locations/us-central1"
	// workerSA is the service account whose OIDC token Cloud Tasks attaches.
	workerSA = "tasks-invoker@servo-test.iam.gserviceaccount.com"
	// waitFor bounds anything asynchronous.
	waitFor = 20 * time.Second
)

// delivery is one HTTP request Cloud Tasks pushed to the test worker.
type delivery struct {
	header http.Header
	body   []byte
	at     time.Time
}

// env is the dispatcher under test, against the Firestore emulator, an
// in-process Cloud Tasks emulator and an httptest worker.
type env struct {
	t       testing.TB
	ctx     context.Context
	project string
	st      *store.Store
	ct      *cloudtasks.Server
	ctAddr  string
	tasks   *cloudtasksapi.Client // always reaches the live emulator
	queue   string
	logs    io.Writer // envOptions.logs
	keys    *auth.KeyRing
	workers enqueue.Workers
	enq     *enqueue.Enqueuer
	h       *handler
	api     *httptest.Server
	worker  *httptest.Server

	mu         sync.Mutex
	deliveries []delivery
	delivered  chan struct{}
}

// envOptions vary an env.
type envOptions struct {
	// ctDown points the dispatcher's Cloud Tasks client at an address where
	// nothing listens.
	ctDown bool
	// ctStalled points it at an address that accepts connections and
	// never answers: every call lasts until its deadline.
	ctStalled bool
	// paused pauses the queue, so tasks stay QUEUED in Cloud Tasks.
	paused bool
	// config edits the handler configuration.
	config func(*Config)
	// workers edits the workers (render, ingest) before they are checked.
	workers func(enqueue.Workers)
	// store passes options to the store (a dead endpoint).
	store []store.Option
	// logs, when set, receives the JSON lines (INFO and above) of both the
	// handler and the enqueuer.
	logs io.Writer
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return logs.New(os.Stderr, slog.LevelDebug)
	}
	return logs.New(io.Discard, slog.LevelInfo)
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), project: emulatortest.ProjectID(t), delivered: make(chan struct{}, 1), logs: o.logs}
	var err error
	e.st, err = store.New(e.ctx, e.project, o.store...)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	t.Cleanup(func() { _ = e.st.Close() })

	e.ct = cloudtasks.NewServer(cloudtasks.Options{})
	e.ctAddr, err = e.ct.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("cloud tasks emulator: %v", err)
	}
	t.Cleanup(e.ct.Stop)
	e.tasks = newTasksClient(t, e.ctAddr)
	q, err := e.tasks.CreateQueue(e.ctx, &ctpb.CreateQueueRequest{Parent: ctLocation,
		Queue: &ctpb.Queue{Name: ctLocation + "/queues/servo-test"}})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	e.queue = q.Name
	if o.paused {
		if _, err := e.tasks.PauseQueue(e.ctx, &ctpb.PauseQueueRequest{Name: e.queue}); err != nil {
			t.Fatalf("PauseQueue: %v", err)
		}
	}

	e.worker = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.deliveries = append(e.deliveries, delivery{header: r.Header.Clone(), body: body, at: time.Now()})
		e.mu.Unlock()
		select {
		case e.delivered <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(e.worker.Close)

	e.keys, _, err = auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatalf("GenerateKeyRing: %v", err)
	}
	e.workers = enqueue.Workers{
		"render": {URL: e.worker.URL + "/run", Queue: e.queue, ServiceAccount: workerSA},
		"ingest": {URL: e.worker.URL + "/ingest", Queue: e.queue, ServiceAccount: workerSA},
	}
	if o.workers != nil {
		o.workers(e.workers)
	}
	if err := e.workers.Validate(true); err != nil {
		t.Fatalf("workers: %v", err)
	}
	client := e.tasks
	switch {
	case o.ctDown:
		client = newTasksClient(t, servotest.DeadAddr(t))
	case o.ctStalled:
		client = newTasksClient(t, stalledAddr(t))
	}
	e.enq = e.newEnqueuer(client)
	cfg := Config{Store: e.st, Enqueuer: e.enq, Logger: e.logger(), MinTimer: task.MinTimerLocal}
	if o.config != nil {
		o.config(&cfg)
	}
	h, err := newHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	e.api = httptest.NewServer(e.h)
	t.Cleanup(e.api.Close)
	return e
}

// logger is the logger of the env's components: to envOptions.logs when
// set, else testLogger's.
func (e *env) logger() *slog.Logger {
	if e.logs != nil {
		return logs.New(e.logs, slog.LevelInfo)
	}
	return testLogger(e.t)
}

func (e *env) newEnqueuer(client *cloudtasksapi.Client) *enqueue.Enqueuer {
	e.t.Helper()
	enq, err := enqueue.New(enqueue.Config{Store: e.st, Tasks: client, Keys: e.keys, Workers: e.workers,
		CallbackBaseURL: "http://127.0.0.1:1/callbacks", Logger: e.logger()})
	if err != nil {
		e.t.Fatalf("enqueue.New: %v", err)
	}
	return enq
}

func newTasksClient(t testing.TB, addr string) *cloudtasksapi.Client {
	t.Helper()
	c, err := cloudtasksapi.NewClient(context.Background(), cloudtasks.ClientOptions(addr)...)
	if err != nil {
		t.Fatalf("cloud tasks client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// stalledAddr returns a loopback address that accepts connections and
// never reads or writes on them, until the test ends.
func stalledAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// deadStore is a store option pointing the Firestore client at nothing.
func deadStore(t testing.TB) store.Option {
	return store.WithClientOptions(option.WithEndpoint(servotest.DeadAddr(t)))
}

// response is an API answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r response) err(t testing.TB) api.Error {
	t.Helper()
	var e api.Error
	r.decode(t, &e)
	return e
}

// do sends a request to the API; body is marshalled unless it is a string
// or []byte. contentType "" means application/json when there is a body.
func (e *env) do(method, path string, body any, contentType string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.api.URL+path, rd)
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	if rd != nil {
		if contentType == "" {
			contentType = "application/json"
		}
	}
	if contentType != "" && contentType != "-" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// validSubmit returns a minimal valid submit body as a map, to edit.
func validSubmit(tenant string) map[string]any {
	return map[string]any{
		"tenantId": tenant, "workspaceId": "ws-1", "taskKey": "raw.events/2030-01-15", "worker": "render",
		"payload": map[string]any{"partition": 5},
	}
}

// submit posts body and expects want, returning the answer.
func (e *env) submit(body any, want int) api.SubmitResponse {
	e.t.Helper()
	r := e.do("POST", "/v1/tasks", body, "")
	if r.status != want {
		e.t.Fatalf("submit: status %d, want %d: %s", r.status, want, r.body)
	}
	var sr api.SubmitResponse
	r.decode(e.t, &sr)
	return sr
}

// getTask reads a task through the API.
func (e *env) getTask(id string) api.Task {
	e.t.Helper()
	r := e.do("GET", "/v1/tasks/"+id, nil, "")
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", id, r.status, r.body)
	}
	var v api.Task
	r.decode(e.t, &v)
	return v
}

// storedTask reads a task from the store.
func (e *env) storedTask(id string) task.Task {
	e.t.Helper()
	t, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("store.Get(%s): %v", id, err)
	}
	return t
}

// waitDeliveries waits until the worker got at least n requests.
func (e *env) waitDeliveries(n int) []delivery {
	e.t.Helper()
	deadline := time.After(waitFor)
	for {
		e.mu.Lock()
		got := append([]delivery(nil), e.deliveries...)
		e.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-e.delivered:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("worker got %d deliveries, want %d", len(got), n)
		}
	}
}

// cloudTask returns the Cloud Task of t's current attempt, nil if gone.
func (e *env) cloudTask(t *task.Task) *ctpb.Task {
	e.t.Helper()
	ct, err := e.tasks.GetTask(e.ctx, &ctpb.GetTaskRequest{Name: enqueue.TaskName(e.queue, t)})
	if err != nil {
		return nil
	}
	return ct
}

// tenantTasks lists every task of a tenant from the store.
func (e *env) tenantTasks(tenant string) []task.Task {
	e.t.Helper()
	var all []task.Task
	page := ""
	for {
		ts, next, err := e.st.List(e.ctx, store.ListFilter{TenantID: tenant, PageSize: 500, PageToken: page})
		if err != nil {
			e.t.Fatalf("List: %v", err)
		}
		all = append(all, ts...)
		if next == "" {
			return all
		}
		page = next
	}
}

// start applies a worker's `started` to the task (as the callbacks would).
func (e *env) start(id string, attempt int) task.Task {
	e.t.Helper()
	r, err := e.st.Apply(e.ctx, id, task.Event{Kind: task.EventStarted, Attempt: attempt, Now: e.h.cfg.Now().UTC(), WorkerID: "worker-1"})
	if err != nil || r.Rejection != nil {
		e.t.Fatalf("start %s: %v %v", id, err, r.Rejection)
	}
	return r.Task
}

// complete applies a worker's `completed` with outcome o.
func (e *env) complete(id string, attempt int, o api.Outcome) task.Task {
	e.t.Helper()
	c := &api.CompletedRequest{Attempt: attempt, WorkerID: "worker-1", Outcome: o}
	if o == api.OutcomeFailed {
		c.Error = &api.ErrorInfo{Category: api.CategoryConfiguration, Message: "bad config"}
	}
	r, err := e.st.Apply(e.ctx, id, task.Event{Kind: task.EventCompleted, Attempt: attempt, Now: e.h.cfg.Now().UTC(), WorkerID: "worker-1", Completed: c})
	if err != nil || r.Rejection != nil {
		e.t.Fatalf("complete %s: %v %v", id, err, r.Rejection)
	}
	return r.Task
}
