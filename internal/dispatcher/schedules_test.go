package dispatcher

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/schedule"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// testClock is Servo's clock, driven by a test.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}
func (c *testClock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// scheduleEnv is an env whose clock the test drives, with the sweeper's
// schedule duty at hand (pass).
type scheduleEnv struct {
	*env
	clock *testClock
}

func newScheduleEnv(t *testing.T, start time.Time) *scheduleEnv {
	clock := newTestClock(start)
	e := newEnv(t, envOptions{paused: true, config: func(c *Config) { c.Now = clock.Now; c.SweepEvery = 15 * time.Second }})
	return &scheduleEnv{env: e, clock: clock}
}

// pass runs the sweeper's schedule duty at the clock's time.
func (e *scheduleEnv) pass() {
	e.t.Helper()
	now := e.clock.Now()
	if _, err := e.h.FireDue(e.ctx, now, now, 50, func() bool { return false }); err != nil {
		e.t.Fatalf("schedule duty at %v: %v", now, err)
	}
}

func (e *scheduleEnv) create(body map[string]any) api.Schedule {
	e.t.Helper()
	r := e.do("POST", "/v1/schedules", body, "")
	if r.status != http.StatusCreated {
		e.t.Fatalf("create schedule: %d %s", r.status, r.body)
	}
	var s api.Schedule
	r.decode(e.t, &s)
	return s
}

func (e *scheduleEnv) get(tenant, id string) api.Schedule {
	e.t.Helper()
	r := e.do("GET", "/v1/schedules/"+id+"?tenantId="+tenant, nil, "")
	if r.status != http.StatusOK {
		e.t.Fatalf("get schedule: %d %s", r.status, r.body)
	}
	var s api.Schedule
	r.decode(e.t, &s)
	return s
}

// fires returns the fire times of tenant's tasks of schedule id, sorted.
func (e *scheduleEnv) fires(tenant, id string) []time.Time {
	e.t.Helper()
	var out []time.Time
	for _, t := range e.tenantTasks(tenant) {
		if t.ScheduleID == id {
			if t.ScheduledFireAt == nil {
				e.t.Fatalf("task %s of schedule %s has no scheduledFireAt", t.ID, id)
			}
			out = append(out, *t.ScheduledFireAt)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func scheduleBody(id string, spec map[string]any, extra map[string]any) map[string]any {
	b := map[string]any{"scheduleId": id, "tenantId": "acme", "workspaceId": "ws", "spec": spec,
		"task": map[string]any{"taskKey": "nightly", "worker": "render", "payload": map[string]any{"n": 1}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// A schedule that cannot be is 400 naming the field, and stores nothing.
func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t, time.Now().UTC())
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
		msg   string
	}{
		{"bad cron", scheduleBody("a", map[string]any{"cron": "61 * * * *"}, nil), "spec.cron", ""},
		{"seconds field", scheduleBody("a", map[string]any{"cron": "0 0 2 * * *"}, nil), "spec.cron", ""},
		{"both", scheduleBody("a", map[string]any{"cron": "@hourly", "everyMs": 60000}, nil), "spec.cron", ""},
		{"neither", scheduleBody("a", map[string]any{}, nil), "spec.cron", ""},
		{"every below the sweeper", scheduleBody("a", map[string]any{"everyMs": 1000}, nil), "spec.everyMs", "15000"},
		{"unknown zone", scheduleBody("a", map[string]any{"cron": "@daily", "timezone": "Mars/Olympus"}, nil), "spec.timezone", ""},
		{"end before start", scheduleBody("a", map[string]any{"cron": "@daily", "startAt": "2030-01-02T00:00:00Z", "endAt": "2030-01-01T00:00:00Z"}, nil), "spec.endAt", ""},
		{"bad id", scheduleBody("no spaces", map[string]any{"cron": "@daily"}, nil), "scheduleId", ""},
		{"bad overlap", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"overlap": "SOMETIMES"}), "overlap", ""},
		{"negative window", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"catchupWindowMs": -1}), "catchupWindowMs", ""},
		{"unknown worker", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"task": map[string]any{"taskKey": "k", "worker": "nosuch"}}), "task.worker", ""},
		{"idempotency key", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"task": map[string]any{"taskKey": "k", "worker": "render", "idempotencyKey": "x"}}), "task.idempotencyKey", ""},
		{"start in the task", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"task": map[string]any{"taskKey": "k", "worker": "render", "startDelayMs": 5}}), "task.startDelayMs", ""},
		{"tenant in the task", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"task": map[string]any{"taskKey": "k", "worker": "render", "tenantId": "other"}}), "task.tenantId", ""},
		{"ended", scheduleBody("a", map[string]any{"cron": "@daily", "endAt": "2001-01-01T00:00:00Z"}, nil), "spec.endAt", "never fire"},
		{"unknown field", scheduleBody("a", map[string]any{"cron": "@daily"}, map[string]any{"colour": "red"}), "colour", ""},
	} {
		r := e.do("POST", "/v1/schedules", c.body, "")
		if r.status != http.StatusBadRequest || r.err(t).Field != c.field || (c.msg != "" && !strings.Contains(r.err(t).Message, c.msg)) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, r.status, r.body, c.field)
		}
	}
	r := e.do("GET", "/v1/schedules?tenantId=acme", nil, "")
	var list api.SchedulesResponse
	r.decode(t, &list)
	if len(list.Schedules) != 0 {
		t.Fatalf("refused creates stored %d schedules", len(list.Schedules))
	}
	// The same id twice is 409; another tenant may use it.
	e.create(scheduleBody("dup", map[string]any{"cron": "@daily"}, nil))
	if r := e.do("POST", "/v1/schedules", scheduleBody("dup", map[string]any{"cron": "@daily"}, nil), ""); r.status != http.StatusConflict || r.err(t).Code != api.CodeScheduleExists {
		t.Fatalf("second create: %d %s", r.status, r.body)
	}
	other := scheduleBody("dup", map[string]any{"cron": "@daily"}, nil)
	other["tenantId"] = "globex"
	e.create(other)
	// One schedule's routes need the tenant.
	if r := e.do("GET", "/v1/schedules/dup", nil, ""); r.status != http.StatusBadRequest || r.err(t).Field != "tenantId" {
		t.Fatalf("get without tenantId: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/schedules/nosuch?tenantId=acme", nil, ""); r.status != http.StatusNotFound || r.err(t).Code != api.CodeScheduleNotFound {
		t.Fatalf("get of no schedule: %d %s", r.status, r.body)
	}
}

