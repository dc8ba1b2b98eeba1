package devstack_test

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
)

// A QUEUED task whose push worker cannot be reached says why: the
// sweeper's delivery probe (a quarter of the start timeout after the
// enqueue, at most 30 s) asks Cloud Tasks and records the failing
// deliveries on the task (GET /v1/tasks/{id} shows delivery: attempts,
// last status and error, next try), logs a line for the worker, and
// neither re-drives nor ends the attempt; once the worker answers, the
// task starts and the delivery is gone from its view. Both failures a
// developer meets: a worker that is not running (connection refused) and
// one that answers 503.
func TestDeliveryFailuresShown(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: connections are refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "http://" + l.Addr().String()
	l.Close()

	var logs servotest.Buffer
	var up atomic.Bool
	e := start(t, func(o *devstack.Options) {
		o.Workers["down"] = downURL
		o.Log = &logs
		o.StartTimeout = 8 * time.Second // the first probe 2 s after the enqueue
	})
	e.worker.answer = func(int, api.Envelope) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}
	go func() { // the 503s' deliveries, not played
		for range e.worker.deliveries {
			if up.Load() {
				return
			}
		}
	}()

	refused := e.submit(map[string]any{"worker": "down", "taskKey": "refused"}).TaskID
	unavailable := e.submit(map[string]any{"taskKey": "503"}).TaskID

	for _, c := range []struct {
		id, status, errPart string
	}{
		{refused, "UNAVAILABLE", "refused"},
		{unavailable, "UNAVAILABLE", "HTTP 503"},
	} {
		got := e.WaitFor(c.id, "a recorded failing delivery", func(v api.Task) bool { return v.Delivery != nil })
		d := got.Delivery
		if got.State != api.Queued || got.Attempt != 1 {
			t.Errorf("%s: %s attempt %d while its deliveries fail, want QUEUED attempt 1", c.id, got.State, got.Attempt)
		}
		if d.Attempts < 1 || d.LastStatus != c.status || !strings.Contains(d.LastError, c.errPart) {
			t.Errorf("%s: delivery %+v, want attempts ≥ 1, lastStatus %s, an error with %q", c.id, d, c.status, c.errPart)
		}
		if d.LastAttemptAt == nil || d.CheckedAt.IsZero() || d.CheckedAt.Before(*d.LastAttemptAt) {
			t.Errorf("%s: delivery times: last attempt %v, checked %v", c.id, d.LastAttemptAt, d.CheckedAt)
		}
		// The raw JSON carries the documented names.
		_, raw := e.Do("GET", "/v1/tasks/"+c.id, nil)
		var m map[string]map[string]any
		json.Unmarshal(raw, &m)
		for _, k := range []string{"attempts", "lastStatus", "lastError", "lastAttemptAt", "checkedAt"} {
			if _, ok := m["delivery"][k]; !ok {
				t.Errorf("%s: GET has no delivery.%s: %s", c.id, k, raw)
			}
		}
	}
	// One line per failing worker in the log, naming it and the error.
	deadline := time.Now().Add(30 * time.Second)
	for _, w := range []string{"down", "scripted"} {
		for !strings.Contains(logs.String(), `"message":"deliveries to worker `+w+` are failing`) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line for the failing worker %q in:\n%s", w, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// No re-drive while the deliveries failed: Cloud Tasks held them.
	for _, id := range []string{refused, unavailable} {
		tk, err := e.stack.Store.GetTask(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Redrives != 0 || tk.StartTimeoutAt == nil {
			t.Errorf("%s while its deliveries fail: %d re-drives, start timeout %v; want 0 and set", id, tk.Redrives, tk.StartTimeoutAt)
		}
	}

	// The worker answers: the task is delivered and starts; its view has
	// no delivery any more.
	up.Store(true)
	var en api.Envelope
	for en.TaskID != unavailable {
		en = e.worker.next(t).env
	}
	if en.Attempt != 1 {
		t.Errorf("delivered attempt %d, want 1", en.Attempt)
	}
	if st, _ := e.callback(en, "started", started(en, "w1")); st != http.StatusOK {
		t.Fatalf("started: %d", st)
	}
	got := e.WaitState(unavailable, api.Running)
	if got.Delivery != nil {
		t.Errorf("RUNNING task still shows delivery %+v", got.Delivery)
	}
	tk, err := e.stack.Store.GetTask(t.Context(), unavailable)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Delivery != nil || tk.StartTimeoutAt != nil {
		t.Errorf("stored once RUNNING: delivery %v, start timeout %v; want nil, nil", tk.Delivery, tk.StartTimeoutAt)
	}
}
