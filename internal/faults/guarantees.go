package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Guarantee is one promise of docs/contract.md §15 and what holds Servo to
// it: the checker's invariants that judge it, and the planted bugs
// (Mutants) that break it, each of which one of those invariants must
// catch (TestMutants).
type Guarantee struct {
	// Promise is the contract's promise, Section where it makes it.
	Promise, Section string
	Invariants       []string
	Mutants          []string
}

// Guarantees is every promise the fault harness checks: keep them all in
// this one table, rendered into docs/contract.md §15 (GuaranteeTable). A
// guarantee without an invariant or a mutant, an invariant or a mutant
// without a guarantee, fails TestGuarantees.
var Guarantees = []Guarantee{
	{"One accepted outcome per task: a terminal state is entered once and never left, and COMMITTED answers agree with it", "§1.2, §4.6",
		[]string{InvNotTerminal, InvCommitted, InvEvents}, []string{"terminal-reentered"}},
	{"Nothing is accepted from a superseded attempt, and attempts never go backwards", "§4.5",
		[]string{InvStaleAttempt, InvAttemptOrder}, []string{"attempt-guard-disabled"}},
	{"One worker per attempt: a second delivery of a started attempt is refused", "§4.6",
		[]string{InvOneWorker}, []string{"duplicate-started-accepted"}},
	{"An expired lease never comes back: nothing is accepted of an attempt past its lease", "§5.3",
		[]string{InvLease, InvZombie}, []string{"lease-check-skipped"}},
	{"A worker heartbeating at its interval never loses its lease by the rule that skips writing a heartbeat with nothing new", "§5.3",
		[]string{InvLease}, []string{"heartbeat-skip-greedy", "heartbeat-skip-ignores-interval"}},
	{"A worker that paces its plain heartbeats by Servo's hint never loses its lease by it, and the hint keeps the lease's margin and the cancel notice's bound", "§5.7",
		[]string{InvPacing}, []string{"pacing-margin-dropped"}},
	{"Servo's own outages never make a healthy worker a zombie: a lease or cancel grace runs its length outside them", "§5.3",
		[]string{InvLease, InvCancelGrace}, []string{"outage-credit-off"}},
	{"Nothing is accepted of a cancelled attempt once its grace ran out", "§7",
		[]string{InvCancelGrace}, []string{"cancel-grace-not-enforced"}},
	{"A task stuck before it starts is re-driven: every task ends in one terminal state", "§5.4",
		[]string{InvNotTerminal}, []string{"dispatch-redrive-off"}},
	{"Every transition's event is written with it and delivered at least once, gapless along the machine's edges", "§8.1, §8.5",
		[]string{InvEvents}, []string{"outbox-write-skipped"}},
	{"A conforming request gets only the contract's answers (200, 409/410 CANCELLED, 503 RETRY with Retry-After)", "§4.4",
		[]string{InvAnswer}, []string{"unavailable-answered-500"}},
	{"A callback is answered within the store timeout, 503 RETRY when the store does not answer", "§4.4",
		[]string{InvLatency}, []string{"store-timeout-ignored"}},
	{"Servo's time only decides timers and is what attempt records show", "§5.1",
		[]string{InvServerTime}, []string{"worker-clock-recorded"}},
	{"One task per idempotency key, however often a submit is repeated", "§9.2",
		[]string{InvDuplicateTask}, []string{"idempotency-record-misfiled"}},
	{"A delayed start is never early: no delivery, no accepted callback before startAt", "§9.2",
		[]string{InvEarlyStart}, []string{"start-delay-ignored"}},
	{"A schedule's fire is made exactly once, under repeated passes, triggers, backfills and crashes", "§16.3",
		[]string{InvScheduleOnce}, []string{"fire-id-not-derived"}},
	{"No schedule fire is made before its time", "§16.3",
		[]string{InvScheduleEarly}, []string{"fire-made-early"}},
	{"A task waiting for a run slot of a limited worker gets one before every lower-priority task it outranks: of those, only the ones holding the slots when it came start before it", "§12",
		[]string{InvPriority}, []string{"wait-rank-ignored"}},
	{"No task token in any log", "§3, §15",
		[]string{InvTokenInLog}, []string{"token-logged"}},
}

// GuaranteesOf returns the guarantees that name mutant.
func GuaranteesOf(mutant string) []Guarantee {
	var out []Guarantee
	for _, g := range Guarantees {
		if slices.Contains(g.Mutants, mutant) {
			out = append(out, g)
		}
	}
	return out
}

// GuaranteeTable renders Guarantees as the Markdown table of
// docs/contract.md §15; the mutants `go test ./...` runs are marked CI.
func GuaranteeTable() string {
	ci := map[string]bool{}
	for _, m := range Mutants {
		ci[m.Name] = m.CI
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| guarantee | § | invariants | mutants |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, g := range Guarantees {
		var ms []string
		for _, m := range g.Mutants {
			cell := "`" + m + "`"
			if ci[m] {
				cell += " (CI)"
			}
			ms = append(ms, cell)
		}
		var invs []string
		for _, inv := range g.Invariants {
			invs = append(invs, "`"+inv+"`")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Promise, g.Section, strings.Join(invs, ", "), strings.Join(ms, ", "))
	}
	return b.String()
}

// Caught is what the mutation check saw of one mutant's focused run.
type Caught struct {
	Mutant string
	// By counts the violations by invariant; ByItsGuarantee says whether
	// one of them is an invariant of a guarantee the mutant breaks.
	By             map[string]int
	ByItsGuarantee bool
	// Nth is the submit order of the first task that broke an invariant
	// (1: the run's first task; 0: no task broke one, only the whole run
	// did, as a token in the log does), of Tasks submitted.
	Nth, Tasks int
	Elapsed    time.Duration
}

// Catch sums up res, m's focused run.
func Catch(m Mutant, res *Result) Caught {
	c := Caught{Mutant: m.Name, By: map[string]int{}, Elapsed: res.Elapsed}
	want := map[string]bool{}
	for _, g := range GuaranteesOf(m.Name) {
		for _, inv := range g.Invariants {
			want[inv] = true
		}
	}
	bad := map[string]bool{}
	for _, v := range res.Violations {
		c.By[v.Invariant]++
		c.ByItsGuarantee = c.ByItsGuarantee || want[v.Invariant]
		if v.TaskID != "" {
			bad[v.TaskID] = true
		}
	}
	seen := map[string]bool{}
	for _, s := range res.History.Submits {
		if s.TaskID == "" || seen[s.TaskID] {
			continue
		}
		seen[s.TaskID] = true
		c.Tasks++
		if bad[s.TaskID] && c.Nth == 0 {
			c.Nth = c.Tasks
		}
	}
	return c
}

// String is c as the mutation check's summary line.
func (c Caught) String() string {
	var invs []string
	for _, inv := range slices.Sorted(maps.Keys(c.By)) {
		invs = append(invs, fmt.Sprintf("%s %d", inv, c.By[inv]))
	}
	took := fmt.Sprintf("by the run as a whole, of %d tasks", c.Tasks)
	if c.Nth > 0 {
		took = fmt.Sprintf("first at task %d of %d submitted", c.Nth, c.Tasks)
	}
	return fmt.Sprintf("%-32s caught by %s; %s; run %s", c.Mutant, strings.Join(invs, ", "), took, c.Elapsed.Round(time.Second))
}
