package callbacks_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/task"
)

// TestRetryScheduledBeyondTheTokenLifetimeStarts: a retry whose backoff
// (1 h 48 m, of a 2 h maximum) is longer than a token lives (1 h) is
// enqueued at once with Cloud Tasks' schedule time at its NotBefore; when
// Cloud Tasks delivers it, its `started` is accepted and the attempt runs
// to SUCCEEDED. Time is one fake clock shared by the Cloud Tasks emulator,
// the enqueuer and the callbacks, so the test moves it instead of sleeping;
// Firestore, Cloud Tasks (the emulator really pushes the envelope), the
// enqueuer and the callbacks over HTTP are the real ones.
func TestRetryScheduledBeyondTheTokenLifetimeStarts(t *testing.T) {
	e := newEnv(t, nil)
	ctx := e.ctx
	clock := cloudtasks.NewFakeClock(time.Now().UTC().Truncate(time.Millisecond))
	e.clock.Set(clock.Now())

	path := newRetryPath(t, e, "later", cloudtasks.Options{Clock: clock}, clock.Now)
	enq, envelopes := path.enq, path.envelopes
	client := newClient(2)

	const backoff = 2 * time.Hour
	if backoff <= task.DefaultTokenTTL {
		t.Fatal("the backoff must be longer than a token lives")
	}
	tk := e.create(func(tk *task.Task) {
		tk.Worker = "later"
		tk.Retry = api.RetryPolicy{MaxAttempts: 2, InitialBackoffMs: backoff.Milliseconds(), BackoffCoefficient: 2, MaxBackoffMs: backoff.Milliseconds()}
	})
	next := func(attempt int) api.Envelope {
		t.Helper()
		select {
		case env := <-envelopes:
			if env.TaskID != tk.ID || env.Attempt != attempt {
				t.Fatalf("envelope %+v, want attempt %d", env, attempt)
			}
			return env
		case <-time.After(15 * time.Second):
			t.Fatalf("no envelope for attempt %d", attempt)
		}
		panic("unreachable")
	}
	post := func(env api.Envelope, kind callbacks.Kind, body any) reply {
		t.Helper()
		rp, err := httpPost(client, env.CallbackBaseURL, kind, env.TaskID, env.TaskToken, body)
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}

	// Attempt 1 starts and fails retryably; the retry draws 0.9 of the
	// 2 h cap (the jitter is fixed here, so the backoff surely exceeds the
	// token's hour) and is enqueued for its NotBefore.
	if err := enq.Enqueue(ctx, tk); err != nil {
		t.Fatal(err)
	}
	env1 := next(1)
	if rp := post(env1, callbacks.KindStarted, startedReq(1, "pod-a")); rp.status != http.StatusOK {
		t.Fatalf("attempt 1 started: %d %s", rp.status, rp.raw)
	}
	c := failedReq(1, "pod-a", api.CategoryInfrastructure)
	r, err := e.st.Apply(ctx, tk.ID, task.Event{Kind: task.EventCompleted, Attempt: 1, WorkerID: "pod-a", Completed: &c, Now: clock.Now(), Jitter: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if !r.RetryScheduled || r.Task.NotBefore == nil || r.Task.NotBefore.Sub(clock.Now()) <= task.DefaultTokenTTL {
		t.Fatalf("retry not scheduled beyond the token's lifetime: %+v", r.Task.NotBefore)
	}
	if err := enq.FollowUp(ctx, r); err != nil {
		t.Fatal(err)
	}
	select {
	case env := <-envelopes:
		t.Fatalf("attempt %d delivered before its NotBefore", env.Attempt)
	case <-time.After(200 * time.Millisecond):
	}

	// Cloud Tasks delivers attempt 2 at its schedule time.
	clock.AdvanceTo(r.Task.NotBefore.Add(time.Second))
	env2 := next(2)
	if rp := post(env2, callbacks.KindStarted, startedReq(2, "pod-b")); rp.status != http.StatusOK {
		t.Fatalf("attempt 2 started %v after it was enqueued: %d %s", clock.Now().Sub(e.clock.Now()), rp.status, rp.raw)
	}
	if rp := post(env2, callbacks.KindCompleted, completedReq(2, "pod-b", api.OutcomeSucceeded)); rp.status != http.StatusOK || rp.resp.FinalState != api.Succeeded {
		t.Fatalf("attempt 2 completed: %d %s", rp.status, rp.raw)
	}
	got, err := e.st.Get(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.Succeeded || got.Attempt != 2 || len(got.Attempts) != 2 {
		t.Fatalf("task %s attempt %d with %d attempts", got.State, got.Attempt, len(got.Attempts))
	}
}
