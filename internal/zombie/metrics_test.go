package zombie_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/internal/telemetry"
	"github.com/servo-dev/servo/internal/zombie"
)

// withMetrics sets the process's telemetry up with a Prometheus reader
// and returns a function that reads the value of the series of name whose
// labels match labels (a regexp); found is false when there is none.
func withMetrics(t *testing.T) func(name, labels string) (float64, bool) {
	t.Helper()
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		t.Setenv(v, "")
	}
	tl, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "zombie-test", Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tl.Shutdown(context.Background()) })
	return func(name, labels string) (float64, bool) {
		t.Helper()
		rw := httptest.NewRecorder()
		tl.MetricsHandler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} ([0-9.e+-]+)$`)
		for _, m := range re.FindAllStringSubmatch(rw.Body.String(), -1) {
			if ok, _ := regexp.MatchString(labels, m[1]); ok {
				v, err := strconv.ParseFloat(m[2], 64)
				if err != nil {
					t.Fatal(err)
				}
				return v, true
			}
		}
		return 0, false
	}
}

// TestQueuedOldestAge: a QUEUED push attempt the worker never starts is
// looked at by the dispatch duty at its delivery probe, and the pass
// records servo.queued.oldest_age{servo.worker} as the time since the task
// was created (here 20 s on the sweeper's clock); the figure is held for
// zombie.QueuedHold, then, the task started, the worker's series reads 0.
func TestQueuedOldestAge(t *testing.T) {
	read := withMetrics(t)
	const gauge, worker = "servo_queued_oldest_age_seconds", `servo_worker="w"`
	e := newEnv(t)
	// A start timeout of a minute: its first delivery probe is 15 s after
	// the enqueue, the start timeout long after the passes below.
	tm := shortTiming
	tm.StartTimeoutMs = 60_000
	tk := e.create(spec{timing: tm})
	if err := e.enq.Enqueue(e.ctx, tk); err != nil {
		t.Fatal(err)
	}
	queued := e.get(tk.ID)
	if queued.State != api.Queued || queued.StartTimeoutAt == nil || queued.DispatchCheckAt == nil ||
		!queued.DispatchCheckAt.Before(*queued.StartTimeoutAt) {
		t.Fatalf("after the enqueue: %s, check %v, start timeout %v", queued.State, queued.DispatchCheckAt, queued.StartTimeoutAt)
	}
	var now atomic.Pointer[time.Time]
	at := func(d time.Duration) {
		v := tk.CreatedAt.Add(d)
		now.Store(&v)
	}
	sw := e.sweeper(func(c *zombie.Config) { c.Now = func() time.Time { return *now.Load() } })

	at(20 * time.Second) // past the probe, before the start timeout
	if st := e.sweep(sw); st.Dispatch.Due != 1 || st.Dispatch.Applied != 1 {
		t.Fatalf("probe pass: %+v", st)
	}
	if got := e.get(tk.ID); got.State != api.Queued || got.Redrives != 0 || !got.DispatchCheckAt.After(*queued.DispatchCheckAt) {
		t.Fatalf("after the probe: %s redrives %d check %v: not a delivery probe", got.State, got.Redrives, got.DispatchCheckAt)
	}
	// Firestore keeps microseconds: the creation read back is up to 1 µs
	// earlier.
	near := func(v, want float64) bool { return v >= want && v < want+1e-3 }
	if v, ok := read(gauge, worker); !ok || !near(v, 20) {
		t.Fatalf("%s{%s} = %v (%v) after the probe, want 20", gauge, worker, v, ok)
	}

	// Started: no pass sees it waiting any more. The figure is held...
	e.apply(tk.ID, task.Event{Kind: task.EventStarted, WorkerID: "w1"})
	at(30 * time.Second)
	if st := e.sweep(sw); st.Dispatch.Due != 0 {
		t.Fatalf("pass after the start: %+v", st)
	}
	if v, ok := read(gauge, worker); !ok || !near(v, 20) {
		t.Fatalf("%s{%s} = %v (%v) within QueuedHold of the probe, want 20 held", gauge, worker, v, ok)
	}
	// ... then the worker's series reads 0 (it stays, at 0).
	at(20*time.Second + zombie.QueuedHold)
	e.sweep(sw)
	if v, ok := read(gauge, worker); !ok || v != 0 {
		t.Fatalf("%s{%s} = %v (%v) once nothing waits, want 0", gauge, worker, v, ok)
	}
}

// TestDeadLettersByReason: a task that fails for good is counted in
// servo.dead_letters with its worker and its final reason (here a zombie
// with no attempt left: HEARTBEAT_TIMEOUT).
func TestDeadLettersByReason(t *testing.T) {
	read := withMetrics(t)
	const counter = "servo_dead_letters_total"
	labels := `servo_reason="` + api.ReasonHeartbeatTimeout + `",servo_worker="w"`
	e := newEnv(t)
	sw := e.sweeper(nil)
	tk := e.running(spec{maxAttempts: 1}, false)
	before, _ := read(counter, labels)
	waitPast(t, tk.LeaseExpiresAt)
	if st := e.sweep(sw); st.Lease.Applied != 1 {
		t.Fatalf("stats %+v", st)
	}
	if got := e.get(tk.ID); got.State != api.Failed || got.Reason != api.ReasonHeartbeatTimeout {
		t.Fatalf("task %s %s, want FAILED HEARTBEAT_TIMEOUT", got.State, got.Reason)
	}
	if v, ok := read(counter, labels); !ok || v-before != 1 {
		t.Fatalf("%s{%s} went %v → %v (%v), want one more", counter, labels, before, v, ok)
	}
}
