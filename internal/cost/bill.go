package cost

import (
	"fmt"
	"slices"
)

// Line is one line item of a bill.
type Line struct {
	Item     string
	Quantity float64 // in the unit of its price
	Price    Price
	USD      float64
}

// Per is how many lifecycles a shape's bill is for.
const Per = 1e6

const (
	kb       = 1000
	chunk    = 32 * 1024
	gib      = 1 << 30
	daysPerM = HoursPerMonth / 24
)

func line(item string, qty float64, p Price) Line {
	return Line{Item: item, Quantity: qty, Price: p, USD: qty * p.USD}
}

// Total sums the lines.
func Total(lines []Line) float64 {
	var t float64
	for _, l := range lines {
		t += l.USD
	}
	return t
}

// Bill prices a million lifecycles of t.
func Bill(t Traffic, p Prices, d Defaults, a Assumptions) ([]Line, error) {
	var ls []Line
	ls = append(ls,
		line("Firestore document reads", Per*float64(t.FirestoreReads), p.FirestoreRead),
		line("Firestore lookups of missing documents (as reads)", Per*float64(t.FirestoreMissing), p.FirestoreRead),
		line("Firestore document writes", Per*float64(t.FirestoreWrites), p.FirestoreWrite),
		line("Firestore deletes (TTL included)", Per*float64(t.FirestoreDeletes), p.FirestoreDelete),
	)
	// Documents without a TTL are priced for NoTTLMonths (they are kept
	// for good); the others until their TTL deletes them.
	months := a.NoTTLMonths
	ls = append(ls,
		line("Firestore storage: documents", Per*(float64(t.StoredDocBytes)*months+t.TTLDocByteDays/daysPerM)/gib, p.FirestoreStorage),
		line("Firestore storage: index entries", Per*(float64(t.StoredIndexEntries)*months+t.TTLIndexEntryDays/daysPerM)*float64(a.IndexEntryBytes)/gib, p.FirestoreStorage),
	)
	var ops float64
	for _, size := range t.CloudTasksCreates {
		ops += 2 * float64(chunks(size)) // the CreateTask call and its push attempt
	}
	ls = append(ls, line("Cloud Tasks operations (create + push, 32 KB chunks)", Per*ops, p.CloudTasksOp))
	if t.CloudTasksDeletes > 0 {
		ls = append(ls, line("Cloud Tasks operations (DeleteTask)", Per*float64(t.CloudTasksDeletes), p.CloudTasksOp))
	}
	var billed float64
	for _, size := range t.PubSubMessages {
		billed += float64(max(size, kb))
	}
	ls = append(ls,
		line("Pub/Sub publish throughput (1 KB minimum)", Per*billed, p.PubSubThroughput),
		line(fmt.Sprintf("Pub/Sub delivery to %d subscription(s)", a.EventSubscriptions), Per*billed*float64(a.EventSubscriptions), p.PubSubThroughput),
		line(fmt.Sprintf("Pub/Sub topic retention (%s)", days(d.TopicRetentionDays)), Per*billed/gib*d.TopicRetentionDays/daysPerM, p.PubSubStorage),
	)
	var logged int64 // invocations whose request log is ingested
	for _, name := range sortedKeys(t.Invocations) {
		n := t.Invocations[name]
		switch {
		case d.NoOKRequestLogs[name]:
		case d.NoOKSubmitRequestLogs[name]:
			logged += n - min(n, t.SubmitRequests)
		default:
			logged += n
		}
		f, ok := d.Functions[name]
		if !ok {
			return nil, fmt.Errorf("cost: shape %q: function %q has no Terraform sizing", t.Shape, name)
		}
		mem, err := f.MemoryGiB()
		if err != nil {
			return nil, err
		}
		l := t.load(name, f, a)
		if f.Billing == Instance {
			// The instances' whole life, at instance-based prices, and no
			// fee a request.
			secs := float64(n) * l.InstanceSecondsPerRequest()
			ls = append(ls,
				line(fmt.Sprintf("Function CPU: %s (%g vCPU, instance-based)", name, f.CPU), Per*secs*f.CPU, p.RunCPUInstance),
				line(fmt.Sprintf("Function memory: %s (%s, instance-based)", name, f.Memory), Per*secs*mem, p.RunMemoryInstance),
			)
			continue
		}
		secs := float64(n) * l.BilledSecondsPerRequest()
		ls = append(ls,
			line("Function requests: "+name, Per*float64(n), p.RunRequest),
			line(fmt.Sprintf("Function CPU: %s (%g vCPU)", name, f.CPU), Per*secs*f.CPU, p.RunCPU),
			line(fmt.Sprintf("Function memory: %s (%s)", name, f.Memory), Per*secs*mem, p.RunMemory),
		)
	}
	if t.Fires > 0 {
		// The fire's work in the sweep pass: the tick's request held
		// longer, at the sweeper's sizing (no rounding: the pass is part
		// of a request billed anyway).
		sw, ok := d.Functions["sweeper"]
		if !ok {
			return nil, fmt.Errorf("cost: shape %q: the sweeper has no Terraform sizing", t.Shape)
		}
		mem, err := sw.MemoryGiB()
		if err != nil {
			return nil, err
		}
		secs := float64(t.SweeperMs) / 1000
		ls = append(ls,
			line(fmt.Sprintf("Sweeper CPU: the fire's pass (%g vCPU)", sw.CPU), Per*secs*sw.CPU, p.RunCPU),
			line(fmt.Sprintf("Sweeper memory: the fire's pass (%s)", sw.Memory), Per*secs*mem, p.RunMemory),
		)
	}
	logBytes := t.LogBytes + t.LogLines*a.LogEntryBytes + logged*a.RequestLogBytes
	ls = append(ls,
		line("Cloud Logging (Servo's lines + Cloud Run request logs)", Per*float64(logBytes)/gib, p.Logging),
		line(fmt.Sprintf("Cloud Trace (sampling %g)", d.TraceSampling), Per*float64(t.Spans)*d.TraceSampling, p.Trace),
		line("Secret Manager accesses", Per*float64(t.SecretAccesses), p.SecretAccess),
	)
	return ls, nil
}

