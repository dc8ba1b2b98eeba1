package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/schedule"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// A schedule's fires are made in three steps (docs/contract.md §16.3):
//
//  1. decide: the fires due (or triggered, or backfilled) are decided
//     against the overlap policy, and the decision written to the schedule
//     with the version read as precondition: STARTED fires go to Pending
//     with their derived task ids, the tasks CANCEL_OTHER ends to Cancel,
//     and NextFireAt moves on. Two deciders never both decide a fire: one
//     of their writes fails its precondition and reads again.
//  2. make: Cancel's tasks are cancelled and Pending's tasks created, each
//     under the id derived from (schedule, kind, fire time), so that
//     making a fire again (a crash between 2 and 3, two sweepers) finds
//     the task already there instead of creating a second one.
//  3. settle: the made fires leave Pending (a fire the store refused, such
//     as a worker no longer configured, is recorded FAILED).
//
// A crash anywhere leaves the schedule due with its Pending, and the next
// pass makes them: no fire is lost, none is doubled.

// maxFiresPerPass bounds the fires one schedule decides in one pass (a
// long catch-up continues on the next pass).
const maxFiresPerPass = 100

// fireConcurrency is how many schedules the sweeper fires at once. A fire
// is about six round trips in sequence (read the schedule, its running
// fire's state, decide, create the task, enqueue it, settle): 32 at once
// make the 10 000 fires of a busy minute within that minute while a round
// trip takes up to 32 ms (docs/scale.md, "Schedules at the top of the
// minute").
const fireConcurrency = 32

// maxScheduleRetries bounds the re-reads of a schedule whose write lost a
// race with another writer.
const maxScheduleRetries = 5

// DeriveFireID is the task id of a schedule's fire: derived from the
// schedule's uid (a new one for a schedule created again under the same
// id), the fire's kind and its time.
var DeriveFireID = func(sc *store.Schedule, kind string, at time.Time) string {
	return task.DerivedTaskID(at, sc.UID+"\x00"+kind+"\x00"+strconv.FormatInt(at.UnixMilli(), 10))
}

// specOf is a schedule's stored spec as package schedule reads it.
func specOf(sc *store.Schedule) schedule.Spec {
	return schedule.Spec{Cron: sc.Cron, Every: time.Duration(sc.EveryMs) * time.Millisecond, TimeZone: sc.TimeZone,
		Start: sc.StartAt, End: sc.EndAt, Jitter: time.Duration(sc.JitterMs) * time.Millisecond}
}

// fireReq is a fire to decide: a time, what made it, and the overlap
// policy that applies.
type fireReq struct {
	at      time.Time
	kind    string
	overlap string
}

// activeFires returns the fire tasks of sc that have not finished (one read of
// their states; a task the store no longer has is finished).
func (h *handler) activeFires(ctx context.Context, sc *store.Schedule) ([]string, error) {
	if len(sc.Active) == 0 {
		return nil, nil
	}
	states, err := h.cfg.Store.TaskStates(ctx, sc.Active)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range sc.Active {
		if st, ok := states[id]; ok && !st.Terminal() {
			out = append(out, id)
		}
	}
	// A pending fire's task may not exist yet: it is active.
	for _, p := range sc.Pending {
		if p.TaskID != "" && !slices.Contains(out, p.TaskID) {
			out = append(out, p.TaskID)
		}
	}
	return out, nil
}

