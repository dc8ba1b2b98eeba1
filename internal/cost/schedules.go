package cost

import "fmt"

// IdleSchedules prices n schedules at rest for a month: their documents
// and index entries kept, and what they add to the sweeper's passes (s's
// measured reads and writes, per schedule and pass, at idle's passes a
// tick).
func IdleSchedules(s IdleSchedule, n float64, idle Idle, p Prices, d Defaults, a Assumptions) []Line {
	passes := d.SweepTicksPerHour * HoursPerMonth * float64(max(1, idle.Passes))
	var each float64 // of the measured schedules, per schedule priced
	if s.Schedules > 0 {
		each = n / float64(s.Schedules)
	}
	return []Line{
		line("Firestore storage: schedule documents", n*float64(s.DocBytes)/gib, p.FirestoreStorage),
		line("Firestore storage: their index entries", n*float64(s.IndexEntries*a.IndexEntryBytes)/gib, p.FirestoreStorage),
		line(fmt.Sprintf("Sweeper Firestore reads (%s passes)", qty(passes)), passes*each*float64(s.PassReads), p.FirestoreRead),
		line("Sweeper Firestore writes", passes*each*float64(s.PassWrites), p.FirestoreWrite),
	}
}

// FireTick prices what a Scheduler tick whose passes make fires costs
// beyond an idle tick: a pass that made a fire is not idle, so the
// invocation sweeps on (fire, measured) instead of ending after its
// first pass (idle). The request is held longer, and each further pass
// reads and writes what an idle pass does.
func FireTick(fire, idle Idle, p Prices, d Defaults, a Assumptions) ([]Line, error) {
	sw, ok := d.Functions["sweeper"]
	if !ok {
		return nil, fmt.Errorf("cost: the sweeper has no Terraform sizing")
	}
	mem, err := sw.MemoryGiB()
	if err != nil {
		return nil, err
	}
	secs := max(0, billedSeconds([]int64{fire.InvocationMs}, a.BillingGranularityMs)-billedSeconds([]int64{idle.InvocationMs}, a.BillingGranularityMs))
	passes := float64(max(0, fire.Passes-idle.Passes))
	perPass := func(n int64) float64 {
		if idle.Passes == 0 {
			return 0
		}
		return float64(n) / float64(idle.Passes)
	}
	return []Line{
		line(fmt.Sprintf("Sweeper CPU (%g vCPU, request held %.1f s more)", sw.CPU, secs), secs*sw.CPU, p.RunCPU),
		line(fmt.Sprintf("Sweeper memory (%s)", sw.Memory), secs*mem, p.RunMemory),
		line(fmt.Sprintf("Sweeper Firestore reads (%s more %s)", qty(passes), plural(passes, "pass", "passes")), passes*perPass(idle.FirestoreReads), p.FirestoreRead),
		line("Sweeper Firestore writes (pass record, pulse)", passes*perPass(idle.FirestoreWrites), p.FirestoreWrite),
		line(fmt.Sprintf("Cloud Trace (sampling %g)", d.TraceSampling), passes*perPass(idle.Spans)*d.TraceSampling, p.Trace),
	}, nil
}

func plural(n float64, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}
