package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/schedule"
	"github.com/servo-dev/servo/internal/store"
)

// Schedule page bounds.
const (
	// schedulePageSize is the schedules table's page size.
	schedulePageSize = 50
	// maxNoteBytes bounds a schedule's note (the control API's bound).
	maxNoteBytes = 1024
	// maxScheduleRetries bounds the re-reads of a schedule whose write
	// lost a race (store.ErrScheduleChanged), as the control API's.
	maxScheduleRetries = 5
)

// scheduleIDPattern is what a schedule id may be (the control API's rule):
// any other id names no schedule.
var scheduleIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// schedulePath is the canonical path of tenant's schedule id: the tenant
// escaped as one path segment (a tenant id may hold any character).
func schedulePath(tenant, id string) string {
	return Prefix + "schedules/" + url.PathEscape(tenant) + "/" + url.PathEscape(id)
}

// resolveSchedules returns the view of a schedules path (rest is the path
// after Prefix; ok is false when it is not one).
func (d *Dashboard) resolveSchedules(rest string, q url.Values, c *caller) (v view, ok bool, err error) {
	switch {
	case rest == "schedules":
		f := store.ListFilter{TenantID: q.Get("tenant")}
		after := q.Get("page")
		if len(f.TenantID) > 128 || len(after) > 200 {
			return view{}, true, noView("a filter is too long")
		}
		// The caller's tenants, as the tasks page's.
		if err := c.scope(&f); err != nil {
			return view{}, true, err
		}
		sf := store.ScheduleFilter{TenantID: f.TenantID, TenantIDs: f.TenantIDs, PageSize: schedulePageSize, After: after}
		canon := url.Values{}
		for k, v := range map[string]string{"tenant": sf.TenantID, "page": after} {
			if v != "" {
				canon.Set(k, v)
			}
		}
		key := Prefix + "schedules"
		if len(canon) > 0 {
			key += "?" + canon.Encode()
		}
		return view{path: key, page: "schedules", title: "Schedules", every: d.cfg.Refresh,
			load: func(ctx context.Context) (any, error) { return d.loadSchedules(ctx, sf) }}, true, nil
	case strings.HasPrefix(rest, "schedules/"):
		// schedules/{tenant}/{id}, each segment escaped (schedulePath).
		segs := strings.Split(strings.TrimPrefix(rest, "schedules/"), "/")
		if len(segs) != 2 {
			return view{}, true, noView("no such page")
		}
		tenant, err1 := url.PathUnescape(segs[0])
		id, err2 := url.PathUnescape(segs[1])
		if err1 != nil || err2 != nil || tenant == "" || len(tenant) > 128 || !scheduleIDPattern.MatchString(id) {
			return view{}, true, noView("no such schedule")
		}
		return view{path: schedulePath(tenant, id), page: "schedule", title: "Schedule " + id, every: d.cfg.Refresh,
			load: func(ctx context.Context) (any, error) { return d.loadSchedule(ctx, tenant, id, c) }}, true, nil
	}
	return view{}, false, nil
}

// schedulePage serves GET /ui/schedules/{tenant}/{id}: the page of the
// canonical path of the mux's (unescaped) segments.
func (d *Dashboard) schedulePage(w http.ResponseWriter, r *http.Request) {
	d.pageAt(w, r, schedulePath(r.PathValue("tenant"), r.PathValue("id")))
}

// ScheduleRow is one schedule of the schedules table.
type ScheduleRow struct {
	ID, TenantID string
	// Link is the schedule's page.
	Link string
	// Spec says when it fires: "cron 0 2 * * * (Europe/Berlin)", "every 15m0s".
	Spec    string
	Overlap string
	Paused  bool
	Note    string
	// Next is the next fire in the schedule's zone and in UTC (nil: none
	// left).
	Next *FireTime
	// Fires, Skipped, Missed and Failed count its fires by outcome.
	Counts store.ScheduleCounts
}

// FireTime is a fire time shown in the schedule's zone and in UTC.
type FireTime struct {
	// Zone is the time in the schedule's zone, with the zone's
	// abbreviation; UTC the same instant in UTC.
	Zone, UTC string
	// Past: the time has passed (the fire is due, or was missed while
	// the schedule was paused).
	Past bool
}

// SchedulesView is the schedules page.
type SchedulesView struct {
	// TenantID is the tenant filter, as given.
	TenantID string
	Rows     []ScheduleRow
	// Next is the query of the next page ("" on the last).
	Next string
}

// FireRow is one recent fire on a schedule's page.
type FireRow struct {
	At      FireTime
	Kind    string
	Outcome string
	TaskID  string
	// State is the fire's task's state now ("" when unknown or none).
	State api.State
	// Count and Until: a MISSED entry stands for Count fires up to Until.
	Count   int
	Until   string
	Message string
}

