package devstack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/store"
)

func withLog(w io.Writer) func(*devstack.Options) { return func(o *devstack.Options) { o.Log = w } }

func withRPCCounter(rc *store.RPCCounter) func(*devstack.Options) {
	return func(o *devstack.Options) { o.StoreOptions = append(o.StoreOptions, store.WithRPCCounter(rc)) }
}

// asleep waits until the stack's sweeper sleeps until at least by, and
// returns its rest.
func asleep(t testing.TB, s *devstack.Stack, by time.Time) devstack.RestStatus {
	t.Helper()
	return servotest.WaitFor(t, fmt.Sprintf("the sweeper asleep until %s or later", by.Format(time.StampMilli)), s.SweeperRest,
		func(r devstack.RestStatus) bool { return !r.Until.IsZero() && !r.Until.Before(by) }, nil)
}

// idleRPCs sleeps for d and returns the Firestore RPCs counted meanwhile.
func idleRPCs(rc *store.RPCCounter, d time.Duration) map[string]int {
	rc.Reset()
	time.Sleep(d)
	return rc.Counts()
}

// TestIdleStackSendsFirestoreNothing: with nothing due, the local sweeper
// (here at a 100 ms cadence) sleeps until its fallback period is over: no
// Firestore RPC at all over seconds of idling, where it used to query
// every duty ten times a second.
func TestIdleStackSendsFirestoreNothing(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := start(t, withRPCCounter(rc))
	r := asleep(t, e.stack, time.Now().Add(devstack.RestFallback/2))
	if n := idleRPCs(rc, 5*time.Second); len(n) > 0 {
		t.Errorf("an idle stack sent Firestore %v in 5 s", n)
	}
	if now := e.stack.SweeperRest(); now.Sleeps != r.Sleeps || now.Until.IsZero() {
		t.Errorf("the sweeper woke while idle: %+v, then %+v", r, now)
	}
}

