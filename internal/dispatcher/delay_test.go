package dispatcher

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/task"
)

// A delayed start that cannot be is 400 invalid_request naming its field,
// and stores nothing: both fields, an unreadable time, a delay out of
// range, more than a year ahead, a deadline not after the start.
func TestDelayedStartValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	now := time.Now().UTC()
	in := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	for _, c := range []struct {
		name  string
		edit  map[string]any
		field string
	}{
		{"both", map[string]any{"startAt": in(time.Hour), "startDelayMs": 1000}, "startDelayMs"},
		{"unreadable", map[string]any{"startAt": "tomorrow"}, "startAt"},
		{"negative delay", map[string]any{"startDelayMs": -1}, "startDelayMs"},
		{"delay past a year", map[string]any{"startDelayMs": task.MaxStartDelay.Milliseconds() + 1}, "startDelayMs"},
		{"start past a year", map[string]any{"startAt": in(task.MaxStartDelay + time.Hour)}, "startAt"},
		{"deadline before the start", map[string]any{"startAt": in(2 * time.Hour), "deadline": in(time.Hour)}, "deadline"},
		{"deadline at the start", map[string]any{"startAt": in(2 * time.Hour), "deadline": in(2 * time.Hour)}, "deadline"},
	} {
		body := validSubmit("acme")
		for k, v := range c.edit {
			body[k] = v
		}
		r := e.do("POST", "/v1/tasks", body, "")
		if r.status != http.StatusBadRequest || r.err(t).Code != api.CodeInvalidRequest || r.err(t).Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, r.status, r.body, c.field)
		}
	}
	if ts := e.tenantTasks("acme"); len(ts) != 0 {
		t.Fatalf("refused submits stored %d tasks", len(ts))
	}
	// A start already past starts now.
	r := e.submit(map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "k", "worker": "render", "startAt": in(-time.Hour)}, http.StatusCreated)
	if st := e.storedTask(r.TaskID); st.NotBefore != nil || st.EnqueueAt != nil {
		t.Fatalf("a past start is delayed: notBefore %v enqueueAt %v", st.NotBefore, st.EnqueueAt)
	}
}

// A delayed push task is QUEUED with its scheduledAt at once; its Cloud
// Task carries the start as its scheduleTime, so no worker receives it
// before; its start timeout counts from the start; the same delay by
// startDelayMs.
func TestDelayedStartPush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	submitted := time.Now()
	start := submitted.Add(2 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	body := validSubmit("acme")
	body["startAt"] = start.Format(time.RFC3339)
	r := e.submit(body, http.StatusCreated)
	if r.State != api.Queued {
		t.Fatalf("state %s, want QUEUED", r.State)
	}
	v := e.getTask(r.TaskID)
	if v.State != api.Queued || v.ScheduledAt == nil || !v.ScheduledAt.Equal(start) {
		t.Fatalf("GET: %s, scheduledAt %v; want QUEUED at %v", v.State, v.ScheduledAt, start)
	}
	if len(v.Attempts) != 1 || v.Attempts[0].ScheduledAt == nil || !v.Attempts[0].ScheduledAt.Equal(start) {
		t.Fatalf("attempt 1: %+v", v.Attempts)
	}
	st := e.storedTask(r.TaskID)
	if want := start.Add(st.Timing.StartTimeout()); st.StartTimeoutAt == nil || !st.StartTimeoutAt.Equal(want) {
		t.Fatalf("start timeout ends %v, want the start + the start timeout (%v)", st.StartTimeoutAt, want)
	}
	if want := start.Add(task.DeliveryProbe(st.Timing)); st.DispatchCheckAt == nil || !st.DispatchCheckAt.Equal(want) {
		t.Fatalf("dispatch check %v, want the start + the delivery probe (%v)", st.DispatchCheckAt, want)
	}
	ct := e.cloudTask(&st)
	if ct == nil || !ct.GetScheduleTime().AsTime().Equal(start) {
		t.Fatalf("Cloud Task %v, want one scheduled at %v", ct, start)
	}
	got := e.waitDeliveries(1)
	if got[0].at.Before(start) {
		t.Fatalf("delivered at %v, before the start %v", got[0].at, start)
	}

	r2 := e.submit(map[string]any{"tenantId": "acme", "workspaceId": "ws", "taskKey": "k2", "worker": "render", "startDelayMs": 3600_000}, http.StatusCreated)
	st2 := e.storedTask(r2.TaskID)
	if st2.NotBefore == nil || st2.NotBefore.Sub(submitted) < time.Hour || st2.NotBefore.Sub(submitted) > time.Hour+time.Minute {
		t.Fatalf("startDelayMs 1 h: notBefore %v (submitted %v)", st2.NotBefore, submitted)
	}
}

