package dispatcher

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/schedule"
	"github.com/servo-dev/servo/internal/store"
)

// maxNoteBytes bounds a schedule's note.
const maxNoteBytes = 1024

// scheduleIDPattern is what a schedule id may be: 1 to 128 letters,
// digits, '.', '_' and '-', beginning with a letter or digit.
var scheduleIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkScheduleID(field, id string) *apiError {
	if !scheduleIDPattern.MatchString(id) {
		return invalid(field, "must be 1 to 128 letters, digits, '.', '_' or '-', beginning with a letter or digit")
	}
	return nil
}

// scheduleActions are the actions of POST /v1/schedules/{id}:{action}.
var scheduleActions = []string{"trigger", "backfill"}

// ScheduleActions returns the actions POST /v1/schedules/{id}:{action}
// serves (a pattern cannot tell them apart: {id} matches "id:action").
func ScheduleActions() []string { return slices.Clone(scheduleActions) }

// scheduleRoutes registers /v1/schedules.
func (h *handler) scheduleRoutes(handle func(string, http.HandlerFunc)) {
	handle("POST /v1/schedules", h.createSchedule)
	handle("GET /v1/schedules", h.listSchedules)
	handle("/v1/schedules", methodNotAllowed("GET, HEAD, POST"))
	handle("GET /v1/schedules/{id}", h.getSchedule)
	handle("PATCH /v1/schedules/{id}", h.patchSchedule)
	handle("DELETE /v1/schedules/{id}", h.deleteSchedule)
	handle("POST /v1/schedules/{id}", h.scheduleAction)
	handle("/v1/schedules/{id}", methodNotAllowed("DELETE, GET, HEAD, PATCH, POST"))
}

func scheduleNotFound() *apiError {
	return &apiError{status: http.StatusNotFound, body: api.Error{Code: api.CodeScheduleNotFound, Message: "no such schedule"}}
}

// minEvery is the finest everyMs: the sweeper's cadence.
func (h *handler) minEvery() time.Duration {
	if h.cfg.SweepEvery > 0 {
		return h.cfg.SweepEvery
	}
	return 15 * time.Second
}

// compileSpec checks a spec and returns it stored and compiled; field
// errors are named under prefix ("spec.").
func (h *handler) compileSpec(in api.ScheduleSpec, prefix string) (schedule.Spec, *schedule.Schedule, *apiError) {
	sp := schedule.Spec{Cron: in.Cron, Every: time.Duration(in.EveryMs) * time.Millisecond, TimeZone: in.TimeZone,
		Jitter: time.Duration(in.JitterMs) * time.Millisecond}
	if in.EveryMs < 0 {
		return sp, nil, invalid(prefix+"everyMs", "must be positive")
	}
	for _, b := range []struct {
		field string
		v     string
		dst   **time.Time
	}{{"startAt", in.StartAt, &sp.Start}, {"endAt", in.EndAt, &sp.End}} {
		if b.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.v)
		if err != nil {
			return sp, nil, invalid(prefix+b.field, "must be an RFC 3339 time such as 2030-01-15T12:00:00Z")
		}
		t = t.UTC().Truncate(time.Millisecond)
		*b.dst = &t
	}
	c, err := schedule.Compile(sp, h.minEvery())
	var fe *schedule.FieldError
	if errors.As(err, &fe) {
		return sp, nil, invalid(prefix+fe.Field, "%s", fe.Message)
	}
	if err != nil {
		return sp, nil, invalid(prefix+"cron", "%v", err)
	}
	return sp, c, nil
}

// checkOverlap checks an overlap policy ("" is SKIP unless keep).
func checkOverlap(field, v string) (string, *apiError) {
	switch v {
	case "":
		return api.OverlapSkip, nil
	case api.OverlapSkip, api.OverlapBufferOne, api.OverlapAllowAll, api.OverlapCancelOther:
		return v, nil
	}
	return "", invalid(field, "must be SKIP, BUFFER_ONE, ALLOW_ALL or CANCEL_OTHER")
}