// A cron in a time zone fires at its wall times across both daylight-
// saving changes of Europe/Berlin: the 02:30 that does not exist on
// 2026-03-29 is skipped, the one that happens twice on 2026-10-25 fires
// once; each fire is one task carrying its schedule and fire time.
func TestScheduleCronAcrossDST(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		from, to string
		want     []string
	}{
		{"spring forward", "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"fall back", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newScheduleEnv(t, mustTime(t, c.from))
			s := e.create(scheduleBody("berlin", map[string]any{"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, map[string]any{"overlap": api.OverlapAllowAll}))
			if s.NextFireAt == nil || !s.NextFireAt.Equal(mustTime(t, c.want[0])) {
				t.Fatalf("nextFireAt %v, want %s", s.NextFireAt, c.want[0])
			}
			// The sweeper every 15 minutes of Servo's clock.
			for end := mustTime(t, c.to); !e.clock.Now().After(end); e.clock.add(15 * time.Minute) {
				e.pass()
			}
			got := e.fires("acme", "berlin")
			if len(got) != len(c.want) {
				t.Fatalf("fires %v, want %v", got, c.want)
			}
			for i, w := range c.want {
				if !got[i].Equal(mustTime(t, w)) {
					t.Fatalf("fires %v, want %v", got, c.want)
				}
			}
			v := e.get("acme", "berlin")
			if v.Fires != int64(len(c.want)) || len(v.RecentFires) != len(c.want) || v.RecentFires[0].State == "" || v.RecentFires[0].TaskID == "" {
				t.Fatalf("view: fires %d, recent %+v", v.Fires, v.RecentFires)
			}
			if len(v.NextFires) != api.ScheduleNextFires {
				t.Fatalf("next fires: %v", v.NextFires)
			}
			tk := e.getTask(v.RecentFires[0].TaskID)
			if tk.ScheduleID != "berlin" || tk.ScheduledFireAt == nil || !tk.ScheduledFireAt.Equal(v.RecentFires[0].At) {
				t.Fatalf("task %s: scheduleId %q scheduledFireAt %v", tk.TaskID, tk.ScheduleID, tk.ScheduledFireAt)
			}
		})
	}
}

// end finishes a fire's task (a worker's outcome stands in: a cancel of
// a QUEUED task ends it at once).
func (e *scheduleEnv) end(id string) {
	e.t.Helper()
	if _, err := e.st.Apply(e.ctx, id, task.Event{Kind: task.EventCancel, Reason: "test", Now: e.clock.Now()}); err != nil {
		e.t.Fatal(err)
	}
}

// recent returns the outcomes of a schedule's recent fires, oldest first.
func (e *scheduleEnv) outcomes(id string) []string {
	e.t.Helper()
	v := e.get("acme", id)
	var out []string
	for i := len(v.RecentFires) - 1; i >= 0; i-- {
		out = append(out, v.RecentFires[i].Outcome)
	}
	return out
}

// Each overlap policy, while the previous fire's task runs.
func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	start := mustTime(t, "2030-01-01T00:00:00Z")
	for _, c := range []struct {
		overlap string
		// after three fires (the first one's task ended after the second):
		want     []string
		tasks    int
		endFirst bool
	}{
		{api.OverlapSkip, []string{"STARTED", "SKIPPED", "STARTED"}, 2, true},
		{api.OverlapAllowAll, []string{"STARTED", "STARTED", "STARTED"}, 3, false},
		{api.OverlapCancelOther, []string{"STARTED", "STARTED", "STARTED"}, 3, false},
		{api.OverlapBufferOne, []string{"STARTED", "BUFFERED", "SKIPPED", "STARTED"}, 2, true},
	} {
		t.Run(c.overlap, func(t *testing.T) {
			t.Parallel()
			e := newScheduleEnv(t, start)
			e.create(scheduleBody("o", map[string]any{"everyMs": 60000}, map[string]any{"overlap": c.overlap}))
			e.clock.add(time.Minute)
			e.pass() // fire 1
			first := e.get("acme", "o").RecentFires[0].TaskID
			e.clock.add(time.Minute)
			e.pass() // fire 2
			if c.overlap == api.OverlapBufferOne {
				e.clock.add(time.Minute)
				e.pass() // fire 3: one is buffered already
			}
			if c.endFirst {
				e.end(first)
			}
			if c.overlap == api.OverlapBufferOne {
				e.pass() // the buffered fire starts once the first ended
			} else {
				e.clock.add(time.Minute)
				e.pass() // fire 3
			}
			if got := e.outcomes("o"); !slices.Equal(got, c.want) {
				t.Fatalf("outcomes %v, want %v", got, c.want)
			}
			if n := len(e.fires("acme", "o")); n != c.tasks {
				t.Fatalf("%d tasks, want %d", n, c.tasks)
			}
			if c.overlap == api.OverlapCancelOther {
				// Each fire cancelled the one before: only the last runs.
				var live []string
				for _, tk := range e.tenantTasks("acme") {
					if !tk.State.Terminal() {
						live = append(live, tk.ID)
					}
				}
				if len(live) != 1 {
					t.Fatalf("CANCEL_OTHER left %d tasks running: %v", len(live), live)
				}
				if st := e.getTask(first); st.State != api.Cancelled {
					t.Fatalf("first fire's task %s, want CANCELLED", st.State)
				}
			}
			if c.overlap == api.OverlapBufferOne {
				// The buffered fire is the second fire time.
				got := e.fires("acme", "o")
				if !got[1].Equal(start.Add(2 * time.Minute)) {
					t.Fatalf("buffered fire made for %v, want %v", got[1], start.Add(2*time.Minute))
				}
			}
		})
	}
}

