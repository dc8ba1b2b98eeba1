package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// view is one page with its parameters, as one caller sees it: what a
// page request and a live stream both read and render.
type view struct {
	// path is the view's canonical path and query.
	path string
	// key identifies the view: its path and the caller's scope. Tabs with
	// the same key share one live refresh.
	key   string
	page  string
	title string
	// every is how often the live stream re-reads the view.
	every time.Duration
	load  func(context.Context) (any, error)
}

// noViewError is a path or query that names no view (404).
type noViewError struct{ msg string }

func (e *noViewError) Error() string { return e.msg }

func noView(format string, args ...any) error { return &noViewError{fmt.Sprintf(format, args...)} }

// pageSize is the tasks table's page size.
const pageSize = 50

// resolve returns the view of a dashboard path and query for caller c:
// its reads are limited to the tenants c views, and errForbidden when c
// may not see the page at all.
func (d *Dashboard) resolve(path string, q url.Values, c *caller) (view, error) {
	v, err := d.resolvePath(path, q, c)
	v.key = v.path + "\x00" + c.key()
	return v, err
}

// scope sets f's tenant filter to c's tenants: errForbidden when c views
// none (or names one it does not view).
func (c *caller) scope(f *store.ListFilter) error {
	switch {
	case f.TenantID != "":
		if !c.views(f.TenantID) {
			return errForbidden
		}
	case c.all:
	case len(c.tenants) == 0:
		return errForbidden
	case len(c.tenants) > maxListTenants:
		return noView("filter by tenant: you have roles on %d tenants, more than one page reads (%d)", len(c.tenants), maxListTenants)
	default:
		f.TenantIDs = c.tenants
	}
	return nil
}

// maxListTenants is the most tenants one list filters on (Firestore's "in").
const maxListTenants = 30

func (d *Dashboard) resolvePath(path string, q url.Values, c *caller) (view, error) {
	rest, ok := strings.CutPrefix(path, Prefix)
	if !ok {
		return view{}, noView("no such page")
	}
	if v, ok, err := d.resolveSchedules(rest, q, c); ok {
		return v, err
	}
	switch {
	case rest == "":
		f := store.ListFilter{TenantID: q.Get("tenant"), RunID: q.Get("run"), State: api.State(q.Get("state")), Worker: q.Get("worker"),
			NewestFirst: true, PageSize: pageSize, PageToken: q.Get("page")}
		if f.RunID != "" && !task.ValidID(f.RunID, task.RunIDPrefix) {
			return view{}, noView("%q is not a run id", f.RunID)
		}
		if f.State != "" && !f.State.Valid() {
			return view{}, noView("%q is not a task state", f.State)
		}
		if len(f.TenantID) > 128 || len(f.Worker) > 128 || len(f.PageToken) > 200 {
			return view{}, noView("a filter is too long")
		}
		if err := c.scope(&f); err != nil {
			return view{}, err
		}
		canon := url.Values{}
		for k, v := range map[string]string{"tenant": f.TenantID, "run": f.RunID, "state": string(f.State), "worker": f.Worker, "page": f.PageToken} {
			if v != "" {
				canon.Set(k, v)
			}
		}
		key := Prefix
		if len(canon) > 0 {
			key += "?" + canon.Encode()
		}
		return view{path: key, page: "tasks", title: "Tasks", every: d.cfg.Refresh, load: func(ctx context.Context) (any, error) { return d.loadTasks(ctx, f, "") }}, nil
	case rest == "health":
		// The health page is the whole deployment's (every tenant's
		// failed tasks, the sweeper, the outbox): for a caller who views
		// every tenant.
		if !c.all {
			return view{}, errForbidden
		}
		return view{path: path, page: "health", title: "Health", every: d.cfg.HealthRefresh, load: d.loadHealth}, nil
	case strings.HasPrefix(rest, "runs/"):
		id := strings.TrimPrefix(rest, "runs/")
		if !task.ValidID(id, task.RunIDPrefix) {
			return view{}, noView("%q is not a run id", id)
		}
		// A run is its tasks the caller views: another tenant's run is
		// not found.
		f := store.ListFilter{RunID: id, PageSize: 500}
		if err := c.scope(&f); err != nil {
			return view{}, err
		}
		return view{path: path, page: "run", title: "Run " + id, every: d.cfg.Refresh, load: func(ctx context.Context) (any, error) { return d.loadTasks(ctx, f, id) }}, nil
	case strings.HasPrefix(rest, "tasks/"):
		id := strings.TrimPrefix(rest, "tasks/")
		if !task.ValidID(id, task.TaskIDPrefix) {
			return view{}, noView("%q is not a task id", id)
		}
		return view{path: path, page: "task", title: "Task " + id, every: d.cfg.Refresh, load: func(ctx context.Context) (any, error) { return d.loadTask(ctx, id, c) }}, nil
	}
	return view{}, noView("no such page")
}