// A start further ahead than Cloud Tasks takes a scheduleTime (30 days;
// here a minute more than EnqueueHorizon) waits in Firestore: QUEUED, no
// Cloud Task; the sweeper's dispatch duty (EventRedrive at EnqueueAt,
// then its follow-up) creates the Cloud Task, scheduled at the start,
// without counting a re-drive. A cancel before
// the start ends it CANCELLED and removes its Cloud Task: no worker call.
func TestDelayedStartBeyondTheHorizon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	start := time.Now().Add(task.EnqueueHorizon + time.Minute).UTC().Truncate(time.Second)
	body := validSubmit("acme")
	body["startAt"] = start.Format(time.RFC3339)
	r := e.submit(body, http.StatusCreated)
	st := e.storedTask(r.TaskID)
	wantEnqueue := start.Add(-task.EnqueueHorizon)
	if st.State != api.Queued || st.EnqueueAt == nil || !st.EnqueueAt.Equal(wantEnqueue) || st.DispatchCheckAt == nil || !st.DispatchCheckAt.Equal(wantEnqueue) {
		t.Fatalf("stored %s, enqueueAt %v, dispatch check %v; want QUEUED, both at %v", st.State, st.EnqueueAt, st.DispatchCheckAt, wantEnqueue)
	}
	if ct := e.cloudTask(&st); ct != nil {
		t.Fatalf("a Cloud Task exists beyond the horizon: %v", ct.GetName())
	}
	// Not due before EnqueueAt: nothing changes.
	if res, err := e.st.Apply(e.ctx, r.TaskID, task.Event{Kind: task.EventRedrive, Attempt: 1, Now: wantEnqueue.Add(-time.Minute), MaxRedrives: 5}); err != nil || res.Write || res.Enqueue {
		t.Fatalf("redrive before EnqueueAt: %+v %v", res, err)
	}
	// The dispatch duty at EnqueueAt.
	res, err := e.st.Apply(e.ctx, r.TaskID, task.Event{Kind: task.EventRedrive, Attempt: 1, Now: wantEnqueue.Add(time.Second), MaxRedrives: 5})
	if err != nil || !res.Enqueue || res.Task.Redrives != 0 || res.Task.EnqueueAt != nil {
		t.Fatalf("redrive at EnqueueAt: enqueue %v redrives %d enqueueAt %v: %v", res.Enqueue, res.Task.Redrives, res.Task.EnqueueAt, err)
	}
	if want := start.Add(res.Task.Timing.StartTimeout()); res.Task.StartTimeoutAt == nil || !res.Task.StartTimeoutAt.Equal(want) {
		t.Fatalf("start timeout after the enqueue ends %v, want %v", res.Task.StartTimeoutAt, want)
	}
	if want := start.Add(task.DeliveryProbe(res.Task.Timing)); !res.Task.DispatchCheckAt.Equal(want) {
		t.Fatalf("dispatch check after the enqueue %v, want the start + the delivery probe (%v)", res.Task.DispatchCheckAt, want)
	}
	if err := e.enq.FollowUp(e.ctx, res); err != nil {
		t.Fatal(err)
	}
	st = e.storedTask(r.TaskID)
	ct := e.cloudTask(&st)
	if ct == nil || !ct.GetScheduleTime().AsTime().Equal(start) {
		t.Fatalf("Cloud Task %v, want one scheduled at %v", ct, start)
	}
	// Cancelled before its start: CANCELLED at once, the Cloud Task gone.
	e.cancelTask(r.TaskID, "not needed", http.StatusOK)
	if v := e.getTask(r.TaskID); v.State != api.Cancelled {
		t.Fatalf("after the cancel: %s", v.State)
	}
	deadline := time.Now().Add(waitFor)
	for e.cloudTask(&st) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled task's Cloud Task is still there")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.mu.Lock()
	n := len(e.deliveries)
	e.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d deliveries", n)
	}
}