// checkTemplate checks a schedule's task (a submit body without the
// fields a schedule decides) as a submit of it now would be, and returns
// it compact for storing.
func (h *handler) checkTemplate(r *http.Request, req api.SubmitRequest, tenant, workspace string, now time.Time) (json.RawMessage, *apiError) {
	for _, f := range []struct {
		field string
		set   bool
		why   string
	}{
		{"tenantId", req.TenantID != "", "is the schedule's: leave it out"},
		{"workspaceId", req.WorkspaceID != "", "is the schedule's: leave it out"},
		{"runId", req.RunID != "", "is not allowed: each fire is a run of its own"},
		{"idempotencyKey", req.IdempotencyKey != "", "is not allowed: each fire's task id is derived from the schedule and the fire time"},
		{"rerunOf", req.RerunOf != "", "is not allowed in a schedule"},
		{"deadline", req.Deadline != "", "is not allowed in a schedule (an absolute time)"},
		{"startAt", req.StartAt != "", "is not allowed: fires start at their fire time (spec.jitterMs spreads them)"},
		{"startDelayMs", req.StartDelayMs != nil, "is not allowed: fires start at their fire time (spec.jitterMs spreads them)"},
	} {
		if f.set {
			return nil, invalid("task."+f.field, "%s", f.why)
		}
	}
	stored, err := json.Marshal(req)
	if err != nil {
		return nil, invalid("task", "does not encode: %v", err)
	}
	req.TenantID, req.WorkspaceID = tenant, workspace
	t, e := h.prepare(&req, "", now, "task.")
	if e == nil {
		e = h.allowedSubmit(r, &t, "")
	}
	if e != nil {
		return nil, e
	}
	return stored, nil
}

// createSchedule serves POST /v1/schedules.
func (h *handler) createSchedule(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(w, r, h.cfg.MaxBodyBytes, false)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	var req api.ScheduleRequest
	if e := decodeObject(body, &req, ""); e != nil {
		h.fail(w, r, e)
		return
	}
	now := h.cfg.Now().UTC()
	sc, e := h.newSchedule(r, &req, now)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	sc, err := h.cfg.Store.CreateSchedule(r.Context(), sc)
	if errors.Is(err, store.ErrScheduleExists) {
		h.fail(w, r, &apiError{status: http.StatusConflict, body: api.Error{Code: api.CodeScheduleExists, Field: "scheduleId",
			Message: fmt.Sprintf("tenant %q already has a schedule %q: change it with PATCH or delete it first", req.TenantID, req.ScheduleID)}})
		return
	}
	if err != nil {
		h.storeError(w, r, err, "scheduleId", req.ScheduleID, "tenantId", req.TenantID)
		return
	}
	h.log.InfoContext(r.Context(), "schedule created", "scheduleId", sc.ScheduleID, "tenantId", sc.TenantID, "nextFireAt", sc.NextFireAt)
	writeJSON(w, http.StatusCreated, h.scheduleView(r.Context(), &sc, true))
}

// newSchedule checks a create request and returns the schedule to store.
func (h *handler) newSchedule(r *http.Request, req *api.ScheduleRequest, now time.Time) (store.Schedule, *apiError) {
	if e := checkScheduleID("scheduleId", req.ScheduleID); e != nil {
		return store.Schedule{}, e
	}
	for _, c := range []struct {
		field, v string
		max      int
	}{{"tenantId", req.TenantID, maxTenantIDBytes}, {"workspaceId", req.WorkspaceID, maxWorkspaceIDBytes}} {
		if e := checkText(c.field, c.v, true, c.max); e != nil {
			return store.Schedule{}, e
		}
	}
	if e := h.allowed(r, req.TenantID, auth.Submit); e != nil {
		e.body.Field = "tenantId"
		return store.Schedule{}, e
	}
	if e := checkText("note", req.Note, false, maxNoteBytes); e != nil {
		return store.Schedule{}, e
	}
	sp, c, e := h.compileSpec(req.Spec, "spec.")
	if e != nil {
		return store.Schedule{}, e
	}
	overlap, e := checkOverlap("overlap", req.Overlap)
	if e != nil {
		return store.Schedule{}, e
	}
	window, e := catchupWindow(req.CatchupWindowMs)
	if e != nil {
		return store.Schedule{}, e
	}
	tmpl, e := h.checkTemplate(r, req.Task, req.TenantID, req.WorkspaceID, now)
	if e != nil {
		return store.Schedule{}, e
	}
	uid := make([]byte, 12)
	_, _ = rand.Read(uid)
	sc := store.Schedule{
		ScheduleID: req.ScheduleID, TenantID: req.TenantID, WorkspaceID: req.WorkspaceID, UID: hex.EncodeToString(uid),
		Task: tmpl, Overlap: overlap, CatchupWindowMs: window, Paused: req.Paused, Note: req.Note,
		Active: []string{}, CreatedAt: now, UpdatedAt: now,
	}
	setSpec(&sc, sp)
	next, ok := c.Next(now)
	if !ok {
		return store.Schedule{}, invalid("spec.endAt", "the schedule would never fire: no fire time after now (server time %s)", now.Format(time.RFC3339))
	}
	sc.NextFireAt = &next
	sc.SetDue(now)
	return sc, nil
}