// After a sweeper outage, fires within the catch-up window are made once,
// oldest first, and those before it are counted missed; two sweepers at
// once, and a pass repeated, make nothing twice.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	start := mustTime(t, "2030-01-01T00:00:00Z")
	e := newScheduleEnv(t, start)
	e.create(scheduleBody("c", map[string]any{"everyMs": 15000}, map[string]any{"overlap": api.OverlapAllowAll, "catchupWindowMs": 60000}))
	// The sweeper was down for ten minutes: 40 fire times passed.
	e.clock.add(10 * time.Minute)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			now := e.clock.Now()
			if _, err := e.h.FireDue(e.ctx, now, now, 50, func() bool { return false }); err != nil {
				t.Errorf("FireDue: %v", err)
			}
		})
	}
	wg.Wait()
	e.pass()
	now := e.clock.Now()
	var want []time.Time
	for f := now.Add(-time.Minute); !f.After(now); f = f.Add(15 * time.Second) {
		want = append(want, f)
	}
	got := e.fires("acme", "c")
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("fires %v, want the window's %v", got, want)
	}
	v := e.get("acme", "c")
	// 40 fire times from 00:00:15 to 00:10:00; those before 00:09:00 missed.
	if v.Missed != 35 || v.Fires != 5 || v.RecentFires[len(v.RecentFires)-1].Outcome != api.FireMissed || v.RecentFires[len(v.RecentFires)-1].Count != 35 {
		t.Fatalf("missed %d, made %d, recent %+v; want 35 missed (one entry) and 5 made", v.Missed, v.Fires, v.RecentFires)
	}
}

