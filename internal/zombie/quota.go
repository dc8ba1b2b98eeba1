package zombie

import (
	"context"
	"errors"
	"time"

	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// admitDuty is the query and event of the quota duty's admission, applied
// as every duty's (apply).
var admitDuty = Duty{Name: "admit", Due: store.DueAdmit, Event: task.EventAdmit}

// quotaDuty runs the quota duty of a pass (package quota's Duty: the
// counter repair when due, then the admission of waiting tasks); its
// figures are Stats.Admit and Stats.QuotaRepairs.
func (s *Sweeper) quotaDuty(ctx context.Context, st *Stats, stop time.Time) error {
	var (
		ds   DutyStats
		errs []error
	)
	res, err := s.quota.Run(ctx, s.cfg.Now().UTC(), s.cfg.PageSize, func() bool { return ctx.Err() != nil || past(stop) }, func(t *task.Task) bool {
		out, err := s.apply(ctx, admitDuty, t)
		ds.add(out)
		if err != nil {
			errs = append(errs, err)
		}
		return out.NoOp == 0
	})
	ds.Due, ds.QueryErrors = res.Waiting, res.QueryErrors
	st.Admit, st.QuotaRepairs = ds, res.Repairs
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