func setSpec(sc *store.Schedule, sp schedule.Spec) {
	sc.Cron, sc.EveryMs, sc.TimeZone = sp.Cron, sp.Every.Milliseconds(), sp.TimeZone
	sc.StartAt, sc.EndAt, sc.JitterMs = sp.Start, sp.End, sp.Jitter.Milliseconds()
}

func catchupWindow(ms *int64) (int64, *apiError) {
	if ms == nil {
		return api.DefaultCatchupWindow.Milliseconds(), nil
	}
	if *ms < 0 || *ms > api.MaxCatchupWindow.Milliseconds() {
		return 0, invalid("catchupWindowMs", "must be between 0 and %d ms (a year)", api.MaxCatchupWindow.Milliseconds())
	}
	return *ms, nil
}

// scheduleParams reads the path's schedule id and the tenantId parameter
// of a request about one schedule.
func scheduleParams(r *http.Request, id string) (string, *apiError) {
	q := r.URL.Query()
	for k, vs := range q {
		if k != "tenantId" {
			return "", invalid(k, "is not a known parameter (tenantId)")
		}
		if len(vs) > 1 {
			return "", invalid(k, "must be given at most once")
		}
	}
	tenant := q.Get("tenantId")
	if e := checkText("tenantId", tenant, true, maxTenantIDBytes); e != nil {
		e.body.Message += " (a schedule id is unique per tenant: name the tenant, ?tenantId=…)"
		return "", e
	}
	if !scheduleIDPattern.MatchString(id) {
		return "", scheduleNotFound()
	}
	return tenant, nil
}

// loadSchedule reads the schedule a request names for a caller allowed to
// do a on its tenant: 404 when there is none or the caller may not even
// view its tenant (nothing of another tenant's schedules is learnt), 403
// when the caller views it but may not do a.
func (h *handler) loadSchedule(w http.ResponseWriter, r *http.Request, id string, a auth.Action) (store.Schedule, bool) {
	tenant, e := scheduleParams(r, id)
	if e == nil && h.allowed(r, tenant, auth.View) != nil {
		e = scheduleNotFound()
	}
	if e == nil && a != auth.View {
		e = h.allowed(r, tenant, a)
	}
	if e != nil {
		h.fail(w, r, e)
		return store.Schedule{}, false
	}
	sc, err := h.cfg.Store.GetSchedule(r.Context(), tenant, id)
	if errors.Is(err, store.ErrScheduleNotFound) {
		h.fail(w, r, scheduleNotFound())
		return store.Schedule{}, false
	}
	if err != nil {
		h.storeError(w, r, err, "scheduleId", id, "tenantId", tenant)
		return store.Schedule{}, false
	}
	return sc, true
}

// getSchedule serves GET /v1/schedules/{id}?tenantId=.
func (h *handler) getSchedule(w http.ResponseWriter, r *http.Request) {
	sc, ok := h.loadSchedule(w, r, r.PathValue("id"), auth.View)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, h.scheduleView(r.Context(), &sc, true))
}