// A pull pool holds a message for at most 10 minutes at a time: a start
// further ahead waits in Firestore until PullHorizon before it.
func TestDelayedStartPullHorizon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	now := time.Now()
	for _, c := range []struct {
		delay   time.Duration
		pull    bool
		horizon bool
	}{
		{5 * time.Minute, true, false}, {time.Hour, true, true}, {time.Hour, false, false}, {40 * 24 * time.Hour, false, true},
	} {
		_, enqueueAt, e2 := e.h.start(&api.SubmitRequest{TenantID: "acme", Worker: "render", StartDelayMs: new(c.delay.Milliseconds())},
			enqueue.Worker{Pull: c.pull}, nil, now)
		if e2 != nil || (enqueueAt != nil) != c.horizon {
			t.Errorf("delay %v pull %v: enqueueAt %v (%v), want one: %v", c.delay, c.pull, enqueueAt, e2, c.horizon)
		}
		if enqueueAt != nil {
			h := task.EnqueueHorizon
			if c.pull {
				h = task.PullHorizon
			}
			if want := now.Add(c.delay - h); !enqueueAt.Equal(want) {
				t.Errorf("delay %v pull %v: enqueueAt %v, want %v", c.delay, c.pull, enqueueAt, want)
			}
		}
	}
	if !strings.Contains(task.PullHorizon.String(), "10m") {
		t.Fatalf("PullHorizon %v", task.PullHorizon)
	}
}

// A delayed start of a tenant with a run limit holds no run slot before
// its start: it counts as queued (maxQueued applies) and waits for a slot
// from its start on, so the admit duty hands it one only then, while an
// undelayed task of the tenant takes the free slot at once.
func TestDelayedStartWithQuotas(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, quota.Policy{Tenants: map[string]quota.Limits{"limited": {MaxRunning: 1, MaxQueued: 5}}})
	// The start leaves room for a loaded machine: the sweep below must
	// run before it.
	start := time.Now().Add(6 * time.Second).UTC().Truncate(time.Millisecond)
	body := validSubmit("limited")
	body["startAt"] = start.Format(time.RFC3339Nano)
	r := e.submit(body, http.StatusCreated)
	st := e.storedTask(r.TaskID)
	if st.State != api.Queued || st.Quota == nil || st.Quota.Slot || st.WaitingSince == nil || !st.WaitingSince.Equal(start) || st.EnqueueAt != nil {
		t.Fatalf("stored %s, hold %+v, waiting since %v (start %v), enqueueAt %v", st.State, st.Quota, st.WaitingSince, start, st.EnqueueAt)
	}
	if v := e.getTask(r.TaskID); v.Reason == task.ReasonQuotaWait || v.ScheduledAt == nil {
		t.Fatalf("before the start: reason %s, scheduledAt %v", v.Reason, v.ScheduledAt)
	}
	if u := e.usage("limited"); u.Running != 0 || u.Queued != 1 {
		t.Fatalf("usage before the start: %+v", u)
	}
	// The free slot goes to a task that can run now.
	now := validSubmit("limited")
	now["taskKey"] = "now"
	nr := e.submit(now, http.StatusCreated)
	if ns := e.storedTask(nr.TaskID); ns.Quota == nil || !ns.Quota.Slot {
		t.Fatalf("the undelayed task has no slot: %+v", ns.Quota)
	}
	e.complete(e.start(nr.TaskID, 1).ID, 1, api.OutcomeSucceeded)
	// Before the start the admit duty admits nothing.
	sw := e.sweeper()
	if _, err := sw.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.storedTask(r.TaskID); st.Quota.Slot || st.WaitingSince == nil {
		t.Fatalf("admitted before the start: %+v", st.Quota)
	}
	// After it, the admit duty gives it the slot and it is delivered.
	deadline := time.Now().Add(waitFor)
	for {
		time.Sleep(time.Until(start) + 100*time.Millisecond)
		if _, err := sw.Sweep(e.ctx); err != nil {
			t.Fatal(err)
		}
		if st := e.storedTask(r.TaskID); st.Quota.Slot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not admitted after the start")
		}
	}
	for _, d := range e.waitDeliveries(2) {
		if strings.Contains(string(d.body), r.TaskID) && d.at.Before(start) {
			t.Fatalf("delivered at %v, before the start %v", d.at, start)
		}
	}
}