// TestTimersFireWhileTheSweeperRests: the sleeping sweeper wakes on a
// write (a submit, a started callback) and at the due times the store
// holds, and sweeps them on time: a lease that expires (the zombie
// retried), a deadline, a schedule's fires. Between them it sleeps and
// sends Firestore nothing.
func TestTimersFireWhileTheSweeperRests(t *testing.T) {
	t.Parallel()
	rc := store.NewRPCCounter()
	e := start(t, withRPCCounter(rc))
	asleep(t, e.stack, time.Now().Add(devstack.RestFallback/2))
	// A late sweep is seconds late at most (a loaded machine), against the
	// fallback period's minute when a wake-up is missed.
	const late = 3 * time.Second

	// 1. A lease. The submit and the started callback wake the sweeper; the lease
	// (2 s) is then its next due time: it sleeps until then.
	r := e.submit(map[string]any{"heartbeatTimeoutMs": 2000})
	d := e.worker.next(t)
	st, res := e.callback(d.env, "started", started(d.env, "w1"))
	expect(t, "started", st, res, 200, "", api.Continue)
	startedAt := *e.Task(r.TaskID).Attempts[0].StartedAt
	expiry := startedAt.Add(2 * time.Second)
	asleep(t, e.stack, expiry.Add(-200*time.Millisecond))
	// Asleep while an attempt holds a lease, it only renews the pulse's
	// promise every second: no query.
	idle := time.Until(expiry) - 500*time.Millisecond
	if n := idleRPCs(rc, idle); len(n) > 1 || n["Commit"] > int(idle/time.Second)+1 {
		t.Errorf("the sweeper, asleep until the lease's expiry, sent Firestore %v in %v", n, idle)
	}
	// The zombie is retried: attempt 2 is delivered.
	d2 := e.worker.next(t)
	if d2.env.Attempt != 2 {
		t.Fatalf("delivery after the lease expired: attempt %d, want 2", d2.env.Attempt)
	}
	a := e.Task(r.TaskID).Attempts[0]
	if a.CompletedAt == nil {
		t.Fatalf("attempt 1 not ended: %+v", a)
	}
	if lag := a.CompletedAt.Sub(expiry); lag < 0 || lag > late {
		t.Errorf("the lease expiring at %s was swept at %s (%v late)", expiry.Format(time.StampMilli), a.CompletedAt.Format(time.StampMilli), lag)
	}
	st, res = e.callback(d2.env, "started", started(d2.env, "w2"))
	expect(t, "started", st, res, 200, "", api.Continue)
	st, res = e.callback(d2.env, "completed", succeeded(d2.env, "w2"))
	expect(t, "completed", st, res, 200, "", api.Committed)

	// 2. A deadline.
	asleep(t, e.stack, time.Now().Add(devstack.RestFallback/2))
	// Asleep for its fallback period: the submit must wake it.
	deadline := time.Now().Add(time.Second).UTC()
	r = e.submit(map[string]any{"taskKey": "deadline", "deadline": deadline.Format(time.RFC3339Nano)})
	e.worker.next(t) // delivered; never started
	tk := e.WaitFor(r.TaskID, "ended by its deadline", func(tk api.Task) bool { return tk.State.Terminal() })
	if lag := tk.EndedAt.Sub(deadline); lag < 0 || lag > late {
		t.Errorf("the deadline at %s was swept at %s (%v late)", deadline.Format(time.StampMilli), tk.EndedAt.Format(time.StampMilli), lag)
	}

	// 3. A schedule's fires.
	asleep(t, e.stack, time.Now().Add(devstack.RestFallback/2))
	first := time.Now().UTC().Add(2 * time.Second).Truncate(time.Second)
	body := map[string]any{"scheduleId": "every-2s", "tenantId": "acme", "workspaceId": "ws", "overlap": api.OverlapAllowAll,
		"task": map[string]any{"taskKey": "fire", "worker": "scripted", "payload": map[string]any{"n": 1}},
		"spec": map[string]any{"everyMs": 2000, "startAt": first.Format(time.RFC3339)}}
	if status, out := e.Do("POST", "/v1/schedules", body); status != http.StatusCreated {
		t.Fatalf("create schedule: %d %s", status, out)
	}
	// Between two fires the sweeper sleeps until the next.
	asleep(t, e.stack, first.Add(-200*time.Millisecond))
	var sc api.Schedule
	servotest.WaitFor(t, "three fires", func() int {
		_, out := e.Do("GET", "/v1/schedules/every-2s?tenantId=acme", nil)
		sc = api.Schedule{}
		json.Unmarshal(out, &sc)
		return len(sc.RecentFires)
	}, func(n int) bool { return n >= 3 }, nil)
	for _, f := range sc.RecentFires {
		if f.TaskID == "" {
			t.Errorf("fire at %s made no task: %+v", f.At, f)
			continue
		}
		tk := taskOf(t, e, f.TaskID)
		if lag := tk.CreatedAt.Sub(f.At); lag < 0 || lag > late {
			t.Errorf("the fire due at %s made its task at %s (%v late)", f.At.Format(time.StampMilli), tk.CreatedAt.Format(time.StampMilli), lag)
		}
	}
	if status, out := e.Do("DELETE", "/v1/schedules/every-2s?tenantId=acme", nil); status/100 != 2 {
		t.Fatalf("delete schedule: %d %s", status, out)
	}
}

// taskOf waits until the task id exists (a schedule's fire makes it right
// after the fire is recorded) and returns it.
func taskOf(t testing.TB, e *env, id string) api.Task {
	t.Helper()
	var tk api.Task
	servotest.Until(t, "task "+id, func() bool {
		status, out := e.Do("GET", "/v1/tasks/"+id, nil)
		return status == http.StatusOK && json.Unmarshal(out, &tk) == nil
	})
	return tk
}
