package zombie_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// Short timers for the integration tests (the local minimum is 100 ms).
var shortTiming = api.Timing{HeartbeatIntervalMs: 100, HeartbeatTimeoutMs: 300, CancelGracePeriodMs: 300, StartTimeoutMs: 300}

// Cloud Tasks queues live in a fixed project name (enqueue validates it);
// every test has its own emulator, so they never meet.
const queueParent = "projects/servo-test/locations/us-central1"

// delivery is one request Cloud Tasks pushed to the test worker.
type delivery struct {
	TaskName string
	TaskID   string
	Attempt  int
}

// worker is an HTTP endpoint that records Cloud Tasks deliveries and
// answers 200 without ever calling back (a worker that never starts).
type worker struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []delivery
}

func newWorker(t *testing.T) *worker {
	w := &worker{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var env api.Envelope
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.got = append(w.got, delivery{TaskName: r.Header.Get(cloudtasks.HeaderTaskName), TaskID: env.TaskID, Attempt: env.Attempt})
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// of returns the deliveries of one task.
func (w *worker) of(id string) []delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []delivery
	for _, d := range w.got {
		if d.TaskID == id {
			out = append(out, d)
		}
	}
	return out
}

// env is one test's world: its own Firestore project, a Cloud Tasks
// emulator with one queue, a recording worker and the real enqueuer.
type env struct {
	t       *testing.T
	ctx     context.Context
	project string
	st      *store.Store
	rpc     *store.RPCCounter
	ct      *cloudtasksapi.Client
	queue   string
	worker  *worker
	enq     *enqueue.Enqueuer
	rec     *recorder // wraps enq
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, project: emulatortest.ProjectID(t), rpc: store.NewRPCCounter()}
	var err error
	if e.st, err = store.New(ctx, e.project, store.WithRPCCounter(e.rpc)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	srv := cloudtasks.NewServer(cloudtasks.Options{})
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if e.ct, err = cloudtasksapi.NewClient(ctx, cloudtasks.ClientOptions(addr)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ct.Close() })
	q, err := e.ct.CreateQueue(ctx, &ctpb.CreateQueueRequest{Parent: queueParent, Queue: &ctpb.Queue{Name: queueParent + "/queues/work"}})
	if err != nil {
		t.Fatal(err)
	}
	e.queue = q.Name
	e.worker = newWorker(t)
	workers, err := enqueue.ParseWorkers([]byte(fmt.Sprintf(`{"w":{"url":%q,"queue":%q}}`, e.worker.srv.URL+"/run", e.queue)), true)
	if err != nil {
		t.Fatal(err)
	}
	keys, _, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	e.enq, err = enqueue.New(enqueue.Config{Store: e.st, Tasks: e.ct, Keys: keys, Workers: workers, CallbackBaseURL: "http://127.0.0.1:1/cb", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.rec = &recorder{next: e.enq}
	return e
}

// sweeper returns a sweeper on the env's store and recording enqueuer,
// with jitter 0 (retries are due at once).
func (e *env) sweeper(mod func(*zombie.Config)) *zombie.Sweeper {
	e.t.Helper()
	cfg := zombie.Config{Store: e.st, Enqueuer: e.rec, Holder: e.enq, Jitter: func() float64 { return 0 }, Logger: quiet, MaxRedrives: 2}
	if mod != nil {
		mod(&cfg)
	}
	sw, err := zombie.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return sw
}

// spec describes a task to create.
type spec struct {
	maxAttempts int
	timing      api.Timing
	deadline    time.Duration // from now; 0 for none
}

// create stores a PENDING task.
func (e *env) create(s spec) task.Task {
	e.t.Helper()
	now := time.Now().UTC()
	tm := s.timing
	if tm == (api.Timing{}) {
		tm = shortTiming
	}
	tk := task.Task{
		ID: task.NewTaskID(now), RunID: "run_z", TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
		Payload: json.RawMessage(`{"n":1}`), Timing: tm,
		Retry: api.RetryPolicy{MaxAttempts: max(s.maxAttempts, 1), InitialBackoffMs: 100, MaxBackoffMs: 100},
	}
	if s.deadline > 0 {
		d := now.Add(s.deadline)
		tk.Deadline = &d
	}
	created, _, err := e.st.Create(e.ctx, tk, now)
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// apply applies ev (at the current time unless set) and fails on refusal.
func (e *env) apply(id string, ev task.Event) task.Result {
	e.t.Helper()
	if ev.Now.IsZero() {
		ev.Now = time.Now().UTC()
	}
	if ev.Attempt == 0 && ev.Kind != task.EventCancel {
		ev.Attempt = 1
	}
	r, err := e.st.Apply(e.ctx, id, ev)
	if err != nil {
		e.t.Fatalf("apply %s: %v", ev.Kind, err)
	}
	if r.Rejection != nil || !r.Write {
		e.t.Fatalf("apply %s refused: %+v write=%v", ev.Kind, r.Rejection, r.Write)
	}
	return r
}

// running creates a task and starts attempt 1 as worker w1; with enqueue
// the attempt first goes through the real enqueuer and Cloud Tasks.
func (e *env) running(s spec, viaCloudTasks bool) task.Task {
	e.t.Helper()
	tk := e.create(s)
	if viaCloudTasks {
		if err := e.enq.Enqueue(e.ctx, tk); err != nil {
			e.t.Fatal(err)
		}
	} else {
		e.apply(tk.ID, task.Event{Kind: task.EventEnqueued})
	}
	return e.apply(tk.ID, task.Event{Kind: task.EventStarted, WorkerID: "w1"}).Task
}

// get reads a task with its attempts.
func (e *env) get(id string) task.Task {
	e.t.Helper()
	t, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// outbox returns a task's outbox entries in transition order.
func (e *env) outbox(id string) []store.OutboxEntry {
	e.t.Helper()
	ob, err := e.st.OutboxEntries(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return ob
}

// sweep runs one pass and fails on error.
func (e *env) sweep(sw *zombie.Sweeper) zombie.Stats {
	e.t.Helper()
	st, err := sw.Sweep(e.ctx)
	if err != nil {
		e.t.Fatalf("sweep: %v (stats %+v)", err, st)
	}
	return st
}

// waitPast sleeps until the time at has passed (the sweeper's clock is
// the wall clock), plus a little so the due query sees it.
func waitPast(t *testing.T, at *time.Time) {
	t.Helper()
	if at == nil {
		t.Fatal("waitPast: no time set")
	}
	if d := time.Until(*at); d > -5*time.Millisecond {
		time.Sleep(d + 5*time.Millisecond)
	}
}

// stuckAt is when tk's dispatch counts as stuck: the end of its start
// timeout (its dispatch checks before it are delivery probes, which never
// re-drive).
func stuckAt(tk task.Task) *time.Time {
	if tk.StartTimeoutAt != nil {
		return tk.StartTimeoutAt
	}
	return tk.DispatchCheckAt
}

// eventually polls cond until it holds or 15 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cloudTask returns the queue's Cloud Task for (id, attempt), or nil.
func (e *env) cloudTask(id string, attempt int) *ctpb.Task {
	e.t.Helper()
	ct, err := e.ct.GetTask(e.ctx, &ctpb.GetTaskRequest{Name: e.queue + "/tasks/" + task.DispatchName(id, attempt)})
	if err != nil {
		return nil
	}
	return ct
}

// failingFollowUps fails the first n follow-ups, then forwards.
type failingFollowUps struct {
	n    atomic.Int32
	next zombie.Enqueuer
}

func (f *failingFollowUps) FollowUp(ctx context.Context, r task.Result) error {
	if f.n.Add(-1) >= 0 {
		return errors.New("cloud tasks unavailable (injected)")
	}
	return f.next.FollowUp(ctx, r)
}
