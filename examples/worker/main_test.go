package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ctpb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// End to end: Servo's enqueuer puts the envelope on the Cloud Tasks
// emulator, which pushes it to this worker over HTTP; the worker reports to
// the real callbacks over HTTP; the callbacks enqueue the retry, which
// Cloud Tasks pushes again; the retry resumes from the checkpoint.

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }

type e2e struct {
	store *store.Store
	enq   *enqueue.Enqueuer
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	ctx := context.Background()
	project := emulatortest.ProjectID(t)
	s, err := store.New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	keys, _, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	ct := cloudtasks.NewServer(cloudtasks.Options{})
	addr, err := ct.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Stop)
	client, err := cloudtasks.NewClient(ctx, cloudtasks.ClientOptions(addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	parent := "projects/servo-e2e/locations/us-central1"
	q, err := client.CreateQueue(ctx, &ctpb.CreateQueueRequest{Parent: parent, Queue: &ctpb.Queue{
		Name: parent + "/queues/partitions",
		RetryConfig: &ctpb.RetryConfig{MaxAttempts: 5, MinBackoff: durationpb.New(100 * time.Millisecond),
			MaxBackoff: durationpb.New(time.Second)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	wsrv := httptest.NewServer(newMux(worker.WithLogger(log), worker.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond)))
	t.Cleanup(wsrv.Close)
	workers, err := enqueue.ParseWorkers([]byte(`{"partitions":{"url":"`+wsrv.URL+`/","queue":"`+q.Name+`"}}`), true)
	if err != nil {
		t.Fatal(err)
	}
	// The callbacks need the enqueuer (for retries) and the enqueuer the
	// callbacks' URL: serve a handler that is set once both exist.
	var cb http.Handler
	csrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cb.ServeHTTP(w, r) }))
	t.Cleanup(csrv.Close)
	enq, err := enqueue.New(enqueue.Config{Store: s, Tasks: client, Keys: keys, Workers: workers, CallbackBaseURL: csrv.URL, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if cb, err = callbacks.NewHandler(callbacks.Config{Store: s, Keys: keys, Enqueuer: enq, Logger: log}); err != nil {
		t.Fatal(err)
	}
	return &e2e{store: s, enq: enq}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (e *e2e) submit(t *testing.T, payload string) string {
	t.Helper()
	now := time.Now().UTC()
	tk, _, err := e.store.Create(context.Background(), task.Task{
		ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws", TaskKey: "demo",
		Worker: "partitions", Payload: json.RawMessage(payload),
		Timing: api.Timing{HeartbeatIntervalMs: 200, HeartbeatTimeoutMs: 10_000, CancelGracePeriodMs: 10_000},
		Retry:  api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 100, MaxBackoffMs: 200},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.enq.Enqueue(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return tk.ID
}

func (e *e2e) waitTerminal(t *testing.T, id string) task.Task {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		tk, err := e.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State.Terminal() {
			return tk
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("task %s never ended", id)
	return task.Task{}
}

func TestEndToEndRetryResumesFromCheckpoint(t *testing.T) {
	e := newE2E(t)
	id := e.submit(t, `{"partitions":4,"partitionMs":50,"failAttempts":1}`)
	got := e.waitTerminal(t, id)
	if got.State != api.Succeeded || len(got.Attempts) != 2 {
		t.Fatalf("task %s/%s with %d attempts", got.State, got.Reason, len(got.Attempts))
	}
	a1, a2 := got.Attempts[0], got.Attempts[1]
	if a1.Outcome != api.OutcomeFailed || a1.Error == nil || a1.Error.Category != api.CategoryInfrastructure ||
		string(a1.Checkpoint) != `{"nextPartition":2}` {
		t.Fatalf("attempt 1: %+v", a1)
	}
	var out partitions.Output
	if err := json.Unmarshal(a2.Output, &out); err != nil {
		t.Fatal(err)
	}
	// Progress is as of the last heartbeat (`completed` carries none).
	if a2.Outcome != api.OutcomeSucceeded || out.ResumedFrom != 2 || out.Processed != 2 || out.Attempt != 2 ||
		a2.ProgressPct == nil || *a2.ProgressPct < 50 {
		t.Fatalf("attempt 2: %+v output %+v", a2, out)
	}
	if out.Digest != digestOfWhole(t) {
		t.Fatalf("digest %s differs from a run in one attempt", out.Digest)
	}
}

func TestEndToEndInvalidPayloadIsNotRetried(t *testing.T) {
	e := newE2E(t)
	got := e.waitTerminal(t, e.submit(t, `{"partitions":3,"invalid":true}`))
	if got.State != api.Failed || got.Reason != api.ReasonNonRetryable || len(got.Attempts) != 1 ||
		got.Attempts[0].Error == nil || got.Attempts[0].Error.Category != api.CategoryDataQuality {
		t.Fatalf("task %s/%s attempts %+v", got.State, got.Reason, got.Attempts)
	}
}

// digestOfWhole is the digest of the same work done in one attempt.
func digestOfWhole(t *testing.T) string {
	out, err := partitions.Process(context.Background(), worker.NewTestTask(api.Envelope{Attempt: 1, Payload: json.RawMessage(`{"partitions":4}`)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	return out.(partitions.Output).Digest
}