// scheduleView is sc as the API shows it; with detail, its next fires
// and its recent fires' task states (one read).
func (h *handler) scheduleView(ctx context.Context, sc *store.Schedule, detail bool) api.Schedule {
	v := api.Schedule{
		ScheduleID: sc.ScheduleID, TenantID: sc.TenantID, WorkspaceID: sc.WorkspaceID,
		Spec:    api.ScheduleSpec{Cron: sc.Cron, EveryMs: sc.EveryMs, TimeZone: sc.TimeZone, JitterMs: sc.JitterMs},
		Overlap: sc.Overlap, CatchupWindowMs: sc.CatchupWindowMs, Paused: sc.Paused, Note: sc.Note,
		NextFireAt: sc.NextFireAt, RecentFires: []api.ScheduleFire{},
		Fires: sc.Counts.Fires, Skipped: sc.Counts.Skipped, Missed: sc.Counts.Missed,
		CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt,
	}
	if sc.StartAt != nil {
		v.Spec.StartAt = sc.StartAt.Format(time.RFC3339Nano)
	}
	if sc.EndAt != nil {
		v.Spec.EndAt = sc.EndAt.Format(time.RFC3339Nano)
	}
	_ = json.Unmarshal(sc.Task, &v.Task)
	var ids []string
	for _, f := range sc.Recent {
		v.RecentFires = append(v.RecentFires, f.View())
		if f.TaskID != "" {
			ids = append(ids, f.TaskID)
		}
	}
	if !detail {
		return v
	}
	if spec, err := schedule.Compile(specOf(sc), 0); err == nil && sc.NextFireAt != nil {
		v.NextFires = []time.Time{*sc.NextFireAt}
		for f := *sc.NextFireAt; len(v.NextFires) < api.ScheduleNextFires; {
			n, ok := spec.Next(f)
			if !ok {
				break
			}
			v.NextFires, f = append(v.NextFires, n), n
		}
	}
	if states, err := h.cfg.Store.TaskStates(ctx, ids); err == nil {
		for i := range v.RecentFires {
			v.RecentFires[i].State = states[v.RecentFires[i].TaskID]
		}
	} else {
		h.log.WarnContext(ctx, "could not read the states of a schedule's recent fires", "scheduleId", sc.ScheduleID, "tenantId", sc.TenantID, "error", err)
	}
	return v
}

// listSchedules serves GET /v1/schedules.
func (h *handler) listSchedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, vs := range q {
		if k != "tenantId" && k != "pageSize" && k != "pageToken" {
			h.fail(w, r, invalid(k, "is not a known parameter (tenantId, pageSize, pageToken)"))
			return
		}
		if len(vs) > 1 {
			h.fail(w, r, invalid(k, "must be given at most once"))
			return
		}
	}
	f := store.ScheduleFilter{TenantID: q.Get("tenantId"), After: q.Get("pageToken")}
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 200 {
			h.fail(w, r, invalid("pageSize", "must be an integer from 1 to 200"))
			return
		}
		f.PageSize = n
	}
	var e *apiError
	if f.TenantIDs, e = h.tenantScope(r, f.TenantID, auth.View); e != nil {
		h.fail(w, r, e)
		return
	}
	scs, next, err := h.cfg.Store.ListSchedules(r.Context(), f)
	if errors.Is(err, store.ErrInvalidPageToken) {
		h.fail(w, r, invalid("pageToken", "is not a page token this API issued"))
		return
	}
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := api.SchedulesResponse{Schedules: make([]api.Schedule, 0, len(scs)), NextPageToken: next}
	for i := range scs {
		resp.Schedules = append(resp.Schedules, h.scheduleView(r.Context(), &scs[i], false))
	}
	writeJSON(w, http.StatusOK, resp)
}

