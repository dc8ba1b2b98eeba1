package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/servo-dev/servo/api"
)

// Every run also drives two schedules (docs/contract.md §16) of their own
// tenant, under the same faults: one firing every scheduleEvery (or the
// sweeper's cadence, when slower: the shortest everyMs there is) while the
// load runs (ALLOW_ALL, an hour's catch-up window: no fire may be lost or
// skipped), and one paused schedule backfilled over a past minute twice,
// the second as a client's retry of the first. The schedule-once
// invariant holds each fire time to exactly one task, schedule-early
// holds each task's creation to no earlier than its fire time.
const (
	scheduleTenant = "faults-sched"
	scheduleEvery  = 2 * time.Second
	// scheduleRunsFor is the least time the firing schedule runs.
	scheduleRunsFor = 12 * time.Second
	backfillRange   = time.Minute
)

// ScheduleRecord is what a run expects of one of its schedules: each of
// Expected made exactly once, as one of Tasks.
type ScheduleRecord struct {
	ID       string
	Expected []time.Time
	Tasks    []api.Task
}

// scheduleState is a run's schedules while it runs.
type scheduleState struct {
	every    time.Duration // the schedules' period
	created  time.Time
	backfill []time.Time
}

// call sends a control-API request until Servo answers it (not 503, not a
// transport error), for at most two minutes; it returns the status and
// decodes a 2xx body into out.
func (r *run) call(ctx context.Context, method, path string, body, out any) (int, error) {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	backoff := 200 * time.Millisecond
	for giveUp := time.Now().Add(2 * time.Minute); time.Now().Before(giveUp); {
		req, _ := http.NewRequestWithContext(ctx, method, r.servo.URL()+path, bytes.NewReader(data))
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := r.api.Do(req)
		if err == nil {
			raw, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
			res.Body.Close()
			if res.StatusCode != http.StatusServiceUnavailable {
				if res.StatusCode/100 != 2 {
					return res.StatusCode, fmt.Errorf("faults: %s %s: %d %s", method, path, res.StatusCode, raw)
				}
				if out != nil {
					return res.StatusCode, json.Unmarshal(raw, out)
				}
				return res.StatusCode, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
	return 0, fmt.Errorf("faults: %s %s: no answer within two minutes", method, path)
}

func scheduleTask() map[string]any {
	payload, _ := json.Marshal(Payload{Mode: ModeOK})
	return map[string]any{"taskKey": "scheduled", "worker": "sim", "payload": json.RawMessage(payload),
		"heartbeatIntervalMs": heartbeatMs, "heartbeatTimeoutMs": leaseMs, "cancelGracePeriodMs": cancelGraceMs,
		"retry": map[string]any{"maxAttempts": maxAttempts, "initialBackoffMs": initialBackoff, "maxBackoffMs": 2000}}
}

// startSchedules creates the run's schedules and backfills the second one
// twice.
func (r *run) startSchedules(ctx context.Context) (*scheduleState, error) {
	period := max(scheduleEvery, r.cfg.SweepEvery)
	var every api.Schedule
	if _, err := r.call(ctx, http.MethodPost, "/v1/schedules", map[string]any{
		"scheduleId": "every", "tenantId": scheduleTenant, "workspaceId": "ws", "spec": map[string]any{"everyMs": period.Milliseconds()},
		"task": scheduleTask(), "overlap": api.OverlapAllowAll, "catchupWindowMs": time.Hour.Milliseconds(),
	}, &every); err != nil {
		return nil, err
	}
	if _, err := r.call(ctx, http.MethodPost, "/v1/schedules", map[string]any{
		"scheduleId": "backfill", "tenantId": scheduleTenant, "workspaceId": "ws", "spec": map[string]any{"everyMs": period.Milliseconds()},
		"task": scheduleTask(), "overlap": api.OverlapAllowAll, "paused": true, "note": "backfilled only",
	}, nil); err != nil {
		return nil, err
	}
	st := &scheduleState{every: period, created: every.CreatedAt}
	to := every.CreatedAt.Add(-time.Second).Truncate(time.Second)
	from := to.Add(-backfillRange)
	for f := from.Truncate(period); !f.After(to); f = f.Add(period) {
		if !f.Before(from) {
			st.backfill = append(st.backfill, f)
		}
	}
	body := map[string]any{"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)}
	for range 2 {
		if _, err := r.call(ctx, http.MethodPost, "/v1/schedules/backfill:backfill?tenantId="+scheduleTenant, body, nil); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// endSchedules pauses the firing schedule once it ran scheduleRunsFor,
// waits for its decided fires to be made, and returns what the run
// expects of both schedules; their tasks join the run's (drained and
// checked like the others).
func (r *run) endSchedules(ctx context.Context, st *scheduleState) ([]ScheduleRecord, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(st.created.Add(scheduleRunsFor))):
	}
	var every api.Schedule
	if _, err := r.call(ctx, http.MethodPatch, "/v1/schedules/every?tenantId="+scheduleTenant, map[string]any{"paused": true, "note": "run over"}, &every); err != nil {
		return nil, err
	}
	recs := []ScheduleRecord{{ID: "every"}, {ID: "backfill", Expected: st.backfill}}
	if every.NextFireAt != nil {
		for f := st.created.Truncate(st.every).Add(st.every); f.Before(*every.NextFireAt); f = f.Add(st.every) {
			if f.After(st.created) {
				recs[0].Expected = append(recs[0].Expected, f)
			}
		}
	}
	// Decided fires are made within a pass or two; a lost one never is.
	want := len(recs[0].Expected) + len(recs[1].Expected)
	var tasks []api.Task
	for deadline := time.Now().Add(time.Minute); ; {
		var err error
		if tasks, err = r.scheduleTasks(ctx); err != nil {
			return nil, err
		}
		if len(tasks) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, t := range tasks {
		for i := range recs {
			if t.ScheduleID == recs[i].ID {
				recs[i].Tasks = append(recs[i].Tasks, t)
			}
		}
		r.mu.Lock()
		if !slices.Contains(r.ids, t.TaskID) {
			r.ids = append(r.ids, t.TaskID)
		}
		r.mu.Unlock()
	}
	fmt.Fprintf(r.prog, "faults: schedules made %d tasks for %d fire times\n", len(tasks), want)
	return recs, nil
}

// scheduleTasks lists the schedules' tenant's tasks.
func (r *run) scheduleTasks(ctx context.Context) ([]api.Task, error) {
	var all []api.Task
	for token := ""; ; {
		q := url.Values{"tenantId": {scheduleTenant}, "pageSize": {"500"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var page api.ListResponse
		if _, err := r.call(ctx, http.MethodGet, "/v1/tasks?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Tasks...)
		if token = page.NextPageToken; token == "" {
			return all, nil
		}
	}
}

// schedules checks schedule-once and schedule-early.
func (c *checker) schedules() {
	for _, rec := range c.h.Schedules {
		made := map[int64][]string{}
		for _, t := range rec.Tasks {
			if t.ScheduledFireAt == nil {
				c.fail(InvScheduleOnce, t.TaskID, "a task of schedule %s has no scheduledFireAt", rec.ID)
				continue
			}
			f := *t.ScheduledFireAt
			made[f.UnixMilli()] = append(made[f.UnixMilli()], t.TaskID)
			if t.CreatedAt.Before(f) {
				c.fail(InvScheduleEarly, t.TaskID, "the fire of %s at %s was made at %s, before its time", rec.ID, ts(f), ts(t.CreatedAt))
				continue
			}
			// By the workers' clock too: Servo's own times would hide a
			// duty that reads its clock ahead.
			if th := c.h.Tasks[t.TaskID]; th != nil {
				for _, d := range th.Deliveries {
					if d.At.Before(f) {
						c.fail(InvScheduleEarly, t.TaskID, "the fire of %s at %s was delivered at %s, before its time", rec.ID, ts(f), ts(d.At))
						break
					}
				}
			}
		}
		for _, f := range rec.Expected {
			switch ids := made[f.UnixMilli()]; {
			case len(ids) == 0:
				c.fail(InvScheduleOnce, "", "schedule %s: the fire at %s was never made", rec.ID, ts(f))
			case len(ids) > 1:
				c.fail(InvScheduleOnce, "", "schedule %s: the fire at %s was made %d times: %v", rec.ID, ts(f), len(ids), ids)
			}
			delete(made, f.UnixMilli())
		}
		for ms, ids := range made {
			c.fail(InvScheduleOnce, "", "schedule %s: %d tasks for %s, not a fire time it was to make", rec.ID, len(ids), ts(time.UnixMilli(ms)))
		}
	}
}
