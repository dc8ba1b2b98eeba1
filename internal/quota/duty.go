package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/servo-dev/servo/internal/task"
)

// DefaultRepairEvery is how often the quota duty recounts the counters.
const DefaultRepairEvery = time.Minute

// OldestEvery is how often the quota duty also reads the tasks that have
// waited longest (store.DueAdmitOldest), beside the lowest ranked: it
// finds tasks a build before ranks left waiting without one (they have no
// waitRank to be found by). Rare, since each read is a query per group of
// due shards at every pass it runs in, and only an upgrade leaves such
// tasks; the first is OldestEvery after the duty starts.
const OldestEvery = 10 * time.Minute

// DutyStore is what the sweeper's quota duty needs of the store (part of
// the sweeper's store contract; *store.Store has it).
type DutyStore interface {
	// QuotasEnabled reports whether any scope is limited: without one the
	// duty does nothing.
	QuotasEnabled() bool
	// RepairQuotaCounters recounts the counter shards and rewrites the
	// drifted ones (Counters.Repair).
	RepairQuotaCounters(ctx context.Context) ([]Repair, error)
	// WaitingForSlot returns the tasks QUEUED waiting for a run slot, the
	// limit of every group of due shards that rank lowest (task.WaitRank)
	// and, with oldest, those that have waited longest too, and how many
	// groups' queries failed (their errors joined).
	WaitingForSlot(ctx context.Context, now time.Time, limit int, oldest bool) ([]task.Task, int, error)
}

// Duty is the sweeper's one quota duty: each pass, when a scope is
// limited, it recounts the counters (every repairEvery) and offers the
// tasks waiting for a run slot a slot each, in fair order (Admit).
type Duty struct {
	store       DutyStore
	repairEvery time.Duration
	log         *slog.Logger

	mu         sync.Mutex
	lastRepair time.Time
	lastOldest time.Time
}

// NewDuty returns the quota duty over store; repairEvery <= 0 means
// DefaultRepairEvery.
func NewDuty(store DutyStore, repairEvery time.Duration, log *slog.Logger) *Duty {
	if repairEvery <= 0 {
		repairEvery = DefaultRepairEvery
	}
	return &Duty{store: store, repairEvery: repairEvery, log: log, lastOldest: time.Now()}
}

// DutyResult counts what one run of the duty did.
type DutyResult struct {
	// Waiting is the number of waiting tasks read; QueryErrors the groups
	// of due shards whose query failed.
	Waiting, QueryErrors int
	// Repairs counts the counter shards found drifted and rewritten.
	Repairs int
}

// Run is one pass of the duty at now: the repair when due, then the
// admission of up to limit waiting tasks a group of due shards. offer
// applies task.EventAdmit to one task and reports whether it took a slot;
// stop ends the admission early (the pass's end). The error joins every
// failure; nothing stops the pass.
func (d *Duty) Run(ctx context.Context, now time.Time, limit int, stop func() bool, offer func(*task.Task) bool) (DutyResult, error) {
	var res DutyResult
	if !d.store.QuotasEnabled() {
		return res, nil
	}
	var errs []error
	d.mu.Lock()
	due := d.lastRepair.IsZero() || time.Since(d.lastRepair) >= d.repairEvery
	if due {
		d.lastRepair = time.Now()
	}
	oldest := time.Since(d.lastOldest) >= d.oldestEvery()
	if oldest {
		d.lastOldest = time.Now()
	}
	d.mu.Unlock()
	if due {
		reps, err := d.store.RepairQuotaCounters(ctx)
		for _, r := range reps {
			if r.Skipped {
				continue
			}
			res.Repairs++
			d.log.WarnContext(ctx, "quota counter drifted; repaired", "kind", r.Kind, "name", r.Name, "shard", r.Shard,
				"queued", r.Queued, "running", r.Running, "wantQueued", r.WantQueued, "wantRunning", r.WantRunning)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("quota: repair: %w", err))
		}
	}
	// The longest waiting too, every OldestEvery: a task left waiting by a
	// build before ranks has none to be found by.
	waiting, failed, err := d.store.WaitingForSlot(ctx, now, limit, oldest)
	res.Waiting, res.QueryErrors = len(waiting), failed
	if err != nil {
		errs = append(errs, fmt.Errorf("quota: waiting tasks: %w", err))
	}
	Admit(waiting, stop, offer)
	return res, errors.Join(errs...)
}

// oldestEvery is OldestEvery, or the repair period when that is longer.
func (d *Duty) oldestEvery() time.Duration { return max(OldestEvery, d.repairEvery) }