// A fire made again (a crash between making its task and recording it)
// finds its task: one task per fire. Dropping the derived id doubles it.
func TestScheduleFireMadeOnce(t *testing.T) {
	t.Parallel()
	start := mustTime(t, "2030-01-01T00:00:00Z")
	e := newScheduleEnv(t, start)
	e.create(scheduleBody("once", map[string]any{"everyMs": 60000}, nil))
	e.clock.add(time.Minute)
	sc, err := e.st.GetSchedule(e.ctx, "acme", "once")
	if err != nil {
		t.Fatal(err)
	}
	// Step 1 only: the fire decided and written, not made.
	reqs, _ := dueFires(&sc, mustCompile(t, &sc), e.clock.Now())
	remember(&sc, decide(&sc, nil, reqs))
	sc.SetDue(e.clock.Now())
	if sc, err = e.st.UpdateSchedule(e.ctx, sc); err != nil {
		t.Fatal(err)
	}
	// Made, then the process dies before settling.
	e.h.makeFires(e.ctx, &sc, e.clock.Now())
	// The next pass makes the pending fire again and settles it.
	e.pass()
	e.pass()
	if got := e.fires("acme", "once"); len(got) != 1 {
		t.Fatalf("%d tasks for one fire: %v", len(got), got)
	}
	if v := e.get("acme", "once"); v.Fires != 1 || len(v.RecentFires) != 1 {
		t.Fatalf("view: %d fires, recent %+v", v.Fires, v.RecentFires)
	}
}