// ScheduleView is a schedule's page.
type ScheduleView struct {
	ScheduleRow
	WorkspaceID string
	Cron        string
	Every       string
	TimeZone    string
	StartAt     string
	EndAt       string
	Jitter      string
	CatchupWin  string
	// Worker, TaskKey and Payload are the task template's; Template is
	// the whole template (JSON), for its other settings.
	Worker, TaskKey, Payload, Template string
	NextFires                          []FireTime
	Recent                             []FireRow
	// CanOperate: the caller may pause and unpause it (operator).
	CanOperate bool
	Created    string
	Updated    string
	ServerTime time.Time
}

// specText says when sc fires.
func specText(sc *store.Schedule) string {
	if sc.Cron != "" {
		tz := sc.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		return "cron " + sc.Cron + " (" + tz + ")"
	}
	return "every " + (time.Duration(sc.EveryMs) * time.Millisecond).String()
}

// specOf is sc's spec, as the schedule package takes it.
func specOf(sc *store.Schedule) schedule.Spec {
	return schedule.Spec{Cron: sc.Cron, Every: time.Duration(sc.EveryMs) * time.Millisecond, TimeZone: sc.TimeZone,
		Start: sc.StartAt, End: sc.EndAt, Jitter: time.Duration(sc.JitterMs) * time.Millisecond}
}