// Fixed prices a month at zero traffic.
func Fixed(idle Idle, p Prices, d Defaults, a Assumptions) ([]Line, error) {
	ticks := d.SweepTicksPerHour * HoursPerMonth
	sw := d.Functions["sweeper"]
	mem, err := sw.MemoryGiB()
	if err != nil {
		return nil, err
	}
	secs := billedSeconds([]int64{idle.InvocationMs}, a.BillingGranularityMs)
	ls := []Line{
		line("Sweeper requests (Scheduler ticks)", ticks, p.RunRequest),
		line(fmt.Sprintf("Sweeper CPU (%g vCPU, request held %.1f s a tick)", sw.CPU, secs), ticks*secs*sw.CPU, p.RunCPU),
		line(fmt.Sprintf("Sweeper memory (%s)", sw.Memory), ticks*secs*mem, p.RunMemory),
		line(fmt.Sprintf("Sweeper Firestore reads (%d passes a tick, %d queries)", idle.Passes, idle.FirestoreQueries), ticks*float64(idle.FirestoreReads), p.FirestoreRead),
		line("Sweeper Firestore writes (pass record, pulse)", ticks*float64(idle.FirestoreWrites), p.FirestoreWrite),
		line("Sweep topic publish + push delivery", ticks*2*kb, p.PubSubThroughput),
		line("Cloud Logging (sweeper lines + request logs)", ticks*float64(idle.LogBytes+idle.LogLines*a.LogEntryBytes+a.RequestLogBytes)/gib, p.Logging),
		line(fmt.Sprintf("Cloud Trace (sampling %g)", d.TraceSampling), ticks*float64(idle.Spans)*d.TraceSampling, p.Trace),
		line(fmt.Sprintf("Cloud Scheduler jobs (%d)", d.SchedulerJobs), float64(d.SchedulerJobs), p.Scheduler),
		line("Secret Manager: signing-key versions (assumed 1 active)", float64(d.SigningKeyVersions), p.SecretVersion),
		line("Secret Manager: key re-reads by the sweeper's instance", a.SecretReadsPerHour*HoursPerMonth*min(1, ticks*secs/(HoursPerMonth*3600)), p.SecretAccess),
		line("Firestore storage (meta documents)", float64(idle.StoredDocBytes)/gib, p.FirestoreStorage),
	}
	for _, name := range sortedKeys(d.Functions) {
		f := d.Functions[name]
		if f.MinInstances == 0 {
			continue
		}
		m, err := f.MemoryGiB()
		if err != nil {
			return nil, err
		}
		s := float64(f.MinInstances) * HoursPerMonth * 3600
		cpu, memory := p.RunCPU, p.RunMemory
		if f.Billing == Instance {
			cpu, memory = p.RunCPUInstance, p.RunMemoryInstance
		}
		ls = append(ls,
			line(fmt.Sprintf("Minimum instances: %s CPU (%d)", name, f.MinInstances), s*f.CPU, cpu),
			line(fmt.Sprintf("Minimum instances: %s memory", name), s*m, memory))
	}
	return ls, nil
}