// StateCount is one state's count.
type StateCount struct {
	State api.State
	N     int
	// Link filters the tasks page by the state ("" when not a filter).
	Link string
}

// Row is one task of a table.
type Row struct {
	ID, RunID, TenantID, TaskKey, Worker string
	// Priority is the task's priority, 1 (highest) to 5 (lowest): the
	// default for a task stored before priorities existed.
	Priority int
	State    api.State
	Attempt  int
	// Reason is the task's reason (why it ended or is cancelling;
	// QUOTA_WAIT while it waits for a run slot).
	Reason string
	// Progress is the current attempt's progress (nil when unknown).
	Progress *int
	Message  string
	Age      string
}

// TasksView is the tasks page and the run page.
type TasksView struct {
	// RunID is set on the run page.
	RunID string
	// Filter fields, as given.
	TenantID, FilterRunID, State, Worker string
	States                               []api.State
	Counts                               []StateCount
	Total                                int
	Rows                                 []Row
	// Next is the query of the next page ("" on the last).
	Next string
	// Active counts the tasks not yet ended (the run page's Cancel run).
	Active int
	// Usage is the filtered tenant's usage against its limits (tasks
	// page with a tenant filter only).
	Usage *UsageView
}

// UsageView is a tenant's usage, as GET /v1/tenants/{tenant}/usage gives it.
type UsageView struct {
	TenantID        string
	Running, Queued int
	// Limits are the tenant's limits (0: unlimited).
	Limits quota.Limits
}

