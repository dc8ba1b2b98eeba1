package faults

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Mutant is a planted bug: text replacements in a copy of Servo's module,
// and the focused run of the harness that must catch it (report at least
// one violation) against `servo dev` built from that copy. The mutation
// check (TestMutants) applies each to a fresh copy; an Old snippet found
// other than exactly once fails the check, so that a rewrite of the code
// a mutant targets is noticed and the mutant re-targeted here.
type Mutant struct {
	Name  string
	Edits []Edit
	// The focused run: the worker behaviours its tasks cycle through, how
	// many tasks (at 2 per second), the stack faults, and the sweeper's
	// cadence (0: SweepEvery).
	Modes      []string
	Tasks      int
	Schedule   []Step
	SweepEvery time.Duration
	// Priority adds the priority workload (Config.Priority) to the
	// focused run.
	Priority bool
	// CI: run by `go test ./...` (the others with -faults.long only).
	CI bool
}

// Edit replaces Old, which must occur exactly once in File (relative to
// the module's root), with New.
type Edit struct{ File, Old, New string }

// slowSweep is the sweeper's cadence of the focused runs in which a
// callback must meet an expired lease or cancel grace before the sweeper
// applies it.
const slowSweep = 30 * time.Second

// Mutants is every planted bug the harness must catch: keep them all in
// this one table.
var Mutants = []Mutant{
	{
		// A paused attempt resumes while the next one runs; with no attempt
		// guard its callbacks are accepted (stale-attempt).
		Name: "attempt-guard-disabled",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\tif m.ev.Attempt != t.Attempt {\n\t\tif identical {",
			New: "\tif false && m.ev.Attempt != t.Attempt {\n\t\tif identical {"}},
		Modes: []string{ModePause}, Tasks: 4, CI: true,
	},
	{
		// A second delivery of one attempt: both workers' callbacks are
		// accepted (one-worker).
		Name: "duplicate-started-accepted",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "if cur != nil && cur.WorkerID != \"\" && cur.WorkerID != m.ev.WorkerID {",
			New: "if false && cur != nil && cur.WorkerID != \"\" && cur.WorkerID != m.ev.WorkerID {"}},
		Modes: []string{ModeDuplicate}, Tasks: 4, CI: true,
	},
	{
		// Every transition with an even seq is left out of its commit's
		// outbox document; servo dev crashes between commits and their
		// publish, so such events are lost for good (events).
		Name: "outbox-write-skipped",
		Edits: []Edit{{File: "internal/store/apply.go",
			Old: "\t\tr.Transitions[i].Trace = tp\n\t}\n\twrites = append(writes, s.outboxWrites(r.Transitions)...)\n",
			New: "\t\tr.Transitions[i].Trace = tp\n\t}\n\twrites = append(writes, s.outboxWrites(slices.DeleteFunc(slices.Clone(r.Transitions), func(tr task.Transition) bool { return tr.Seq%2 == 0 }))...)\n"},
			{File: "internal/store/apply.go", Old: "import (\n", New: "import (\n\t\"slices\"\n"}},
		Modes: []string{ModeOK, ModeFailOnce}, Tasks: 40,
		Schedule: []Step{{FaultCrashAfterCommit, 2 * time.Second, 20 * time.Second}},
	},
	{
		// A paused attempt resumes past its lease, before the (slow)
		// sweeper applied it: its callbacks are accepted (lease).
		Name: "lease-check-skipped",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\t\tcase m.leaseOver():\n\t\t\tm.expire()",
			New: "\t\tcase false && m.leaseOver():\n\t\t\tm.expire()"}},
		Modes: []string{ModePause}, Tasks: 4, SweepEvery: slowSweep,
	},
	{
		// Servo credits no outage: the workers heartbeating through a
		// Firestore freeze longer than the lease lose their attempts when
		// it thaws (lease, by the credited rule).
		Name: "outage-credit-off",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\tcredit := outageCredit(m.ev.Outages, end.Add(-d), m.now)\n",
			New: "\tcredit := 0 * outageCredit(m.ev.Outages, end.Add(-d), m.now)\n"}},
		Modes: []string{ModeOK}, Tasks: 24, CI: true,
		Schedule: []Step{{FaultFirestoreFreeze, 4 * time.Second, 10 * time.Second}},
	},
	{
		// The skip rule made greedy: a plain heartbeat renews the lease
		// only in its last eighth, so a worker heartbeating plainly at the
		// default ratio, or just under half the lease left, loses its
		// attempt (lease: expired before the contract's lease).
		Name: "heartbeat-skip-greedy",
		Edits: []Edit{{File: "internal/task/heartbeats.go",
			Old: "\treturn left <= timeout/2 || left < interval+interval/2\n",
			New: "\treturn left <= timeout/8 || left < interval/4\n"}},
		Modes: []string{ModePlain, ModeSkipHalf}, Tasks: 6, CI: true,
	},
	{
		// The skip rule forgets its interval bound: a plain heartbeat with
		// more than half the lease but under 1.5 intervals left is not
		// written, and a worker with a long interval loses its attempt.
		Name: "heartbeat-skip-ignores-interval",
		Edits: []Edit{{File: "internal/task/heartbeats.go",
			Old: "\treturn left <= timeout/2 || left < interval+interval/2\n",
			New: "\treturn left <= timeout/2 || interval < 0\n"}},
		Modes: []string{ModeSkipInterval}, Tasks: 4,
	},
	{
		// The pacing hint drops the lease's margin (docs/contract.md
		// §5.7): it tells a worker to wait until the lease ends, so a
		// worker that heeds it sends its heartbeat as the lease runs out
		// (pacing: expired, or a zombie, though on time by the hint; and
		// a hint without the margin).
		Name: "pacing-margin-dropped",
		Edits: []Edit{{File: "internal/task/pacing.go",
			Old: "\thint := t.LeaseExpiresAt.Sub(now) - LeaseMargin(timing)\n",
			New: "\thint := t.LeaseExpiresAt.Sub(now)\n"}},
		Modes: []string{ModePaced}, Tasks: 4, CI: true,
	},
	{
		// A cancelled attempt resumes past its grace, before the (slow)
		// sweeper applied it: its callbacks are accepted (cancel-grace).
		Name: "cancel-grace-not-enforced",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\t\tcase t.State == api.Cancelling && m.graceOver():\n\t\t\tm.cancelTimeout()",
			New: "\t\tcase false && t.State == api.Cancelling && m.graceOver():\n\t\t\tm.cancelTimeout()"}},
		Modes: []string{ModeCancelLate}, Tasks: 4, SweepEvery: slowSweep,
	},
	{
		// The first attempt's Cloud Task is created without the delayed
		// start as its scheduleTime: it is delivered at once (early-start).
		Name: "start-delay-ignored",
		Edits: []Edit{{File: "internal/enqueue/enqueue.go",
			Old: "\tif t.NotBefore != nil && t.NotBefore.After(now) {\n\t\tct.ScheduleTime",
			New: "\tif t.Attempt > 1 && t.NotBefore != nil && t.NotBefore.After(now) {\n\t\tct.ScheduleTime"}},
		Modes: []string{ModeDelayed}, Tasks: 4, CI: true,
	},
	{
		// A schedule's fire gets a random task id instead of one derived
		// from (schedule, kind, fire time): the run's backfill, repeated
		// as a client retries, makes its fires twice (schedule-once).
		Name: "fire-id-not-derived",
		Edits: []Edit{{File: "internal/dispatcher/schedules_fire.go",
			Old: "\treturn task.DerivedTaskID(at, ",
			New: "\treturn task.NewTaskID(at) + strings.TrimPrefix(\"\", "},
			{File: "internal/dispatcher/schedules_fire.go", Old: "import (\n", New: "import (\n\t\"strings\"\n"}},
		Modes: []string{ModeOK}, Tasks: 4, CI: true,
	},
	{
		// A repeated completed of a task already ended is applied again
		// instead of replayed: its terminal state is entered twice
		// (events, committed).
		Name: "terminal-reentered",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\tif t.State.Terminal() {\n\t\tswitch {\n\t\tcase identical:",
			New: "\tif t.State.Terminal() && m.ev.Kind != EventCompleted {\n\t\tswitch {\n\t\tcase identical:"}},
		Modes: []string{ModeCrashAfterCommit}, Tasks: 6,
	},
	{
		// The sweeper's dispatch duty is gone: a task whose Cloud Task was
		// never created (servo dev crashed before it) is never re-driven
		// and never ends (terminal).
		Name: "dispatch-redrive-off",
		Edits: []Edit{{File: "internal/zombie/zombie.go",
			Old: "\t{Name: \"dispatch\", Due: store.DueDispatch, Event: task.EventRedrive},\n",
			New: ""}},
		Modes: []string{ModeOK}, Tasks: 20,
		Schedule: []Step{{FaultCrashBeforeCreateTask, 2 * time.Second, 8 * time.Second}},
	},
	{
		// A store outage answered 500 instead of 503 RETRY: a conforming
		// worker gets an answer the contract does not give it (answer).
		Name: "unavailable-answered-500",
		Edits: []Edit{{File: "internal/callbacks/handler.go",
			Old: "\t\tx.reject(http.StatusServiceUnavailable, api.Retry, api.CodeUnavailable, \"the task store is unavailable; retry with the same body\")",
			New: "\t\tx.reject(http.StatusInternalServerError, api.Retry, api.CodeUnavailable, \"the task store is unavailable; retry with the same body\")"}},
		Modes: []string{ModeOK}, Tasks: 16,
		Schedule: []Step{{FaultFirestoreFreeze, 3 * time.Second, 10 * time.Second}},
	},
	{
		// A callback waits on a frozen store for as long as it stays
		// frozen, not the store timeout (latency).
		Name: "store-timeout-ignored",
		Edits: []Edit{{File: "internal/callbacks/handler.go",
			Old: "\ttctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.StoreTimeout)",
			New: "\ttctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 100*h.cfg.StoreTimeout)"}},
		Modes: []string{ModeOK}, Tasks: 16,
		Schedule: []Step{{FaultFirestoreFreeze, 3 * time.Second, 35 * time.Second}},
	},
	{
		// An attempt record takes the worker's clock for its last
		// heartbeat (server-time: the skewed workers are an hour off).
		Name: "worker-clock-recorded",
		Edits: []Edit{{File: "internal/task/machine.go",
			Old: "\ta.LastHeartbeatAt = &now\n",
			New: "\ta.LastHeartbeatAt = &now\n\tif m.ev.Heartbeat != nil && m.ev.Heartbeat.HeartbeatAt != nil {\n\t\ta.LastHeartbeatAt = m.ev.Heartbeat.HeartbeatAt\n\t}\n"}},
		Modes: []string{ModeSkew}, Tasks: 4,
	},
	{
		// The admit duty orders the waiting tasks by waitingSince alone,
		// not by rank (task.WaitRank): the priority workload's priority-1
		// tasks wait behind the whole older priority-5 backlog, which
		// starts while they wait (priority).
		Name: "wait-rank-ignored",
		Edits: []Edit{{File: "internal/quota/sweep.go",
			Old: "\t\tif c := cmp.Compare(timeOf(task.WaitRank(&a)), timeOf(task.WaitRank(&b))); c != 0 {\n",
			New: "\t\tif c := cmp.Compare(timeOf(a.WaitingSince), timeOf(b.WaitingSince)); c != 0 {\n"}},
		Modes: []string{ModeOK}, Tasks: 4, Priority: true,
	},
	{
		// The callbacks log the bearer token they verify (token-in-log).
		Name: "token-logged",
		Edits: []Edit{{File: "internal/callbacks/handler.go",
			Old: "\tclaims, err := h.cfg.Keys.Verify(strings.TrimSpace(authz[len(bearer):]), x.now)\n",
			New: "\th.cfg.Logger.Info(\"verifying a task token\", \"token\", strings.TrimSpace(authz[len(bearer):]))\n\tclaims, err := h.cfg.Keys.Verify(strings.TrimSpace(authz[len(bearer):]), x.now)\n"}},
		Modes: []string{ModeOK}, Tasks: 4,
	},
	{
		// Each task's idempotency record is filed under a name of its own:
		// a submit repeated after servo dev crashed past its commit makes
		// a second task (duplicate-task).
		Name: "idempotency-record-misfiled",
		Edits: []Edit{{File: "internal/store/create.go",
			Old: "setWrite(s.idemName(nt.TenantID, nt.IdempotencyKey), idemDoc{",
			New: "setWrite(s.idemName(nt.TenantID, nt.IdempotencyKey+nt.ID), idemDoc{"}},
		Modes: []string{ModeOK}, Tasks: 30,
		Schedule: []Step{{FaultCrashAfterCommit, 2 * time.Second, 12 * time.Second}},
	},
	{
		// The schedule duty fires what is due within the next 3 s: fires
		// are made before their time (schedule-early).
		Name: "fire-made-early",
		Edits: []Edit{{File: "internal/dispatcher/schedules_fire.go",
			Old: "\t\t\t\tif ref.DueAt != nil && ref.DueAt.After(now) {",
			New: "\t\t\t\tif ref.DueAt != nil && ref.DueAt.After(now.Add(3*time.Second)) {"},
			{File: "internal/dispatcher/schedules_fire.go",
				Old: "\t\t\t\t\t_, fs, err := h.fire(ctx, ref.TenantID, ref.ScheduleID, now, nil)",
				New: "\t\t\t\t\t_, fs, err := h.fire(ctx, ref.TenantID, ref.ScheduleID, now.Add(3*time.Second), nil)"}},
		Modes: []string{ModeOK}, Tasks: 4,
	},
}