// decide applies step 1 to sc (read at now, its active fire tasks active):
// the buffered fire when nothing runs, then reqs in order. It changes sc
// and returns the decided fires.
func decide(sc *store.Schedule, active []string, reqs []fireReq) []store.ScheduleFire {
	var out []store.ScheduleFire
	start := func(f store.ScheduleFire) store.ScheduleFire {
		f.Outcome, f.TaskID = api.FireStarted, DeriveFireID(sc, f.Kind, f.At)
		sc.Pending = append(sc.Pending, f)
		if f.Overlap != api.OverlapAllowAll {
			active = append(active, f.TaskID)
		}
		sc.Counts.Fires++
		return f
	}
	if sc.Buffered != nil && len(active) == 0 {
		out = append(out, start(*sc.Buffered))
		sc.Buffered = nil
	}
	for _, r := range reqs {
		f := store.ScheduleFire{At: r.at, Kind: r.kind, Overlap: r.overlap}
		switch {
		case len(active) == 0 || r.overlap == api.OverlapAllowAll:
			f = start(f)
		case r.overlap == api.OverlapCancelOther:
			for _, id := range active {
				if !slices.Contains(sc.Cancel, id) {
					sc.Cancel = append(sc.Cancel, id)
				}
			}
			active = nil
			f = start(f)
		case r.overlap == api.OverlapBufferOne && sc.Buffered == nil:
			f.Outcome = api.FireBuffered
			b := f
			sc.Buffered = &b
		default:
			f.Outcome = api.FireSkipped
			sc.Counts.Skipped++
		}
		out = append(out, f)
	}
	sc.Active = active
	if sc.Active == nil {
		sc.Active = []string{}
	}
	return out
}

// remember prepends fires (oldest first) to sc's recent fires, newest
// first, keeping api.ScheduleRecentFires.
func remember(sc *store.Schedule, fires []store.ScheduleFire) {
	recent := make([]store.ScheduleFire, 0, len(fires)+len(sc.Recent))
	for i := len(fires) - 1; i >= 0; i-- {
		recent = append(recent, fires[i])
	}
	recent = append(recent, sc.Recent...)
	if len(recent) > api.ScheduleRecentFires {
		recent = recent[:api.ScheduleRecentFires]
	}
	sc.Recent = recent
}

// dueFires returns the spec's fires of sc due by now, from its NextFireAt:
// those older than the catch-up window are missed (one MISSED entry), at
// most maxFiresPerPass of the rest are returned, and NextFireAt moves past
// them.
func dueFires(sc *store.Schedule, spec *schedule.Schedule, now time.Time) (reqs []fireReq, missed *store.ScheduleFire) {
	if sc.NextFireAt == nil || sc.NextFireAt.After(now) {
		return nil, nil
	}
	window := time.Duration(sc.CatchupWindowMs) * time.Millisecond
	cutoff := now.Add(-window)
	next := *sc.NextFireAt
	if next.Before(cutoff) {
		m := store.ScheduleFire{At: next, Kind: api.FireBySchedule, Outcome: api.FireMissed}
		last := next
		for f, ok := next, true; ok && f.Before(cutoff); f, ok = spec.Next(f) {
			m.Count++
			last = f
		}
		m.Until = &last
		sc.Counts.Missed += int64(m.Count)
		missed = &m
		n, ok := spec.Next(last)
		if !ok {
			sc.NextFireAt = nil
			return nil, missed
		}
		next = n
	}
	fires, _ := spec.Between(next, now, maxFiresPerPass)
	for _, f := range fires {
		reqs = append(reqs, fireReq{at: f, kind: api.FireBySchedule, overlap: sc.Overlap})
	}
	sc.NextFireAt = &next
	if len(fires) > 0 {
		sc.NextFireAt = nil
		if n, ok := spec.Next(fires[len(fires)-1]); ok {
			sc.NextFireAt = &n
		}
	}
	return reqs, missed
}

// fireOutcome is what making one decided fire came to.
type fireOutcome struct {
	fire store.ScheduleFire
	// done: the fire left Pending (made, or failed for good).
	done bool
}

