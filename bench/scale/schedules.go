package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

// The recorded schedules (docs/scale.md, "Schedules"): every schedule
// fires twice, schedEvery apart; one in ten (by number) fires with the
// others of its kind on the same instant, the top of the recording's
// "minute", the rest at their own times spread over the period. The
// tenants and workers are the task workload's, in its shares (the
// limited tenants, whose fires would wait for a slot, left out).
const (
	// schedEvery leaves a fire's task time to end before the next fire on
	// a loaded machine (at 2 s, a slow delivery made the second fire
	// SKIPPED and the recording fail).
	schedEvery = 5 * time.Second
	schedFires = 2
	schedLead  = 3 * time.Second // from the last create to the top of the minute
)

// recordSchedules creates n schedules on a fresh stack, waits until each
// has made its fires, and returns what the fires wrote, dispatched and
// published (the creates left out: a schedule is created once, and fires
// for ever).
func recordSchedules(ctx context.Context, project string, hosts emulatorHosts, p plan, n int, tg scale.Target) (scale.Traffic, error) {
	rec := newRecorder()
	box := newMailbox()
	defer box.srv.Close()
	stack, queues, err := recordingStack(ctx, project, hosts, p, rec, box.srv.URL, tg)
	if err != nil {
		return scale.Traffic{}, err
	}
	defer stack.Close()
	d := &driver{base: stack.URL, box: box, rec: rec}
	// Each fire's task runs at once: started, then SUCCEEDED, so that the
	// next fire is not skipped (overlap SKIP, the default).
	box.each = func(env api.Envelope) {
		if _, err := d.callback(env, "started", api.StartedRequest{Attempt: env.Attempt, WorkerID: "w"}); err == nil {
			_, _ = d.callback(env, "completed", api.CompletedRequest{Attempt: env.Attempt, WorkerID: "w", Outcome: api.OutcomeSucceeded})
		}
	}

	// The top of the minute: after every create, on a whole period.
	top := time.Now().Add(schedLead + time.Duration(n)*20*time.Millisecond).Truncate(schedEvery).Add(schedEvery)
	type made struct{ tenant, id string }
	var scheds []made
	tenants := map[string]scale.Role{}
	for i := range n {
		tenant := p.tenantOf(i, tg.HotShare)
		if p.tenants[tenant] == scale.Limited {
			tenant = fmt.Sprintf("tenant-%d", i%ordinaryTenants+1)
		}
		tenants[tenant] = p.tenants[tenant]
		start := top
		if i%10 != 0 { // spread over the period
			start = top.Add(schedEvery * time.Duration(i) / time.Duration(n))
		}
		id := fmt.Sprintf("sched-%03d", i)
		req := api.ScheduleRequest{ScheduleID: id, TenantID: tenant, WorkspaceID: "ws",
			Spec: api.ScheduleSpec{EveryMs: schedEvery.Milliseconds(), StartAt: start.UTC().Format(time.RFC3339Nano),
				EndAt: start.Add(schedEvery*(schedFires-1) + schedEvery/2).UTC().Format(time.RFC3339Nano)},
			Task: api.SubmitRequest{Worker: schedWorker(p, i, tenant), TaskKey: userKey("sched", i), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
				HeartbeatIntervalMs: ptr(int64(500)), HeartbeatTimeoutMs: ptr(heartbeatTimeout.Milliseconds())}}
		st, out, err := d.do("POST", "/v1/schedules", req, "")
		if err != nil || st != http.StatusCreated {
			return scale.Traffic{}, fmt.Errorf("create schedule %s: %d %s %v", id, st, out, err)
		}
		scheds = append(scheds, made{tenant, id})
	}
	if time.Now().After(top) {
		return scale.Traffic{}, fmt.Errorf("the %d creates took past the top of the minute", n)
	}
	// What the creates wrote is left out.
	if err := stack.Events.Flush(ctx); err != nil {
		return scale.Traffic{}, err
	}
	writes0, calls0 := len(rec.writes.Writes()), len(rec.calls)
	start := time.Now()

	tasks, fires := map[string]scale.TaskInfo{}, map[string]int{}
	deadline := top.Add(schedEvery*schedFires + 60*time.Second)
	for i, s := range scheds {
		for {
			st, out, err := d.do("GET", "/v1/schedules/"+s.id+"?tenantId="+url.QueryEscape(s.tenant), nil, "")
			var v api.Schedule
			if err == nil && st == http.StatusOK {
				err = json.Unmarshal(out, &v)
			} else if err == nil {
				err = fmt.Errorf("%d %s", st, out)
			}
			if err != nil {
				return scale.Traffic{}, fmt.Errorf("schedule %s: %w", s.id, err)
			}
			if ids := madeFires(v); len(ids) == schedFires {
				for _, id := range ids {
					tasks[id] = scale.TaskInfo{Tenant: s.tenant, Worker: schedWorker(p, i, s.tenant)}
				}
				fires["schedules/"+store.ScheduleDocID(s.tenant, s.id)] = schedFires
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return scale.Traffic{}, fmt.Errorf("schedule %s made %d of its %d fires: %s", s.id, len(madeFires(v)), schedFires, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := stack.Events.Flush(ctx); err != nil {
		return scale.Traffic{}, err
	}
	events, err := attribute(rec.writes.Writes()[writes0:])
	if err != nil {
		return scale.Traffic{}, fmt.Errorf("the model cannot attribute every write: %w", err)
	}
	rec.mu.Lock()
	events = append(events, rec.calls[calls0:]...)
	rec.mu.Unlock()
	spread, pairs := families(events, tg, p, tenants, queues)
	return scale.Traffic{Events: events, Tasks: tasks, Tenants: tenants, Workers: p.workers,
		Duration: time.Since(start), SweepEvery: recordedSweep, Spread: spread, Pairs: pairs, Fires: fires}, nil
}

// schedWorker is schedule i's worker: the task workload's, but never the
// limited worker, whose two run slots would hold the same minute's fires
// back and make the next fire of a schedule SKIPPED.
func schedWorker(p plan, i int, tenant string) string {
	if w := p.workerOf(i, tenant); w != p.limitedWorker {
		return w
	}
	return "worker-1"
}

// madeFires are the task ids of v's fires made so far (STARTED, their
// task there).
func madeFires(v api.Schedule) []string {
	var ids []string
	for _, f := range v.RecentFires {
		if f.Outcome == api.FireStarted && f.TaskID != "" && f.State != "" {
			ids = append(ids, f.TaskID)
		}
	}
	return ids
}

func ptr[T any](v T) *T { return &v }
