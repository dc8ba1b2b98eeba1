package zombie

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/servo-dev/servo/internal/store"
)

// ScheduleDueStore is what NextDue reads the schedules' due times from
// (*store.Store has it); a Store without it makes NextDue report the
// schedule duty due at once whenever Config.Schedules is set.
type ScheduleDueStore interface {
	ScheduleGroups() [][]int
	DueSchedules(ctx context.Context, shards []int, now time.Time, limit int, after *store.DueCursor) ([]store.Schedule, error)
}

// GraceRedriver is a Redriver that says how old an undelivered outbox
// entry must be before Redrive takes it (*events.Publisher is one).
// Without it NextDue counts an entry due from its next try.
type GraceRedriver interface {
	RedriveGrace() time.Duration
}

// NextDue returns the earliest time, at or before until, at which a pass
// could find work that the store already holds: the first due time of
// every duty's query (Duties, and the quota admission when quotas are
// enabled), of the due schedules (when Config.Schedules is set), and of
// the outbox re-drive (when Config.Redriver is set, its next try plus the
// re-drive's grace). Each is read by the duty's own due query over every
// group of due shards, one document each; the earliest is what any pass
// would find, whatever the duty's due field means. found is false when
// nothing is due by until.
//
// It does not see what no query shows: the counter repair and the
// leftover-stream cleaning (time since this Sweeper last ran them), and
// writes made after it read. A caller that sleeps until the time it
// returns (the local stack) wakes on writes and keeps a bounded fallback
// period for the rest. The reads are the sweeper's (store.WithCause).
func (s *Sweeper) NextDue(ctx context.Context, until time.Time) (next time.Time, found bool, err error) {
	ctx = store.WithCause(ctx, "sweeper")
	until = until.UTC()
	var errs []error
	see := func(at time.Time) {
		if !at.After(until) && (!found || at.Before(next)) {
			next, found = at, true
		}
	}
	duties := Duties
	if s.cfg.Store.QuotasEnabled() {
		// The admission by the time a task waits from, not its rank: a
		// delayed start can be admitted from its start on, ahead of its
		// rank.
		duties = append(duties[:len(duties):len(duties)], Duty{Name: admitDuty.Name, Due: store.DueAdmitOldest, Event: admitDuty.Event})
	}
	for _, d := range duties {
		for _, group := range s.cfg.Store.DueGroups(d.Due) {
			page, err := s.cfg.Store.DueTasks(ctx, d.Due, group, until, 1, nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("zombie: next due %s (shards %v): %w", d.Name, group, err))
				continue
			}
			for i := range page {
				if at := store.DueTime(d.Due, &page[i]); at != nil {
					see(*at)
				}
			}
		}
	}
	if s.cfg.Schedules != nil {
		if ss, ok := s.cfg.Store.(ScheduleDueStore); ok {
			for _, group := range ss.ScheduleGroups() {
				page, err := ss.DueSchedules(ctx, group, until, 1, nil)
				if err != nil {
					errs = append(errs, fmt.Errorf("zombie: next due schedule (shards %v): %w", group, err))
					continue
				}
				for _, sc := range page {
					if sc.DueAt != nil {
						see(*sc.DueAt)
					}
				}
			}
		} else {
			see(s.cfg.Now().UTC())
		}
	}
	if s.cfg.Redriver != nil {
		var grace time.Duration
		if g, ok := s.cfg.Redriver.(GraceRedriver); ok {
			grace = max(0, g.RedriveGrace())
		}
		for _, group := range s.cfg.Store.OutboxGroups() {
			es, err := s.cfg.Store.Undelivered(ctx, group, until.Add(-grace), 1)
			if err != nil {
				errs = append(errs, fmt.Errorf("zombie: next due outbox entry (shards %v): %w", group, err))
				continue
			}
			for _, e := range es {
				see(e.NextTryAt.Add(grace))
			}
		}
	}
	return next, found, errors.Join(errs...)
}
