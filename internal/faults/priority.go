package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// The priority workload (Config.Priority, docs/contract.md §12
// "Priority"): a second worker name, PriorityWorker, served by the same
// fleet, has a worker quota of PriorityMaxRunning run slots (servo dev
// --quotas; the worker "sim" and the tenants stay unlimited). Each round
// submits PriorityBacklog priority-5 tasks to it at once, then, once every
// one of them was answered and while they wait, PriorityBurst priority-1
// tasks at once at each of PriorityAt after the round began, under
// whatever faults the run injects then (in the short mode: ShortSchedule's
// Firestore freeze, its crashes before a Cloud Task is created, a calm
// moment). A burst outnumbers the slots: a slot freed while the admit duty
// could not run (Servo down, a store or Pub/Sub outage) is taken by the
// first task created, whatever its priority, so at least one of a burst
// waits. Every task behaves (ModeOK, PriorityBeats heartbeats: about 2 s
// of work). Each priority-1 task is read every PriorityPoll from its
// submit's answer until it no longer waits for a slot (TaskHistory.Slot):
// the priority invariant counts the lower-priority tasks that started
// while it was seen waiting. The short mode runs one round; the long mode
// a round every PriorityRoundEvery (at least: a round ends once its
// priority-1 tasks were seen admitted) while it submits.
const (
	PriorityWorker     = "simq"
	PriorityMaxRunning = 2
	PriorityBacklog    = 12
	PriorityBurst      = 3
	PriorityBeats      = 5
	PriorityPoll       = 250 * time.Millisecond
	PriorityRoundEvery = 45 * time.Second
	// priorityLow and priorityHigh are the backlog's and the urgent
	// tasks' priorities.
	priorityLow, priorityHigh = task.LowestPriority, task.HighestPriority
	// prioritySubmitters is how many backlog submits are in flight at once.
	prioritySubmitters = 4
)

// PriorityAt are the times of a round's bursts of priority-1 submits,
// from the round's start.
var PriorityAt = []time.Duration{6 * time.Second, 17 * time.Second, 21 * time.Second}

// priorityQuotas is servo dev's --quotas file of a run with the priority
// workload: PriorityWorker's maxRunning, nothing else limited.
func priorityQuotas(dir string) (string, error) {
	b, err := json.Marshal(map[string]any{"workers": map[string]any{PriorityWorker: map[string]int{"maxRunning": PriorityMaxRunning}}})
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "quotas-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// priorityLoad runs the priority workload's rounds: one, or (with
// Duration) one every PriorityRoundEvery at least until a round would
// outlast the submits.
func (r *run) priorityLoad(ctx context.Context, t0 time.Time) {
	roundLen := PriorityAt[len(PriorityAt)-1]
	for round := 0; ; round++ {
		start := time.Now()
		r.priorityRound(ctx, round)
		if r.cfg.Duration <= 0 || ctx.Err() != nil {
			return
		}
		next := later(start.Add(PriorityRoundEvery), time.Now())
		if next.Add(roundLen).Sub(t0) > r.cfg.Duration {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}

// priorityRound submits a round's backlog, waits for every submit's
// answer (so that no lower-priority task is created after a priority-1
// one: a submit that finds a slot free takes it, waiting or not), then
// submits the bursts of priority-1 tasks on their times, each task
// watched until it is admitted.
func (r *run) priorityRound(ctx context.Context, round int) {
	start := time.Now()
	fmt.Fprintf(r.prog, "faults: priority round %d: %d priority-%d tasks to %s (maxRunning %d)\n", round, PriorityBacklog, priorityLow, PriorityWorker, PriorityMaxRunning)
	var backlog sync.WaitGroup
	clients := make(chan struct{}, prioritySubmitters)
	for i := range PriorityBacklog {
		key := fmt.Sprintf("%s-prio%d-low-%d", r.cfg.Project, round, i)
		clients <- struct{}{}
		backlog.Go(func() {
			defer func() { <-clients }()
			r.submitTo(ctx, key, Payload{Mode: ModeOK, Heartbeats: PriorityBeats}, PriorityWorker, priorityLow)
		})
	}
	backlog.Wait()
	var urgent sync.WaitGroup
	defer urgent.Wait()
	for i, at := range PriorityAt {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(at))):
		}
		for j := range PriorityBurst {
			key := fmt.Sprintf("%s-prio%d-high-%d-%d", r.cfg.Project, round, i, j)
			urgent.Go(func() {
				if id := r.submitTo(ctx, key, Payload{Mode: ModeOK, Heartbeats: PriorityBeats}, PriorityWorker, priorityHigh); id != "" {
					r.watchSlot(ctx, id)
				}
			})
		}
	}
}

// watchSlot reads the task every PriorityPoll, recording whether it still
// waits for a run slot, until it does not (or it ended, or two minutes
// passed).
func (r *run) watchSlot(ctx context.Context, id string) {
	for giveUp := time.Now().Add(2 * time.Minute); time.Now().Before(giveUp); {
		sent := time.Now()
		v, ok := r.get(ctx, id)
		received := time.Now()
		if ok {
			waiting := v.State == api.Queued && v.WaitingSince != nil
			r.rec.With(func(h *History) {
				th := h.Task(id)
				th.Slot = append(th.Slot, SlotSeen{Sent: sent, Received: received, State: v.State, Waiting: waiting})
			})
			if !waiting {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(PriorityPoll):
		}
	}
}