func (d *Dashboard) loadTasks(ctx context.Context, f store.ListFilter, runID string) (any, error) {
	ctx, cancel := withLoadTimeout(ctx)
	defer cancel()
	var (
		tasks  []task.Task
		next   string
		counts map[api.State]int
		wg     sync.WaitGroup
		errs   [2]error
	)
	wg.Go(func() { tasks, next, errs[0] = d.cfg.Store.List(ctx, f) })
	wg.Go(func() { counts, errs[1] = d.cfg.Store.CountByState(ctx, f) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		if errors.Is(err, store.ErrInvalidPageToken) {
			return nil, fmt.Errorf("%w: the page token is not one the dashboard issued", store.ErrNotFound)
		}
		return nil, err
	}
	if runID != "" && len(f.TenantIDs) > 0 && len(tasks) == 0 {
		// None of the run's tasks is the caller's: as a run that does not
		// exist.
		return nil, fmt.Errorf("%w: run %s", store.ErrNotFound, runID)
	}
	now := d.cfg.Now()
	v := &TasksView{RunID: runID, TenantID: f.TenantID, FilterRunID: f.RunID, State: string(f.State), Worker: f.Worker, States: store.States}
	for _, st := range store.States {
		q := url.Values{"state": {string(st)}}
		for k, val := range map[string]string{"tenant": f.TenantID, "run": f.RunID, "worker": f.Worker} {
			if val != "" {
				q.Set(k, val)
			}
		}
		v.Counts = append(v.Counts, StateCount{State: st, N: counts[st], Link: Prefix + "?" + q.Encode()})
		v.Total += counts[st]
		if !st.Terminal() {
			v.Active += counts[st]
		}
	}
	for i := range tasks {
		v.Rows = append(v.Rows, rowOf(&tasks[i], now))
	}
	if f.TenantID != "" && runID == "" {
		u, err := d.usage(ctx, f.TenantID, counts)
		if err != nil {
			return nil, err
		}
		v.Usage = u
	}
	if next != "" {
		q := url.Values{"page": {next}}
		for k, val := range map[string]string{"tenant": f.TenantID, "run": f.RunID, "state": string(f.State), "worker": f.Worker} {
			if val != "" {
				q.Set(k, val)
			}
		}
		v.Next = q.Encode()
	}
	return v, nil
}

// usage is the tenant's usage: its quota counters when it is limited (as
// admission sees it), else its tasks per state.
func (d *Dashboard) usage(ctx context.Context, tenant string, counts map[api.State]int) (*UsageView, error) {
	u := &UsageView{TenantID: tenant, Limits: d.cfg.Store.Quotas().For(quota.KindTenant, tenant)}
	if u.Limits.Limited() {
		qu, err := d.cfg.Store.QuotaUsage(ctx, quota.KindTenant, tenant)
		if err != nil {
			return nil, err
		}
		u.Running, u.Queued = qu.Running, qu.Queued
		return u, nil
	}
	u.Running = counts[api.Running] + counts[api.Cancelling]
	u.Queued = counts[api.Pending] + counts[api.Queued]
	return u, nil
}

func rowOf(t *task.Task, now time.Time) Row {
	r := Row{ID: t.ID, RunID: t.RunID, TenantID: t.TenantID, TaskKey: t.TaskKey, Worker: t.Worker, Priority: task.PriorityOf(t.Priority),
		State: t.State, Attempt: t.Attempt, Reason: t.Reason, Age: fmtAge(now.Sub(t.CreatedAt))}
	if l := t.Live; l != nil && l.Attempt == t.Attempt {
		r.Progress, r.Message = l.ProgressPct, l.Message
	}
	if t.State == api.Succeeded {
		hundred := 100
		r.Progress = &hundred
	}
	return r
}

// AttemptView is one attempt on the task page.
type AttemptView struct {
	task.Attempt
	// Duration is from enqueue to the end (or now).
	Duration string
	// Heartbeats says how many heartbeats it received ("3 heartbeats",
	// "(ticks sampled)" when the timeline shows a sample).
	Heartbeats string
	Checkpoint string
	Output     string
	Partial    string
}

// EventRow is one transition on the task page.
type EventRow struct {
	task.Transition
	Delivered bool
}

// TaskView is the task page.
type TaskView struct {
	Task task.Task
	// Priority is the task's priority (task.PriorityOf: the default for a
	// task stored before priorities existed).
	Priority   int
	Attempts   []AttemptView
	Timeline   Timeline
	Events     []EventRow
	Payload    string
	Resources  string
	Active     bool
	Progress   *int
	Message    string
	Age        string
	ServerTime time.Time
	// Trace is the task's trace (nil: no recorder and no Cloud Trace
	// project configured).
	Trace *TraceView
}

func (d *Dashboard) loadTask(ctx context.Context, id string, c *caller) (any, error) {
	ctx, cancel := withLoadTimeout(ctx)
	defer cancel()
	var (
		t    task.Task
		es   []store.OutboxEntry
		wg   sync.WaitGroup
		errs [2]error
	)
	wg.Go(func() { t, errs[0] = d.cfg.Store.Get(ctx, id) })
	wg.Go(func() { es, errs[1] = d.cfg.Store.OutboxEntries(ctx, id) })
	wg.Wait()
	if errs[0] != nil {
		return nil, errs[0]
	}
	if !c.views(t.TenantID) {
		// Another tenant's task is not found, as a task that does not exist.
		return nil, fmt.Errorf("%w: task %s", store.ErrNotFound, id)
	}
	if errs[1] != nil {
		return nil, errs[1]
	}
	now := d.cfg.Now()
	v := &TaskView{Task: t, Priority: task.PriorityOf(t.Priority), Payload: prettyJSON(t.Payload), Resources: prettyJSON(t.Resources), Active: !t.State.Terminal(),
		Timeline: timelineOf(t.Attempts, now), Age: fmtAge(now.Sub(t.CreatedAt)), ServerTime: now.UTC(),
		Trace: traceOf(&t, d.cfg.Traces, d.cfg.CloudTraceProject)}
	v.Task.ResumeFrom = nil
	for _, a := range t.Attempts {
		end := now
		if a.CompletedAt != nil {
			end = *a.CompletedAt
		}
		v.Attempts = append(v.Attempts, AttemptView{Attempt: a, Duration: fmtAge(end.Sub(a.CreatedAt)), Heartbeats: heartbeatsOf(&a, a.HeartbeatTimes()), Checkpoint: prettyJSON(a.Checkpoint),
			Output: prettyJSON(a.Output), Partial: prettyJSON(a.PartialProgress)})
		if a.Attempt == t.Attempt {
			v.Progress, v.Message = a.ProgressPct, a.Message
		}
	}
	if t.State == api.Succeeded {
		hundred := 100
		v.Progress = &hundred
	}
	slices.Reverse(v.Attempts) // newest first
	for _, e := range es {
		v.Events = append(v.Events, EventRow{Transition: e.Transition, Delivered: e.Delivered})
	}
	return v, nil
}

// HealthView is the health page.
type HealthView struct {
	ServerTime time.Time
	// Sweeper is the latest pass (nil when none was recorded).
	Sweeper *api.SweepStatus
	// SweeperAge is the time since that pass.
	SweeperAge string
	// Stale: the latest pass is older than a minute (the production
	// scheduler's period) and a half.
	Stale  bool
	Duties []DutyRow
	// OutboxBacklog counts undelivered events; OutboxOldest is the age of
	// the oldest one due ("" when none).
	OutboxBacklog int64
	OutboxOldest  string
	DeadLetters   []DeadLetter
	Chart         Chart
}

// DutyRow is one sweeper duty on the health page.
type DutyRow struct {
	Name    store.Due
	Backlog int64
	Last    api.SweepDuty
}

// DeadLetter is a task that ended FAILED, with its attempts.
type DeadLetter struct {
	Task     task.Task
	Attempts []task.Attempt
}

// Health page bounds.
const (
	// deadLetters is how many of the latest failed tasks the page shows.
	deadLetters = 10
	// chartEntries bounds the outbox entries the transitions chart reads.
	chartEntries = 2000
	// chartEvery is how often the transitions chart is re-read.
	chartEvery = 30 * time.Second
)

// healthCache keeps the transitions chart between its reads.
type healthCache struct {
	mu    sync.Mutex
	at    time.Time
	chart Chart
}

func (d *Dashboard) loadHealth(ctx context.Context) (any, error) {
	ctx, cancel := withLoadTimeout(ctx)
	defer cancel()
	now := d.cfg.Now().UTC()
	v := &HealthView{ServerTime: now}
	var (
		wg      sync.WaitGroup
		errs    [5]error
		st      api.SweepStatus
		found   bool
		backlog map[store.Due]int64
		oldest  *time.Time
		failed  []task.Task
	)
	wg.Go(func() { st, found, errs[0] = d.cfg.Store.LastSweep(ctx) })
	wg.Go(func() { backlog, errs[1] = d.cfg.Store.DueBacklog(ctx, now) })
	wg.Go(func() { v.OutboxBacklog, oldest, errs[2] = d.cfg.Store.OutboxBacklog(ctx) })
	wg.Go(func() {
		failed, _, errs[3] = d.cfg.Store.List(ctx, store.ListFilter{State: api.Failed, NewestFirst: true, PageSize: deadLetters})
		if errs[3] != nil {
			return
		}
		v.DeadLetters = make([]DeadLetter, len(failed))
		var inner sync.WaitGroup
		ierrs := make([]error, len(failed))
		for i := range failed {
			inner.Go(func() {
				v.DeadLetters[i].Task = failed[i]
				v.DeadLetters[i].Attempts, ierrs[i] = d.cfg.Store.AttemptsOf(ctx, &failed[i])
			})
		}
		inner.Wait()
		errs[3] = errors.Join(ierrs...)
	})
	wg.Go(func() { v.Chart, errs[4] = d.chart(ctx, now) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	if found {
		v.Sweeper = &st
		v.SweeperAge = fmtAge(now.Sub(st.LastPassAt))
		v.Stale = now.Sub(st.LastPassAt) > 90*time.Second
	}
	for _, d := range store.Duties {
		v.Duties = append(v.Duties, DutyRow{Name: d, Backlog: backlog[d], Last: st.Duties[string(d)]})
	}
	if oldest != nil {
		v.OutboxOldest = fmtAge(now.Sub(*oldest))
	}
	return v, nil
}

// chart returns the transitions chart, re-read at most every chartEvery.
func (d *Dashboard) chart(ctx context.Context, now time.Time) (Chart, error) {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	if !d.health.at.IsZero() && now.Sub(d.health.at) < chartEvery && !now.Before(d.health.at) {
		return d.health.chart, nil
	}
	since := now.Truncate(time.Minute).Add(-59 * time.Minute)
	stamps, truncated, err := d.cfg.Store.RecentTransitions(ctx, since, chartEntries)
	if err != nil {
		return Chart{}, err
	}
	d.health.chart, d.health.at = chartOf(stamps, since, truncated), now
	return d.health.chart, nil
}

// prettyJSON indents a JSON value for display ("" for none).
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// fmtAge prints a duration for people: 850ms, 12s, 3m04s, 2h05m, 3d04h.
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtMs prints a duration in milliseconds.
func fmtMs(ms int64) string { return fmtAge(time.Duration(ms) * time.Millisecond) }

// fmtTime prints a time in UTC to the millisecond ("" for nil or zero).
func fmtTime(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return ""
		}
		t = *x
	}
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}