// patchSchedule serves PATCH /v1/schedules/{id}?tenantId=: pause or
// unpause with a note, change the spec, the task, the overlap policy or
// the catch-up window.
func (h *handler) patchSchedule(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(w, r, h.cfg.MaxBodyBytes, false)
	if e != nil {
		h.fail(w, r, e)
		return
	}
	var p api.SchedulePatch
	if e := decodeObject(body, &p, ""); e != nil {
		h.fail(w, r, e)
		return
	}
	id := r.PathValue("id")
	for try := 0; ; try++ {
		sc, ok := h.loadSchedule(w, r, id, auth.Operate)
		if !ok {
			return
		}
		now := h.cfg.Now().UTC()
		if e := h.applyPatch(r, &sc, &p, now); e != nil {
			h.fail(w, r, e)
			return
		}
		sc.UpdatedAt = now
		sc.SetDue(now)
		got, err := h.cfg.Store.UpdateSchedule(r.Context(), sc)
		if errors.Is(err, store.ErrScheduleChanged) && try < maxScheduleRetries {
			continue
		}
		if errors.Is(err, store.ErrScheduleNotFound) {
			h.fail(w, r, scheduleNotFound())
			return
		}
		if err != nil {
			h.storeError(w, r, err, "scheduleId", id, "tenantId", sc.TenantID)
			return
		}
		h.log.InfoContext(r.Context(), "schedule changed", "scheduleId", id, "tenantId", sc.TenantID, "paused", sc.Paused, "note", sc.Note)
		writeJSON(w, http.StatusOK, h.scheduleView(r.Context(), &got, true))
		return
	}
}

// applyPatch changes sc as p says.
func (h *handler) applyPatch(r *http.Request, sc *store.Schedule, p *api.SchedulePatch, now time.Time) *apiError {
	if p.Note != nil {
		if e := checkText("note", *p.Note, false, maxNoteBytes); e != nil {
			return e
		}
		sc.Note = *p.Note
	}
	if p.Overlap != nil {
		o, e := checkOverlap("overlap", *p.Overlap)
		if e != nil {
			return e
		}
		sc.Overlap = o
	}
	if p.CatchupWindowMs != nil {
		w, e := catchupWindow(p.CatchupWindowMs)
		if e != nil {
			return e
		}
		sc.CatchupWindowMs = w
	}
	if p.Task != nil {
		tmpl, e := h.checkTemplate(r, *p.Task, sc.TenantID, sc.WorkspaceID, now)
		if e != nil {
			return e
		}
		sc.Task = tmpl
	}
	if p.Spec != nil {
		sp, c, e := h.compileSpec(*p.Spec, "spec.")
		if e != nil {
			return e
		}
		setSpec(sc, sp)
		// A new spec fires from now on: its earlier times are not caught up.
		sc.NextFireAt = nil
		if next, ok := c.Next(now); ok {
			sc.NextFireAt = &next
		}
	}
	if p.Paused != nil {
		sc.Paused = *p.Paused
	}
	return nil
}

// deleteSchedule serves DELETE /v1/schedules/{id}?tenantId=: the schedule
// makes no more fires; tasks of its fires are left as they are.
func (h *handler) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sc, ok := h.loadSchedule(w, r, id, auth.Operate)
	if !ok {
		return
	}
	err := h.cfg.Store.DeleteSchedule(r.Context(), sc.TenantID, id)
	if errors.Is(err, store.ErrScheduleNotFound) {
		h.fail(w, r, scheduleNotFound())
		return
	}
	if err != nil {
		h.storeError(w, r, err, "scheduleId", id, "tenantId", sc.TenantID)
		return
	}
	h.log.InfoContext(r.Context(), "schedule deleted", "scheduleId", id, "tenantId", sc.TenantID)
	w.WriteHeader(http.StatusNoContent)
}