// Alerts prices a month of the alert policies when d enables them
// (alerts_enabled): each condition, and the time series its query returns
// at each evaluation (one a condition, assumed: the policies reduce across
// instances; one grouped by a label returns one a value seen).
func Alerts(p Prices, d Defaults) []Line {
	if !d.AlertsEnabled || d.AlertConditions == 0 {
		return nil
	}
	n := float64(d.AlertConditions)
	return []Line{
		line(fmt.Sprintf("Cloud Monitoring alert conditions (%d, alerts_enabled)", d.AlertConditions), n, p.AlertCondition),
		line("Cloud Monitoring time series returned (1 a condition every 30 s, assumed)", n*AlertEvaluationsPerMonth, p.AlertSeries),
	}
}

// FreeQuotaLines are what Firestore's free quota takes off the fixed
// lines fixed (priced with p), as negative lines: none unless d's database
// is the (default) one. The quota is a day's: a month's is the quota times
// the days of an average month.
func FreeQuotaLines(fixed []Line, p Prices, d Defaults, q FreeQuota) []Line {
	if d.FirestoreDatabase != DefaultDatabase {
		return nil
	}
	used := map[Price]float64{}
	for _, l := range fixed {
		used[l.Price] += l.Quantity
	}
	var ls []Line
	for _, c := range []struct {
		item  string
		p     Price
		quota float64
	}{
		{"reads", p.FirestoreRead, q.ReadsPerDay * daysPerM},
		{"writes", p.FirestoreWrite, q.WritesPerDay * daysPerM},
		{"deletes", p.FirestoreDelete, q.DeletesPerDay * daysPerM},
		{"storage", p.FirestoreStorage, q.StorageGiB},
	} {
		if free := min(used[c.p], c.quota); free > 0 {
			ls = append(ls, line("Firestore free quota: "+c.item+" (the (default) database)", -free, c.p))
		}
	}
	return ls
}

// load is function name's load when lifecycles of t arrive at
// a.LifecyclesPerSecond: its recorded request times, taken in turn (an
// instant when none was recorded), and its mean recorded CPU time (the
// request time when none was recorded).
func (t Traffic) load(name string, f Function, a Assumptions) Load {
	walls := []float64{0}
	if ms := t.RequestMs[name]; len(ms) > 0 {
		walls = walls[:0]
		for _, m := range ms {
			walls = append(walls, float64(m)/1000)
		}
	}
	cpu := mean(t.RequestMs[name]) / 1000
	if c := t.CPUUs[name]; len(c) > 0 {
		cpu = mean(c) / 1e6
	}
	return NewLoad(a.LifecyclesPerSecond*float64(t.Invocations[name]), walls, cpu, f, a)
}

func mean(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int64
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

func chunks(size int64) int64 { return max(1, (size+chunk-1)/chunk) }

// billedSeconds rounds each request up to the billing granularity.
func billedSeconds(ms []int64, granularity int64) float64 {
	var total int64
	for _, m := range ms {
		total += max(1, (m+granularity-1)/granularity) * granularity
	}
	return float64(total) / 1000
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// days spells a number of days: "1 day", "7 days", "0.5 days".
func days(n float64) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%g days", n)
}