// CopyModule copies the module at src (its Go sources, go.mod, go.sum and
// every other file, but not .git) into dst.
func CopyModule(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// Apply applies m's edits to the module copied at root. Each Old must be
// found exactly once.
func (m Mutant) Apply(root string) error {
	files, err := m.Mutated(root)
	for rel, b := range files {
		if werr := os.WriteFile(filepath.Join(root, filepath.FromSlash(rel)), b, 0o644); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return err
}

// Mutated returns the files m edits, read from the module at root, with
// m's edits applied (module-relative path → contents). Each Old must be
// found exactly once, after the edits before it in the same file.
func (m Mutant) Mutated(root string) (map[string][]byte, error) {
	var errs []error
	files := map[string][]byte{}
	for _, e := range m.Edits {
		b, ok := files[e.File]
		if !ok {
			var err error
			if b, err = os.ReadFile(filepath.Join(root, filepath.FromSlash(e.File))); err != nil {
				errs = append(errs, fmt.Errorf("mutant %s: %w", m.Name, err))
				continue
			}
		}
		if n := bytes.Count(b, []byte(e.Old)); n != 1 {
			errs = append(errs, fmt.Errorf("mutant %s: %s holds the snippet %d times, want once (re-target the mutant in internal/faults/mutants.go):\n%s",
				m.Name, e.File, n, indent(e.Old)))
			continue
		}
		files[e.File] = bytes.Replace(b, []byte(e.Old), []byte(e.New), 1)
	}
	return files, errors.Join(errs...)
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
