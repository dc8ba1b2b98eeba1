package zombie

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// DefaultQuotaRepairEvery is how often a Sweeper recounts the quota
// counters (Config.QuotaRepairEvery).
const DefaultQuotaRepairEvery = time.Minute

// QuotaStore is what the quota duties need (part of Store). The duties run
// only when the store has a limited tenant or worker.
type QuotaStore interface {
	QuotasEnabled() bool
	RepairQuotaCounters(ctx context.Context) ([]quota.Repair, error)
}

// admitDuty is the admit duty's query and event.
var admitDuty = Duty{Name: "admit", Due: store.DueAdmit, Event: task.EventAdmit}

// quotaDuties runs the two quota duties of a pass (package quota decides
// both): repair (every QuotaRepairEvery) and admit (every pass).
func (s *Sweeper) quotaDuties(ctx context.Context, st *Stats, stop time.Time) error {
	qs := s.cfg.Store
	if !qs.QuotasEnabled() {
		return nil
	}
	var errs []error
	if now := time.Now(); s.lastRepair.IsZero() || now.Sub(s.lastRepair) >= s.cfg.QuotaRepairEvery {
		s.lastRepair = now
		reps, err := qs.RepairQuotaCounters(ctx)
		for _, r := range reps {
			if r.Skipped {
				continue
			}
			st.QuotaRepairs++
			s.log.WarnContext(ctx, "quota counter drifted; repaired", "kind", r.Kind, "name", r.Name, "shard", r.Shard,
				"queued", r.Queued, "running", r.Running, "wantQueued", r.WantQueued, "wantRunning", r.WantRunning)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("zombie: quota repair: %w", err))
		}
	}
	ds, err := s.admit(ctx, stop)
	st.Admit = ds
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// admit reads the tasks waiting for a run slot (the first page of every
// group of due shards, Store.DueGroups) and hands them to quota.Admit, which offers each a slot
// (task.EventAdmit) in fair order, one transaction at a time.
func (s *Sweeper) admit(ctx context.Context, stop time.Time) (DutyStats, error) {
	var ds DutyStats
	now := s.cfg.Now().UTC()
	var waiting []task.Task
	var errs []error
	for _, shards := range s.cfg.Store.DueGroups(admitDuty.Due) {
		page, err := s.cfg.Store.DueTasks(ctx, admitDuty.Due, shards, now, s.cfg.PageSize, nil)
		if err != nil {
			ds.QueryErrors++
			errs = append(errs, fmt.Errorf("zombie: admit query (shards %v): %w", shards, err))
			continue
		}
		waiting = append(waiting, page...)
	}
	ds.Due = len(waiting)
	quota.Admit(waiting, func() bool { return ctx.Err() != nil || past(stop) }, func(t *task.Task) bool {
		out, err := s.apply(ctx, admitDuty, t)
		ds.add(out)
		if err != nil {
			errs = append(errs, err)
		}
		return out.NoOp == 0
	})
	return ds, errors.Join(errs...)
}