// Fire decides and makes the fires of tenant's schedule id: those due by
// now by its spec (the sweeper), or reqs (trigger, backfill: extra), then
// makes every pending one. It returns the fires it decided, with the
// outcome of making them.
func (h *handler) fire(ctx context.Context, tenant, id string, now time.Time, extra func(*store.Schedule, *schedule.Schedule) ([]fireReq, error)) ([]store.ScheduleFire, schedule.PassStats, error) {
	var st schedule.PassStats
	var decided []store.ScheduleFire
	var sc store.Schedule
	for try := 0; ; try++ {
		var err error
		sc, err = h.cfg.Store.GetSchedule(ctx, tenant, id)
		if err != nil {
			return nil, st, err
		}
		spec, err := schedule.Compile(specOf(&sc), 0)
		if err != nil {
			return nil, st, fmt.Errorf("schedule %s: stored spec: %w", id, err)
		}
		var reqs []fireReq
		var missed *store.ScheduleFire
		switch {
		case extra != nil:
			if reqs, err = extra(&sc, spec); err != nil {
				return nil, st, err
			}
		case !sc.Paused:
			reqs, missed = dueFires(&sc, spec, now)
		}
		var fires []store.ScheduleFire
		if len(reqs) > 0 || (sc.Buffered != nil && !sc.Paused) {
			active, err := h.activeFires(ctx, &sc)
			if err != nil {
				return nil, st, err
			}
			fires = decide(&sc, active, reqs)
		}
		if len(fires) == 0 && missed == nil {
			// Nothing decided: a buffered fire whose predecessor still
			// runs, fires decided earlier and not made yet, or a due time
			// an edit moved.
			if want := dueCopy(sc, now); !sameTime(want, sc.DueAt) {
				sc.DueAt, sc.UpdatedAt = want, now
				if sc, err = h.cfg.Store.UpdateSchedule(ctx, sc); err != nil {
					if errors.Is(err, store.ErrScheduleChanged) && try < maxScheduleRetries {
						continue
					}
					return nil, st, err
				}
			}
			break
		}
		all := fires
		if missed != nil {
			all = append([]store.ScheduleFire{*missed}, fires...)
		}
		remember(&sc, all)
		sc.SetDue(now)
		sc.UpdatedAt = now
		sc, err = h.cfg.Store.UpdateSchedule(ctx, sc)
		if errors.Is(err, store.ErrScheduleChanged) && try < maxScheduleRetries {
			continue
		}
		if err != nil {
			return nil, st, err
		}
		decided = all
		if missed != nil {
			st.Missed += missed.Count
		}
		for _, f := range fires {
			switch f.Outcome {
			case api.FireSkipped:
				st.Skipped++
			case api.FireBuffered:
				st.Buffered++
			}
		}
		break
	}
	made, err := h.make(ctx, sc, now)
	for i := range decided {
		for _, m := range made {
			if m.fire.TaskID == decided[i].TaskID && m.fire.TaskID != "" {
				decided[i] = m.fire
			}
		}
	}
	for _, m := range made {
		switch m.fire.Outcome {
		case api.FireStarted:
			st.Started++
		case api.FireFailed:
			st.Failed++
		}
	}
	return decided, st, err
}

// dueCopy is setDue's due time for sc.
func dueCopy(sc store.Schedule, now time.Time) *time.Time {
	sc.SetDue(now)
	return sc.DueAt
}

func sameTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// make is steps 2 and 3 for sc (at its version after step 1): it cancels
// Cancel's tasks, creates Pending's, and settles the schedule.
func (h *handler) make(ctx context.Context, sc store.Schedule, now time.Time) ([]fireOutcome, error) {
	if len(sc.Pending) == 0 && len(sc.Cancel) == 0 {
		return nil, nil
	}
	var errs []error
	// Pending first, then Cancel: a fire decided earlier and not made yet
	// may be among the tasks to cancel.
	outcomes := h.makeFires(ctx, &sc, now)
	unmade := map[string]bool{}
	for _, o := range outcomes {
		if !o.done {
			unmade[o.fire.TaskID] = true
		}
	}
	cancelled := map[string]bool{}
	for _, id := range sc.Cancel {
		if unmade[id] {
			continue // cancelled once it is made, on a later pass
		}
		res, err := h.cfg.Store.Apply(ctx, id, task.Event{Kind: task.EventCancel, Reason: "superseded by a later fire of schedule " + sc.ScheduleID + " (CANCEL_OTHER)", Now: now})
		switch {
		case errors.Is(err, store.ErrNotFound):
			cancelled[id] = true // never made: nothing runs
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("cancel %s: %w", id, err))
			continue
		}
		cancelled[id] = true
		if res.Rejection == nil {
			h.log.InfoContext(ctx, "schedule cancelled a running fire (CANCEL_OTHER)", "scheduleId", sc.ScheduleID, "tenantId", sc.TenantID, "taskId", id)
			if res.Dequeue {
				_ = h.cfg.Enqueuer.FollowUp(ctx, res)
			}
		}
	}
	done := map[string]fireOutcome{}
	for _, o := range outcomes {
		if o.done {
			done[o.fire.TaskID] = o
		}
	}
	// Settle: re-read on a lost race; what was made stays made.
	for try := 0; len(done) > 0 || len(cancelled) > 0; try++ {
		sc.Cancel = slices.DeleteFunc(sc.Cancel, func(id string) bool { return cancelled[id] })
		sc.Pending = slices.DeleteFunc(sc.Pending, func(f store.ScheduleFire) bool { _, ok := done[f.TaskID]; return ok })
		for _, o := range done {
			if o.fire.Outcome != api.FireFailed {
				continue
			}
			sc.Active = slices.DeleteFunc(sc.Active, func(id string) bool { return id == o.fire.TaskID })
			for i := range sc.Recent {
				if sc.Recent[i].TaskID == o.fire.TaskID && sc.Recent[i].Outcome == api.FireStarted {
					sc.Recent[i] = o.fire
					sc.Counts.Fires--
					sc.Counts.Failed++
				}
			}
		}
		sc.SetDue(now)
		sc.UpdatedAt = now
		_, err := h.cfg.Store.UpdateSchedule(ctx, sc)
		if errors.Is(err, store.ErrScheduleChanged) && try < maxScheduleRetries {
			if sc, err = h.cfg.Store.GetSchedule(ctx, sc.TenantID, sc.ScheduleID); err == nil {
				continue
			}
		}
		if err != nil && !errors.Is(err, store.ErrScheduleNotFound) {
			errs = append(errs, fmt.Errorf("settle: %w", err))
		}
		break
	}
	return outcomes, errors.Join(errs...)
}

// makeFires creates the tasks of sc's pending fires (step 2): each from
// the schedule's task, under its derived id, QUEUED and handed to its
// worker as a submit's.
func (h *handler) makeFires(ctx context.Context, sc *store.Schedule, now time.Time) []fireOutcome {
	spec, _ := schedule.Compile(specOf(sc), 0)
	out := make([]fireOutcome, len(sc.Pending))
	var ts []task.Task
	var idx []int
	for i, f := range sc.Pending {
		out[i].fire = f
		t, e := h.fireTask(sc, spec, f, now)
		if e != nil {
			out[i].fire.Outcome, out[i].fire.Message, out[i].done = api.FireFailed, e.body.Field+": "+e.body.Message, true
			continue
		}
		ts = append(ts, t)
		idx = append(idx, i)
	}
	if len(ts) == 0 {
		return out
	}
	results := h.cfg.Store.CreateMany(ctx, ts, now, true)
	var wg sync.WaitGroup
	for j, res := range results {
		i := idx[j]
		wg.Go(func() {
			_, _, err := h.afterCreate(ctx, res)
			switch {
			case err == nil:
				out[i].done = true
			case errors.Is(err, quota.ErrExceeded):
				out[i].fire.Outcome, out[i].fire.Message, out[i].done = api.FireFailed, err.Error(), true
			default:
				// Kept pending: made on the next pass.
				h.log.WarnContext(ctx, "schedule fire not made yet; the next pass retries", "scheduleId", sc.ScheduleID,
					"tenantId", sc.TenantID, "taskId", ts[j].ID, "error", err)
			}
		})
	}
	wg.Wait()
	return out
}

