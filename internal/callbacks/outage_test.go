package callbacks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/zombie"
)

type noFollowUp struct{}

func (noFollowUp) FollowUp(context.Context, task.Result) error { return nil }

// Servo's own outage never makes a healthy worker a zombie (issue 33):
// Firestore (its own emulator, so that freezing it disturbs no other
// test) freezes for 6 s, three times the 2 s lease, while a worker keeps
// heartbeating every 500 ms (each answered 503 after the 2 s store
// timeout) and a real sweeper sweeps every 500 ms. After the thaw the
// attempt is still the worker's: its heartbeats are accepted, and its
// `completed` is COMMITTED with the task SUCCEEDED on attempt 1.
func TestWorkerKeepsAttemptThroughStoreOutage(t *testing.T) {
	emulatortest.FirestoreHost(t)
	ctx := context.Background()
	fs, err := emulator.Start(ctx, emulator.Firestore)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Thaw(); fs.Stop() })
	st, err := store.New(ctx, emulatortest.ProjectID(t), store.WithClientOptions(option.WithEndpoint(fs.Host)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys, _, err := auth.GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	log := &servotest.Buffer{}
	srv := httptest.NewServer(newHandler(t, callbacks.Config{Store: st, Keys: keys, Logger: logs.New(log, nil),
		StoreTimeout: 2 * time.Second, RetryAfter: time.Second}))
	t.Cleanup(srv.Close)
	sw, err := zombie.New(zombie.Config{Store: st, Enqueuer: noFollowUp{}, Every: 500 * time.Millisecond, Logger: logs.New(log, nil)})
	if err != nil {
		t.Fatal(err)
	}
	sweepCtx, stopSweeping := context.WithCancel(ctx)
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		for sweepCtx.Err() == nil {
			_, _ = sw.Sweep(sweepCtx)
			select {
			case <-sweepCtx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { stopSweeping(); sweeps.Wait() })

	now := time.Now().UTC()
	tk := task.Task{ID: task.NewTaskID(now), RunID: task.NewRunID(now), TenantID: "acme", WorkspaceID: "ws", TaskKey: "k", Worker: "w",
		Timing: api.Timing{HeartbeatIntervalMs: 500, HeartbeatTimeoutMs: 2000}, Retry: api.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 100, BackoffCoefficient: 2, MaxBackoffMs: 100}}
	if tk, _, err = st.Create(ctx, tk, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, tk.ID, task.Event{Kind: task.EventEnqueued, Attempt: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := keys.Sign(scopeOf(tk, 1), time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	// The store timeout bounds every answer, whatever Firestore does: the
	// slowest is kept (a bound with a wide margin, not a speed figure).
	var slowest atomic.Int64
	// send posts until the answer is not RETRY (the SDKs' rule).
	send := func(kind callbacks.Kind, body any) reply {
		for {
			began := time.Now()
			rp, err := httpPost(client, srv.URL, kind, tk.ID, tok, body)
			if took := int64(time.Since(began)); took > slowest.Load() {
				slowest.Store(took)
			}
			if err == nil && rp.resp.Disposition != api.Retry {
				return rp
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if rp := send(callbacks.KindStarted, startedReq(1, "w1")); rp.status != http.StatusOK {
		t.Fatalf("started: %d %s", rp.status, rp.raw)
	}

	var cancelled atomic.Value // the first CANCELLED answer, if any
	beat, stopBeating := context.WithCancel(ctx)
	var beats sync.WaitGroup
	beats.Go(func() {
		for beat.Err() == nil {
			rp := send(callbacks.KindHeartbeat, heartbeatReq(1, "w1"))
			if rp.resp.Disposition == api.Cancel {
				cancelled.CompareAndSwap(nil, rp.raw)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	time.Sleep(time.Second)
	if err := fs.Freeze(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if err := fs.Thaw(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // heartbeats and sweeps after the thaw
	stopBeating()
	beats.Wait()
	if c := cancelled.Load(); c != nil {
		t.Fatalf("the worker lost its attempt to the outage: %s", c)
	}
	if took := time.Duration(slowest.Load()); took > 2*time.Second+3*time.Second {
		t.Errorf("an answer took %v with a 2 s store timeout", took)
	}
	rp := send(callbacks.KindCompleted, completedReq(1, "w1", api.OutcomeSucceeded))
	if rp.status != http.StatusOK || rp.resp.Disposition != api.Committed {
		t.Fatalf("completed after the outage: %d %s", rp.status, rp.raw)
	}
	got, err := st.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.Succeeded || got.Attempt != 1 || got.Attempts[0].Outcome != api.OutcomeSucceeded {
		t.Fatalf("task %s attempt %d (%+v), want SUCCEEDED on attempt 1", got.State, got.Attempt, got.Attempts)
	}
}
