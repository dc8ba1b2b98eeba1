package zombie

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// DefaultQuotaRepairEvery is how often a Sweeper recounts the quota
// counters (Config.QuotaRepairEvery).
const DefaultQuotaRepairEvery = time.Minute

// QuotaStore is what the quota duties need beyond Store; *store.Store has
// it. The duties run only when the store's Store implements it and has a
// limited tenant or worker.
type QuotaStore interface {
	QuotasEnabled() bool
	RepairQuotaCounters(ctx context.Context) ([]quota.Repair, error)
}

// quotaDuties runs the two quota duties of a pass: admit (every pass) and
// repair (every QuotaRepairEvery).
func (s *Sweeper) quotaDuties(ctx context.Context, st *Stats, stop time.Time) error {
	qs, ok := s.cfg.Store.(QuotaStore)
	if !ok || !qs.QuotasEnabled() {
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

// admit is the admit duty: it reads the oldest tasks waiting for a run
// slot (the first page of every due shard), orders them fairly (round
// robin over tenants, each tenant's in submit order) and offers each a
// slot (task.EventAdmit), one transaction at a time so that the order
// holds. A tenant whose task found no slot is skipped for the rest of the
// pass, so its later tasks never start before its earlier ones.
func (s *Sweeper) admit(ctx context.Context, stop time.Time) (DutyStats, error) {
	var ds DutyStats
	now := s.cfg.Now().UTC()
	var waiting []task.Task
	var errs []error
	for shard := range s.cfg.Store.DueShards() {
		page, err := s.cfg.Store.DueTasks(ctx, store.DueAdmit, shard, now, s.cfg.PageSize, nil)
		if err != nil {
			ds.QueryErrors++
			errs = append(errs, fmt.Errorf("zombie: admit query (shard %d): %w", shard, err))
			continue
		}
		waiting = append(waiting, page...)
	}
	ds.Due = len(waiting)
	full := map[string]bool{}
	for _, t := range FairOrder(waiting) {
		if ctx.Err() != nil || past(stop) {
			break
		}
		if full[t.TenantID] {
			continue
		}
		out, err := s.apply(ctx, Duty{Name: "admit", Due: store.DueAdmit, Event: task.EventAdmit}, &t)
		ds.add(out)
		if err != nil {
			errs = append(errs, err)
		}
		if out.NoOp > 0 {
			full[t.TenantID] = true
		}
	}
	return ds, errors.Join(errs...)
}

// FairOrder orders tasks waiting for a slot: each tenant's in submit order
// (WaitingSince, then id), the tenants taking turns, the one that has
// waited longest first.
func FairOrder(ts []task.Task) []task.Task {
	sorted := slices.Clone(ts)
	slices.SortFunc(sorted, func(a, b task.Task) int {
		if c := cmp.Compare(timeOf(a.WaitingSince), timeOf(b.WaitingSince)); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var tenants []string
	queues := map[string][]task.Task{}
	for _, t := range sorted {
		if _, ok := queues[t.TenantID]; !ok {
			tenants = append(tenants, t.TenantID)
		}
		queues[t.TenantID] = append(queues[t.TenantID], t)
	}
	out := make([]task.Task, 0, len(ts))
	for round := 0; len(out) < len(ts); round++ {
		for _, tn := range tenants {
			if q := queues[tn]; round < len(q) {
				out = append(out, q[round])
			}
		}
	}
	return out
}

func timeOf(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixNano()
}