// scheduleAction serves POST /v1/schedules/{id}:trigger and :backfill.
func (h *handler) scheduleAction(w http.ResponseWriter, r *http.Request) {
	id, action, found := strings.Cut(r.PathValue("id"), ":")
	if !found || !slices.Contains(scheduleActions, action) {
		w.Header().Set("Allow", "DELETE, GET, HEAD, PATCH")
		writeError(w, http.StatusMethodNotAllowed, &api.Error{Code: api.CodeMethodNotAllowed,
			Message: fmt.Sprintf("method POST is not allowed on %s (POST is for …/{scheduleId}:trigger and …/{scheduleId}:backfill)", r.URL.Path)})
		return
	}
	body, e := readBody(w, r, h.cfg.MaxBodyBytes, action == "trigger")
	if e != nil {
		h.fail(w, r, e)
		return
	}
	sc, ok := h.loadSchedule(w, r, id, auth.Submit)
	if !ok {
		return
	}
	now := h.cfg.Now().UTC().Truncate(time.Millisecond)
	var extra func(*store.Schedule, *schedule.Schedule) ([]fireReq, error)
	switch action {
	case "trigger":
		var req api.TriggerRequest
		if body != nil && len(bytes.TrimSpace(body)) > 0 {
			if e := decodeObject(body, &req, ""); e != nil {
				h.fail(w, r, e)
				return
			}
		}
		extra = func(cur *store.Schedule, _ *schedule.Schedule) ([]fireReq, error) {
			o := cur.Overlap
			if req.Overlap != "" {
				o = req.Overlap
			}
			return []fireReq{{at: now, kind: api.FireByTrigger, overlap: o}}, nil
		}
		if req.Overlap != "" {
			if _, e := checkOverlap("overlap", req.Overlap); e != nil {
				h.fail(w, r, e)
				return
			}
		}
	case "backfill":
		var req api.BackfillRequest
		if e := decodeObject(body, &req, ""); e != nil {
			h.fail(w, r, e)
			return
		}
		fires, e := backfillTimes(&sc, req, now)
		if e != nil {
			h.fail(w, r, e)
			return
		}
		extra = func(cur *store.Schedule, _ *schedule.Schedule) ([]fireReq, error) {
			o := cur.Overlap
			if req.Overlap != "" {
				o = req.Overlap
			}
			reqs := make([]fireReq, len(fires))
			for i, f := range fires {
				reqs[i] = fireReq{at: f, kind: api.FireByBackfill, overlap: o}
			}
			return reqs, nil
		}
	}
	decided, _, err := h.fire(r.Context(), sc.TenantID, id, now, extra)
	if errors.Is(err, store.ErrScheduleNotFound) {
		h.fail(w, r, scheduleNotFound())
		return
	}
	if err != nil && decided == nil {
		h.storeError(w, r, err, "scheduleId", id, "tenantId", sc.TenantID)
		return
	}
	if err != nil {
		// Decided and written: the sweeper makes what this request could not.
		h.log.WarnContext(r.Context(), "schedule fires decided, some not made yet; the sweeper makes them", "scheduleId", id, "tenantId", sc.TenantID, "error", err)
	}
	resp := api.FireResponse{Fires: make([]api.ScheduleFire, 0, len(decided))}
	for _, f := range decided {
		resp.Fires = append(resp.Fires, f.View())
	}
	h.log.InfoContext(r.Context(), "schedule "+action, "scheduleId", id, "tenantId", sc.TenantID, "fires", len(decided))
	writeJSON(w, http.StatusOK, resp)
}

// backfillTimes checks a backfill request against sc and returns its fire
// times: at most api.MaxBackfillFires, none in the future.
func backfillTimes(sc *store.Schedule, req api.BackfillRequest, now time.Time) ([]time.Time, *apiError) {
	var from, to time.Time
	for _, b := range []struct {
		field, v string
		dst      *time.Time
	}{{"from", req.From, &from}, {"to", req.To, &to}} {
		t, err := time.Parse(time.RFC3339, b.v)
		if err != nil {
			return nil, invalid(b.field, "must be an RFC 3339 time such as 2030-01-15T12:00:00Z")
		}
		*b.dst = t.UTC()
	}
	if to.Before(from) {
		return nil, invalid("to", "must not be before from")
	}
	if to.After(now) {
		return nil, invalid("to", "must not be in the future (server time %s): a backfill makes past fires, the schedule makes the coming ones", now.Format(time.RFC3339))
	}
	if req.Overlap != "" {
		if _, e := checkOverlap("overlap", req.Overlap); e != nil {
			return nil, e
		}
	}
	spec, err := schedule.Compile(specOf(sc), 0)
	if err != nil {
		return nil, invalid("spec", "the schedule's spec does not compile: %v", err)
	}
	fires, more := spec.Between(from, to, api.MaxBackfillFires)
	if more {
		return nil, invalid("to", "the range holds more than %d fires: backfill it in parts", api.MaxBackfillFires)
	}
	if len(fires) == 0 {
		return nil, invalid("from", "the range holds no fire time of the schedule")
	}
	return fires, nil
}