// zoneOf is sc's time zone (UTC when it has none or it is unknown).
func zoneOf(sc *store.Schedule) *time.Location {
	if sc.TimeZone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(sc.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

func fireTime(t time.Time, loc *time.Location, now time.Time) FireTime {
	return FireTime{Zone: t.In(loc).Format("2006-01-02 15:04:05 MST"), UTC: t.UTC().Format("2006-01-02 15:04:05Z"), Past: !t.After(now)}
}

func scheduleRowOf(sc *store.Schedule, now time.Time) ScheduleRow {
	r := ScheduleRow{ID: sc.ScheduleID, TenantID: sc.TenantID, Link: schedulePath(sc.TenantID, sc.ScheduleID), Spec: specText(sc),
		Overlap: sc.Overlap, Paused: sc.Paused, Note: sc.Note, Counts: sc.Counts}
	if sc.NextFireAt != nil {
		ft := fireTime(*sc.NextFireAt, zoneOf(sc), now)
		r.Next = &ft
	}
	return r
}

func (d *Dashboard) loadSchedules(ctx context.Context, f store.ScheduleFilter) (any, error) {
	ctx, cancel := withLoadTimeout(ctx)
	defer cancel()
	scs, next, err := d.cfg.Store.ListSchedules(ctx, f)
	if errors.Is(err, store.ErrInvalidPageToken) {
		return nil, fmt.Errorf("%w: the page token is not one the dashboard issued", store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	now := d.cfg.Now()
	v := &SchedulesView{TenantID: f.TenantID}
	for i := range scs {
		v.Rows = append(v.Rows, scheduleRowOf(&scs[i], now))
	}
	if next != "" {
		q := url.Values{"page": {next}}
		if f.TenantID != "" {
			q.Set("tenant", f.TenantID)
		}
		v.Next = q.Encode()
	}
	return v, nil
}

// loadSchedule reads tenant's schedule id for c: another tenant's (one c
// does not view) is not found, as a schedule that does not exist, and is
// not read.
func (d *Dashboard) loadSchedule(ctx context.Context, tenant, id string, c *caller) (any, error) {
	if !c.views(tenant) {
		return nil, fmt.Errorf("%w: schedule %s", store.ErrNotFound, id)
	}
	ctx, cancel := withLoadTimeout(ctx)
	defer cancel()
	sc, err := d.cfg.Store.GetSchedule(ctx, tenant, id)
	if errors.Is(err, store.ErrScheduleNotFound) {
		return nil, fmt.Errorf("%w: schedule %s", store.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, f := range sc.Recent {
		if f.TaskID != "" {
			ids = append(ids, f.TaskID)
		}
	}
	states, err := d.cfg.Store.TaskStates(ctx, ids)
	if err != nil {
		// The page without the tasks' states rather than none (as GET
		// /v1/schedules/{id}).
		d.log.WarnContext(ctx, "dashboard: could not read the states of a schedule's recent fires", "scheduleId", id, "tenantId", tenant, "error", err)
	}
	return scheduleViewOf(&sc, states, d.cfg.Now(), c.policy.Allows(c.who, tenant, auth.Operate)), nil
}

// scheduleViewOf is sc's page at now; states are its recent fires' tasks'
// states.
func scheduleViewOf(sc *store.Schedule, states map[string]api.State, now time.Time, canOperate bool) *ScheduleView {
	loc := zoneOf(sc)
	v := &ScheduleView{ScheduleRow: scheduleRowOf(sc, now), WorkspaceID: sc.WorkspaceID, Cron: sc.Cron, TimeZone: sc.TimeZone,
		Jitter: fmtMs(sc.JitterMs), CatchupWin: fmtMs(sc.CatchupWindowMs), CanOperate: canOperate,
		Created: fmtTime(sc.CreatedAt), Updated: fmtTime(sc.UpdatedAt), ServerTime: now.UTC()}
	if sc.EveryMs > 0 {
		v.Every = (time.Duration(sc.EveryMs) * time.Millisecond).String()
	}
	if v.TimeZone == "" {
		v.TimeZone = "UTC"
	}
	v.StartAt, v.EndAt = fmtTime(sc.StartAt), fmtTime(sc.EndAt)
	var tmpl api.SubmitRequest
	if json.Unmarshal(sc.Task, &tmpl) == nil {
		v.Worker, v.TaskKey, v.Payload = tmpl.Worker, tmpl.TaskKey, prettyJSON(tmpl.Payload)
	}
	v.Template = prettyJSON(sc.Task)
	// The coming fires: the next one not yet decided, then the spec's.
	if c, err := schedule.Compile(specOf(sc), 0); err == nil && sc.NextFireAt != nil {
		for t, ok := *sc.NextFireAt, true; ok && len(v.NextFires) < api.ScheduleNextFires; t, ok = c.Next(t) {
			v.NextFires = append(v.NextFires, fireTime(t, loc, now))
		}
	}
	for _, f := range sc.Recent {
		r := FireRow{At: fireTime(f.At, loc, now), Kind: f.Kind, Outcome: f.Outcome, TaskID: f.TaskID, State: states[f.TaskID],
			Count: f.Count, Until: fmtTime(f.Until), Message: f.Message}
		v.Recent = append(v.Recent, r)
	}
	return v
}

// pauseSchedule serves POST /ui/schedules/{tenant}/{id}/pause.
func (d *Dashboard) pauseSchedule(w http.ResponseWriter, r *http.Request) { d.setPaused(w, r, true) }

// unpauseSchedule serves POST /ui/schedules/{tenant}/{id}/unpause.
func (d *Dashboard) unpauseSchedule(w http.ResponseWriter, r *http.Request) {
	d.setPaused(w, r, false)
}

// setPaused pauses or unpauses a schedule for an operator of its tenant,
// with the form's note when it has the field (absent: the note is left as
// it is; empty: cleared), and redirects back to the schedule's page with
// the outcome. A caller who does not view the tenant gets 404 (nothing of
// the tenant's schedules is learnt), a viewer 403.
func (d *Dashboard) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	c := callerOf(r.Context())
	switch {
	case !scheduleIDPattern.MatchString(id) || tenant == "" || !c.views(tenant):
		d.errorPage(w, r, http.StatusNotFound, "No such schedule.")
		return
	case !c.policy.Allows(c.who, tenant, auth.Operate):
		d.errorPage(w, r, http.StatusForbidden, "Pausing and unpausing a schedule needs the operator role on its tenant.")
		return
	}
	_, setNote := r.PostForm["note"]
	note := strings.TrimSpace(r.PostFormValue("note"))
	if msg := checkNote(note); msg != "" {
		d.errorPage(w, r, http.StatusBadRequest, "The note "+msg+".")
		return
	}
	for try := 0; ; try++ {
		sc, err := d.cfg.Store.GetSchedule(r.Context(), tenant, id)
		if err == nil {
			now := d.cfg.Now().UTC()
			sc.Paused = paused
			if setNote {
				sc.Note = note
			}
			sc.UpdatedAt = now
			sc.SetDue(now)
			_, err = d.cfg.Store.UpdateSchedule(r.Context(), sc)
			if errors.Is(err, store.ErrScheduleChanged) && try < maxScheduleRetries {
				continue
			}
		}
		switch {
		case errors.Is(err, store.ErrScheduleNotFound):
			d.errorPage(w, r, http.StatusNotFound, "No such schedule.")
			return
		case errors.Is(err, store.ErrScheduleChanged):
			d.errorPage(w, r, http.StatusConflict, "The schedule kept changing while it was written; reload the page and try again.")
			return
		case err != nil:
			d.loadError(w, r, err)
			return
		}
		break
	}
	word := map[bool]string{true: "paused", false: "unpaused"}[paused]
	d.log.InfoContext(r.Context(), "dashboard: schedule "+word, "scheduleId", id, "tenantId", tenant, "by", c.who, "note", note)
	http.Redirect(w, r, schedulePath(tenant, id)+"?"+url.Values{"flash": {"Schedule " + word + "."}}.Encode(), http.StatusSeeOther)
}

// checkNote says what is wrong with a note ("" when nothing): the control
// API's rules for a schedule's note.
func checkNote(note string) string {
	switch {
	case len(note) > maxNoteBytes:
		return fmt.Sprintf("must be at most %d bytes (it has %d)", maxNoteBytes, len(note))
	case !utf8.ValidString(note):
		return "must be valid UTF-8"
	case strings.ContainsFunc(note, unicode.IsControl):
		return "must not contain control characters (line breaks, tabs)"
	}
	return ""
}