func mustCompile(t *testing.T, sc *store.Schedule) *schedule.Schedule {
	t.Helper()
	c, err := schedule.Compile(specOf(sc), 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Pause with a note stops fires; unpause makes those missed meanwhile
// within the catch-up window; trigger fires now; backfill makes every
// past fire time of a range once; delete stops the schedule.
func TestSchedulePauseTriggerBackfillDelete(t *testing.T) {
	t.Parallel()
	start := mustTime(t, "2030-01-01T00:00:00Z")
	e := newScheduleEnv(t, start)
	e.create(scheduleBody("p", map[string]any{"cron": "*/5 * * * *"}, map[string]any{"overlap": api.OverlapAllowAll, "catchupWindowMs": 600000}))
	r := e.do("PATCH", "/v1/schedules/p?tenantId=acme", map[string]any{"paused": true, "note": "vendor outage, INC-42"}, "")
	if r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	var v api.Schedule
	r.decode(t, &v)
	if !v.Paused || v.Note != "vendor outage, INC-42" {
		t.Fatalf("paused view: %+v", v)
	}
	e.clock.add(12 * time.Minute) // fire times :05 and :10 pass while paused
	e.pass()
	if got := e.fires("acme", "p"); len(got) != 0 {
		t.Fatalf("a paused schedule fired: %v", got)
	}
	if r := e.do("PATCH", "/v1/schedules/p?tenantId=acme", map[string]any{"paused": false}, ""); r.status != http.StatusOK {
		t.Fatalf("unpause: %d %s", r.status, r.body)
	}
	e.pass()
	want := []time.Time{start.Add(5 * time.Minute), start.Add(10 * time.Minute)}
	if got := e.fires("acme", "p"); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("after unpause: %v, want the window's %v", got, want)
	}

	// Trigger: one fire now, its task at once.
	r = e.do("POST", "/v1/schedules/p:trigger?tenantId=acme", nil, "")
	var fr api.FireResponse
	if r.status != http.StatusOK {
		t.Fatalf("trigger: %d %s", r.status, r.body)
	}
	r.decode(t, &fr)
	if len(fr.Fires) != 1 || fr.Fires[0].Outcome != api.FireStarted || fr.Fires[0].Kind != api.FireByTrigger || fr.Fires[0].TaskID == "" {
		t.Fatalf("trigger fires: %+v", fr.Fires)
	}
	if tk := e.getTask(fr.Fires[0].TaskID); tk.ScheduleID != "p" {
		t.Fatalf("triggered task: %+v", tk)
	}

	// Backfill of an hour before the schedule existed: 12 fire times, made
	// once however often it is asked.
	for range 2 {
		r = e.do("POST", "/v1/schedules/p:backfill?tenantId=acme", map[string]any{"from": "2029-12-31T23:00:00Z", "to": "2029-12-31T23:59:59Z"}, "")
		if r.status != http.StatusOK {
			t.Fatalf("backfill: %d %s", r.status, r.body)
		}
	}
	r.decode(t, &fr)
	if len(fr.Fires) != 12 {
		t.Fatalf("backfill: %d fires, want 12", len(fr.Fires))
	}
	if n := len(e.fires("acme", "p")); n != 2+1+12 {
		t.Fatalf("%d tasks, want 15 (2 caught up, 1 triggered, 12 backfilled once)", n)
	}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"from": "2029-01-01T00:00:00Z", "to": "2029-12-31T00:00:00Z"}, "to"}, // over 1000 fires
		{map[string]any{"from": "2030-01-01T00:00:00Z", "to": "2031-01-01T00:00:00Z"}, "to"}, // the future
		{map[string]any{"from": "yesterday", "to": "2029-12-31T00:00:00Z"}, "from"},
		{map[string]any{"from": "2029-12-31T00:00:00Z", "to": "2029-12-30T00:00:00Z"}, "to"},
	} {
		if r := e.do("POST", "/v1/schedules/p:backfill?tenantId=acme", c.body, ""); r.status != http.StatusBadRequest || r.err(t).Field != c.field {
			t.Errorf("backfill %v: %d %s, want 400 naming %s", c.body, r.status, r.body, c.field)
		}
	}

	if r := e.do("DELETE", "/v1/schedules/p?tenantId=acme", nil, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	before := len(e.fires("acme", "p"))
	e.clock.add(time.Hour)
	e.pass()
	if n := len(e.fires("acme", "p")); n != before {
		t.Fatalf("a deleted schedule fired: %d tasks, had %d", n, before)
	}
	if r := e.do("GET", "/v1/schedules/p?tenantId=acme", nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("get after delete: %d", r.status)
	}
}