// fireTask builds the task of fire f of sc: the schedule's task, its
// tenant and workspace, started at the fire time plus its jitter.
func (h *handler) fireTask(sc *store.Schedule, spec *schedule.Schedule, f store.ScheduleFire, now time.Time) (task.Task, *apiError) {
	var req api.SubmitRequest
	if err := json.Unmarshal(sc.Task, &req); err != nil {
		return task.Task{}, invalid("task", "the stored task does not decode: %v", err)
	}
	req.TenantID, req.WorkspaceID = sc.TenantID, sc.WorkspaceID
	if spec != nil && f.Kind == api.FireBySchedule {
		if d := spec.Delay(sc.TenantID+"\x00"+sc.ScheduleID, f.At); d > 0 && f.At.Add(d).After(now) {
			req.StartAt = f.At.Add(d).UTC().Format(time.RFC3339Nano)
		}
	}
	t, e := h.prepare(&req, "", now, "task.")
	if e != nil {
		return task.Task{}, e
	}
	at := f.At
	t.ID, t.ScheduleID, t.ScheduledFireAt = f.TaskID, sc.ScheduleID, &at
	return t, nil
}

// FireDue is the sweeper's schedule duty: it fires every schedule due by
// now, a group of due shards at a time, and counts those due later but
// before until (the sweeper's window stays open for them).
func (h *handler) FireDue(ctx context.Context, now, until time.Time, pageSize int, stop func() bool) (schedule.PassStats, error) {
	var (
		st   schedule.PassStats
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	if until.Before(now) {
		until = now
	}
	sem := make(chan struct{}, fireConcurrency)
	for _, group := range h.cfg.Store.ScheduleGroups() {
		var after *store.DueCursor
		for !stop() {
			page, err := h.cfg.Store.DueSchedules(ctx, group, until, pageSize, after)
			if err != nil {
				mu.Lock()
				st.QueryErrors++
				errs = append(errs, err)
				mu.Unlock()
				break
			}
			for _, ref := range page {
				if ref.DueAt != nil && ref.DueAt.After(now) {
					mu.Lock()
					st.Upcoming++
					mu.Unlock()
					continue
				}
				mu.Lock()
				st.Due++
				mu.Unlock()
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					_, fs, err := h.fire(ctx, ref.TenantID, ref.ScheduleID, now, nil)
					mu.Lock()
					defer mu.Unlock()
					st.Add(fs)
					if err != nil && !errors.Is(err, store.ErrScheduleNotFound) {
						st.Errors++
						errs = append(errs, fmt.Errorf("schedule %s of tenant %s: %w", ref.ScheduleID, ref.TenantID, err))
					}
				})
			}
			if len(page) < pageSize {
				break
			}
			last := page[len(page)-1]
			after = &store.DueCursor{At: *last.DueAt, ID: store.ScheduleDocID(last.TenantID, last.ScheduleID)}
		}
	}
	wg.Wait()
	return st, errors.Join(errs...)
}

// Scheduler makes schedules' fires for the sweeper (zombie.Config.Schedules):
// the control API's submit path (validation, quotas, enqueue) under a
// schedule's derived task ids.
type Scheduler struct{ h *handler }

// NewScheduler returns the schedule duty of cfg's store and enqueuer.
func NewScheduler(cfg Config) (*Scheduler, error) {
	h, err := newHandler(cfg)
	if err != nil {
		return nil, err
	}
	return &Scheduler{h: h}, nil
}

// FireDue fires every schedule due by now and counts those due before
// until; see the sweeper's schedule duty.
func (s *Scheduler) FireDue(ctx context.Context, now, until time.Time, pageSize int, stop func() bool) (schedule.PassStats, error) {
	return s.h.FireDue(ctx, now, until, pageSize, stop)
}
