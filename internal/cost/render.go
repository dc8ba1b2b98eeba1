package cost

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// levers is the prose of docs/cost.md on the bill's levers whose rules are
// the code's, not the program's figures: which heartbeats are written, and
// how long ended tasks are kept.
//
//go:embed levers.md
var levers string

// Result is a target checked against the bill.
type Result struct {
	Target
	// Value is the bill (USD) or, for MultiRegionRatio, the ratio.
	Value float64
	Met   bool
	// Detail says how it was priced: the billing of each function, the
	// bill the ratio is worst for.
	Detail string
}

// Report is the whole bill of a recording.
type Report struct {
	Recording Recording
	// Declared are the Terraform defaults as read (functions_billing
	// unresolved); Defaults the same at the priced rate (each function's
	// billing resolved, Defaults.At).
	Declared, Defaults Defaults
	Shapes             map[string][]Line
	Fixed              []Line
	Results            []Result
	// TargetLines are the lines of each PerMillion target's bill, by the
	// target's name.
	TargetLines map[string][]Line
	// Modes are the totals of the targets' shapes at RateTable's rates
	// under each billing of the api and the callbacks (Request, Instance,
	// and Auto as Terraform resolves it at each rate), by shape and billing.
	Modes map[string]map[string][]float64
	// BreakEvens are the program's break-even rates (BreakEven, of
	// BreakEvenShape), Needed the instances needed per lifecycle a second
	// (NeededPerLifecycleRate, of SizingShape), by function.
	BreakEvens, Needed map[string]float64
	// Assumptions are the ones the bill was computed with (its
	// LifecyclesPerSecond the priced rate).
	Assumptions Assumptions
	// IdleSchedules are a month of IdleSchedulesPriced schedules at rest,
	// FireTick what a tick whose passes make fires costs beyond an idle one.
	IdleSchedules, FireTick []Line
	// Class is the Firestore location class priced; LocationAssumed says
	// the Terraform variables named no firestore_location (it has no
	// default), so the regional class was priced as an assumption.
	Class           LocationClass
	LocationAssumed bool
	// Prices are the prices the bill used (ListPrices at Class).
	Prices Prices
	// Alerts are a month of the alert policies (none unless
	// alerts_enabled), AlertsOn the same whether enabled or not (the
	// target's), FreeQuota what Firestore's free quota takes off the fixed
	// cost (none unless the database is (default)).
	Alerts, AlertsOn, FreeQuota []Line
	// Sides are the targets' shapes and the fixed cost at each location
	// class.
	Sides []Side
}

// Side is the bill at one Firestore location class: the targets' shapes
// per million lifecycles at SideRates, and the fixed cost a month.
type Side struct {
	Class LocationClass
	// PerMillion are, by shape, the totals at SideRates.
	PerMillion map[string][]float64
	Fixed      float64
}

// SideRates are the rates (lifecycles a second) the location classes are
// compared at.
var SideRates = []float64{10, 1000}

// IdleSchedulesPriced is how many idle schedules the doc prices a month of.
const IdleSchedulesPriced = 1000

// RateTable are the steady rates (lifecycles a second) the doc shows the
// targets' shapes at besides the priced one: from a million lifecycles a
// month to the scale model's target.
var RateTable = []float64{MillionAMonth, 1, 10, 100, 1000, 10000}

// Billings are the billing settings the doc compares.
var Billings = []string{Request, Instance, Auto}

// targetShapes are the shapes of the PerMillion targets, each once, in
// the recording's order.
func targetShapes(rec Recording) []Traffic {
	var out []Traffic
	for _, tr := range rec.Shapes {
		if slices.ContainsFunc(Targets, func(t Target) bool { return t.Kind == PerMillion && t.Shape == tr.Shape }) {
			out = append(out, tr)
		}
	}
	return out
}

// Compute bills every shape and the fixed cost, and checks the targets.
// p's Firestore prices are those of d's firestore_location's class (the
// regional class, stated as an assumption, when it names none); the
// functions are billed as d sets them for a deployment that declares
// a's rate.
func Compute(rec Recording, p Prices, d Defaults, a Assumptions) (Report, error) {
	r := Report{Recording: rec, Declared: d, Defaults: d.At(a.LifecyclesPerSecond), Shapes: map[string][]Line{}, TargetLines: map[string][]Line{},
		Modes: map[string]map[string][]float64{}, BreakEvens: map[string]float64{}, Needed: map[string]float64{}, Assumptions: a}
	r.Class, r.LocationAssumed = Regional, d.FirestoreLocation == ""
	if !r.LocationAssumed {
		var err error
		if r.Class, err = Class(d.FirestoreLocation); err != nil {
			return r, err
		}
	}
	base := p
	regional := p
	if p.Firestore != nil {
		p, regional = p.At(r.Class), p.At(Regional)
	}
	r.Prices = p
	for _, t := range rec.Shapes {
		ls, err := Bill(t, p, r.Defaults, a)
		if err != nil {
			return r, err
		}
		r.Shapes[t.Shape] = ls
	}
	var err error
	if r.Fixed, err = Fixed(rec.Idle, p, r.Defaults, a); err != nil {
		return r, err
	}
	r.Alerts = Alerts(p, d)
	on := d
	on.AlertsEnabled = true
	r.AlertsOn = Alerts(p, on)
	r.FreeQuota = FreeQuotaLines(r.Fixed, p, d, FirestoreFreeQuota)
	for _, c := range Classes {
		if base.Firestore == nil {
			break
		}
		cp := base.At(c)
		side := Side{Class: c, PerMillion: map[string][]float64{}}
		fixed, err := Fixed(rec.Idle, cp, r.Defaults, a)
		if err != nil {
			return r, err
		}
		side.Fixed = Total(fixed)
		for _, tr := range targetShapes(rec) {
			for _, rate := range SideRates {
				b := a
				b.LifecyclesPerSecond = rate
				ls, err := Bill(tr, cp, d.At(rate), b)
				if err != nil {
					return r, err
				}
				side.PerMillion[tr.Shape] = append(side.PerMillion[tr.Shape], Total(ls))
			}
		}
		r.Sides = append(r.Sides, side)
	}
	r.IdleSchedules = IdleSchedules(rec.IdleSchedule, IdleSchedulesPriced, rec.Idle, p, r.Defaults, a)
	if r.FireTick, err = FireTick(rec.FireTick, rec.Idle, p, r.Defaults, a); err != nil {
		return r, err
	}
	for _, tr := range targetShapes(rec) {
		r.Modes[tr.Shape] = map[string][]float64{}
		for _, billing := range Billings {
			for _, rate := range RateTable {
				b := a
				b.LifecyclesPerSecond = rate
				db := d
				db.Billing = billing
				ls, err := Bill(tr, p, db.At(rate), b)
				if err != nil {
					return r, err
				}
				r.Modes[tr.Shape][billing] = append(r.Modes[tr.Shape][billing], Total(ls))
			}
		}
	}
	for _, tr := range rec.Shapes {
		for _, name := range BilledFunctions {
			if _, ok := d.Functions[name]; !ok {
				continue
			}
			if tr.Shape == BreakEvenShape {
				if r.BreakEvens[name], err = BreakEven(tr, name, regional, d, a); err != nil {
					return r, err
				}
			}
			if tr.Shape == SizingShape {
				if r.Needed[name], err = NeededPerLifecycleRate(tr, name, d, a); err != nil {
					return r, err
				}
			}
		}
	}
	if r.Results, err = r.check(rec, base, regional, d, a); err != nil {
		return r, err
	}
	return r, nil
}

// check checks the targets: the PerMillion ones at the regional class
// and at their rate, declared (the functions billed as d sets them for
// it); the ratio of the multi-region class's bills to those; the fixed
// cost at the regional class, without and with the alert policies.
func (r *Report) check(rec Recording, base, regional Prices, d Defaults, a Assumptions) ([]Result, error) {
	var out []Result
	perMillion := func(t Target, p Prices) ([]Line, error) {
		i := slices.IndexFunc(rec.Shapes, func(tr Traffic) bool { return tr.Shape == t.Shape })
		if i < 0 {
			return nil, fmt.Errorf("cost: the recording has no shape %q (a target)", t.Shape)
		}
		b := a
		b.LifecyclesPerSecond = t.Rate
		return Bill(rec.Shapes[i], p, d.At(t.Rate), b)
	}
	fixed, err := Fixed(rec.Idle, regional, r.Defaults, a)
	if err != nil {
		return nil, err
	}
	on := d
	on.AlertsEnabled = true
	for _, t := range Targets {
		res := Result{Target: t}
		switch t.Kind {
		case PerMillion:
			ls, err := perMillion(t, regional)
			if err != nil {
				return nil, err
			}
			r.TargetLines[t.Name] = ls
			res.Value, res.Detail = Total(ls), d.At(t.Rate).Billings()
		case MultiRegionRatio:
			if base.Firestore == nil {
				continue
			}
			for _, pt := range Targets {
				if pt.Kind != PerMillion {
					continue
				}
				reg, err := perMillion(pt, regional)
				if err != nil {
					return nil, err
				}
				multi, err := perMillion(pt, base.At(MultiRegion))
				if err != nil {
					return nil, err
				}
				if ratio := Total(multi) / Total(reg); ratio > res.Value {
					res.Value, res.Detail = ratio, fmt.Sprintf("worst: %s, $%.2f against $%.2f", pt.Name, Total(multi), Total(reg))
				}
			}
		case FixedAlertsOff:
			res.Value = Total(fixed)
		case FixedAlertsOn:
			res.Value = Total(fixed) + Total(Alerts(regional, on))
			res.Detail = fmt.Sprintf("%d alert conditions", d.AlertConditions)
		}
		res.Met = res.Value <= t.Max
		out = append(out, res)
	}
	return out, nil
}

// Missed are the targets the bill misses.
func (r Report) Missed() []Result {
	var out []Result
	for _, res := range r.Results {
		if !res.Met {
			out = append(out, res)
		}
	}
	return out
}

// Markdown is docs/cost.md.
func (r Report) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# What Servo costs to run\n\n")
	w("<!-- Generated by `go run ./bench/cost -write docs/cost.md`; do not edit. -->\n\n")
	w("Every figure is computed by `internal/cost` from traffic the whole local stack\n")
	w("recorded (%s, `internal/cost/testdata/traffic.json`: `go run ./bench/cost -record`\n", r.Recording.Recorded)
	w("runs `BenchmarkCostRecord` in `internal/devstack` and rewrites it), the price table\n")
	w("in `internal/cost/prices.go` and the Terraform defaults read from `terraform/`.\n")
	w("USD, us-central1, list prices; free tiers are not modelled in the bill (they are per\n")
	w("billing account), so the figures are an upper bound for a small deployment.\n")
	r.location(w)
	w("The counts of each single operation (a submit, a callback, a heartbeat's\n")
	w("constant ~1 KB whatever the payload, a sweep pass, a schedule's fire) are asserted by `TestCostModel`\n")
	w("(`go test -run TestCostModel -v ./internal/devstack/`).\n\n")

	r.targets(w)
	r.billing(w)
	w("\n## Per million lifecycles\n\n")
	w("| line item |")
	for _, t := range r.Recording.Shapes {
		w(" %s |", t.Shape)
	}
	w("\n|---|")
	for range r.Recording.Shapes {
		w("---:|")
	}
	w("\n")
	items := lineItems(r.Recording.Shapes, r.Shapes)
	for _, item := range items {
		w("| %s |", item)
		for _, t := range r.Recording.Shapes {
			w(" %s |", cell(r.Shapes[t.Shape], item))
		}
		w("\n")
	}
	w("| **total** |")
	for _, t := range r.Recording.Shapes {
		w(" **$%.2f** |", Total(r.Shapes[t.Shape]))
	}
	w("\n\n")

	w("## Traffic of one lifecycle (recorded)\n\n")
	w("| shape | Firestore reads | writes | deletes | index entries | kept bytes | Cloud Tasks creates | Pub/Sub messages | invocations | log lines | log bytes | spans |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Recording.Shapes {
		var inv int64
		for _, n := range t.Invocations {
			inv += n
		}
		reads := fmt.Sprint(t.FirestoreReads)
		if t.FirestoreMissing > 0 {
			reads += fmt.Sprintf(" (+%d missing)", t.FirestoreMissing)
		}
		w("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", t.Shape, reads, t.FirestoreWrites,
			t.FirestoreDeletes, t.IndexEntries, t.StoredDocBytes, len(t.CloudTasksCreates), len(t.PubSubMessages), inv, t.LogLines, t.LogBytes, t.Spans)
	}

	r.sides(w)

	w("\n## Fixed cost a month at zero traffic\n\n")
	i := r.Recording.Idle
	w("One sweeper invocation per Scheduler tick (%g a hour), run the production way:\n", r.Defaults.SweepTicksPerHour)
	w("it held its request %.1f s, made %d passes, %d queries, %d reads and %d writes,\n", float64(i.InvocationMs)/1000, i.Passes, i.FirestoreQueries, i.FirestoreReads, i.FirestoreWrites)
	w("log lines: %d (%d bytes), spans: %d. Cloud Run bills the request time.\n\n", i.LogLines, i.LogBytes, i.Spans)
	w("| line item | quantity | unit price | USD a month |\n|---|---:|---|---:|\n")
	for _, l := range r.Fixed {
		w("| %s | %s | %s | $%.4f |\n", l.Item, qty(l.Quantity), unitPrice(l.Price), l.USD)
	}
	fixed := Total(r.Fixed)
	if len(r.Alerts) == 0 && len(r.FreeQuota) == 0 {
		w("| **total** | | | **$%.2f** |\n\n", fixed)
	} else {
		w("| **total, Servo's resources** | | | **$%.2f** |\n", fixed)
		for _, l := range r.Alerts {
			w("| %s | %s | %s | $%.4f |\n", l.Item, qty(l.Quantity), unitPrice(l.Price), l.USD)
		}
		if len(r.Alerts) > 0 {
			fixed += Total(r.Alerts)
			w("| **total with the alert policies** | | | **$%.2f** |\n", fixed)
		}
		for _, l := range r.FreeQuota {
			w("| %s | %s | %s | −$%.4f |\n", l.Item, qty(-l.Quantity), unitPrice(l.Price), -l.USD)
		}
		if len(r.FreeQuota) > 0 {
			w("| **what is billed, after the free quota** | | | **$%.2f** |\n", fixed+Total(r.FreeQuota))
		}
		w("\n")
	}
	switch {
	case len(r.Alerts) == 0:
		w("The alert policies are off (`alerts_enabled = false`): not priced.\n")
	default:
		w("The alert policies are on (`alerts_enabled`): %d conditions in `terraform/modules/alerts`,\n", r.Defaults.AlertConditions)
		w("each billed a month, and the time series each returns at each evaluation (every\n")
		w("30 s; one a condition assumed, as they reduce across instances).\n")
	}
	if r.Defaults.FirestoreDatabase == DefaultDatabase {
		w("The database is `(default)`: Firestore's free quota (%s reads, %s writes and %s deletes\n", thousands(FirestoreFreeQuota.ReadsPerDay), thousands(FirestoreFreeQuota.WritesPerDay), thousands(FirestoreFreeQuota.DeletesPerDay))
		w("a day, %g GiB stored; none for TTL deletes) applies, and takes $%.2f off the fixed cost a month.\n", FirestoreFreeQuota.StorageGiB, -Total(r.FreeQuota))
		w("The figures above it, and the bills per million, are without it.\n\n")
	} else {
		w("The database is `%s`, not `(default)`: Firestore's free quota does not apply\n", r.Defaults.FirestoreDatabase)
		w("(\"Only the (default) database qualifies for the free quota\").\n\n")
	}

	r.schedules(w)

	w("## Compared with managed alternatives\n\n")
	w("For a task that calls a worker and reports 10 heartbeats, per million:\n\n")
	w("| service | per million | how | source |\n|---|---|---|---|\n")
	w("| Servo (this page, 1 attempt, 10 heartbeats) | $%.2f | all line items above | this page |\n", Total(r.Shapes["1 attempt, 10 heartbeats"]))
	for _, a := range Alternatives {
		w("| %s | %s | %s | %s |\n", a.Name, a.PerMillion, a.How, a.Source)
	}

	w("\n%s", levers)
	w("\n## Prices and assumptions\n\n| price | unit | source | read |\n|---|---|---|---|\n")
	confirm := func(p Price) string {
		if p.Unconfirmed {
			return p.Read + " (figure not shown by the stored copy: to confirm)"
		}
		return p.Read
	}
	type named struct {
		name string
		p    Price
	}
	var prices []named
	for _, c := range Classes {
		f, ok := r.Prices.Firestore[c]
		if !ok {
			continue
		}
		prices = append(prices, named{"Firestore read, " + string(c), f.Read}, named{"Firestore write, " + string(c), f.Write},
			named{"Firestore delete, " + string(c), f.Delete}, named{"Firestore storage, " + string(c), f.Storage})
	}
	if len(prices) == 0 {
		prices = append(prices, named{"Firestore read", r.Prices.FirestoreRead}, named{"Firestore write", r.Prices.FirestoreWrite},
			named{"Firestore delete", r.Prices.FirestoreDelete}, named{"Firestore storage", r.Prices.FirestoreStorage})
	}
	ps := r.Prices
	for _, p := range append(prices, []named{
		{"Cloud Tasks", ps.CloudTasksOp}, {"Pub/Sub throughput", ps.PubSubThroughput},
		{"Pub/Sub retained storage", ps.PubSubStorage}, {"Cloud Run requests", ps.RunRequest}, {"Cloud Run CPU", ps.RunCPU},
		{"Cloud Run memory", ps.RunMemory}, {"Cloud Logging", ps.Logging}, {"Cloud Trace", ps.Trace},
		{"Cloud Scheduler", ps.Scheduler}, {"Secret Manager access", ps.SecretAccess}, {"Secret Manager version", ps.SecretVersion},
		{"Cloud Monitoring alert condition", ps.AlertCondition}, {"Cloud Monitoring alert time series", ps.AlertSeries},
	}...) {
		if p.p.Unit == "" {
			continue
		}
		w("| %s | %s | %s | %s |\n", p.name, unitPrice(p.p), p.p.Source, confirm(p.p))
	}
	a := r.Assumptions
	w("\nTerraform defaults read: ")
	for _, name := range sortedKeys(r.Defaults.Functions) {
		f := r.Defaults.Functions[name]
		w("%s %s/%g vCPU/min %d; ", name, f.Memory, f.CPU, f.MinInstances)
	}
	ret := "none"
	if r.Defaults.RetentionDays > 0 {
		ret = fmt.Sprintf("%g days", r.Defaults.RetentionDays)
	}
	excl := sortedKeys(r.Defaults.NoOKRequestLogs)
	for _, name := range sortedKeys(r.Defaults.NoOKSubmitRequestLogs) {
		excl = append(excl, name+"'s submits (POST /v1/tasks, :batch; its other requests keep theirs)")
	}
	excluded := "none"
	if len(excl) > 0 {
		excluded = strings.Join(excl, ", ")
	}
	w("trace sampling %g; topic retention %s; task retention %s; successful requests' Cloud Run request logs excluded for: %s",
		r.Defaults.TraceSampling, days(r.Defaults.TopicRetentionDays), ret, excluded)
	loc := r.Defaults.FirestoreLocation
	if loc == "" {
		loc = "none (no default)"
	}
	w("; Firestore location %s, database %s; alert policies %s", loc, r.Defaults.FirestoreDatabase, onOff(r.Defaults.AlertsEnabled))
	if len(r.Defaults.VarFiles) > 0 {
		w("; var files: %s", strings.Join(r.Defaults.VarFiles, ", "))
	}
	w(".\n\nFirestore's free quota (%s): %s reads, %s writes, %s deletes a day, %g GiB stored, for the\n",
		FirestoreFreeQuota.Source, thousands(FirestoreFreeQuota.ReadsPerDay), thousands(FirestoreFreeQuota.WritesPerDay), thousands(FirestoreFreeQuota.DeletesPerDay), FirestoreFreeQuota.StorageGiB)
	w("`(default)` database only; read %s.\n\n", FirestoreFreeQuota.Read)
	w("Assumed, not measured: a Cloud Run request log entry is %d bytes, and a line Servo\n", a.RequestLogBytes)
	w("writes becomes an entry %d bytes larger than the line (its log name, resource labels,\n", a.LogEntryBytes)
	w("instance id, timestamps); an index entry\n")
	w("stores %d bytes; requests arrive at random (Poisson) at the priced rate, an instance\n", a.IndexEntryBytes)
	w("is billed for its busy periods (at least one request in flight), each rounded up to\n")
	w("%d ms from its start (an instant two rounded periods cover billed once; simulated,\n", a.BillingGranularityMs)
	w("`cost.BilledFraction`; Google's pricing page does not say whether the rounding is\n")
	w("per busy period or over an instance's total, so `-granularity` prices another to\n")
	w("calibrate against a real bill), and the autoscaler runs as\n")
	w("many instances as keep CPU and concurrency at %.0f %% (`cost.NewLoad`); requests take\n", a.CPUTarget*100)
	w("the times the local stack recorded in turn (emulator round trips included), and\n")
	w("their CPU time is its mean (the whole test process's during the request, the client's\n")
	w("included; each request's time and CPU time the median of three recordings of its\n")
	w("shape); the events\n")
	w("topic has %d subscription; an instance re-reads the signing-key secret %g times an\n", a.EventSubscriptions, a.SecretReadsPerHour)
	w("hour; Firestore deletes, those issued in a commit included, are counted as deletes and\n")
	w("priced as deletes (TTL deletes too, one per document created with a TTL); a document without\n")
	w("a TTL field is priced for %g months of storage (it is kept for good), one with a TTL\n", a.NoTTLMonths)
	w("until the time its field says (as the code sets it); spans are priced at the sampling\n")
	w("ratio (the errors and slow requests always kept are not modelled); every callback and\n")
	w("sweep reads its task (recorded without the store's task cache, which servo dev keeps and\n")
	w("the deployed functions do not).\n")
	return b.String()
}

// targets writes the targets table, what the alert policies add, and
// the largest items of the bills that miss theirs.
func (r Report) targets(w func(string, ...any)) {
	w("## Targets (issue 54)\n\n")
	w("At the Terraform defaults with regional Firestore; a per-million bill is priced at its rate,\n")
	w("declared as the deployment's (`expected_lifecycles_per_second`), the api and the callbacks\n")
	w("billed as `functions_billing` (`%s`) sets them for that rate.\n\n", r.Declared.Billing)
	w("| target | ceiling | computed | | priced with |\n|---|---|---|---|---|\n")
	for _, res := range r.Results {
		mark := "met"
		if !res.Met {
			mark = fmt.Sprintf("**missed** by %s", Amount(res.Target, res.Value-res.Max))
		}
		w("| %s | ≤ %s %s | %s | %s | %s |\n", res.Name, Amount(res.Target, res.Max), res.Per, Amount(res.Target, res.Value), mark, res.Detail)
	}
	w("\nThe fixed targets are checked against Servo's own resources, before Firestore's free\n")
	w("quota (\"Fixed cost\" below). The alert policies are Cloud Monitoring's charge on top,\n")
	w("whatever the traffic: **$%.2f a month** for %d conditions", Total(r.AlertsOn), r.Declared.AlertConditions)
	if len(r.Alerts) > 0 {
		w(", on in this deployment (`alerts_enabled`)")
	} else {
		w(", off in this deployment (`alerts_enabled = false`)")
	}
	w(".\n\n`go run ./bench/cost -check` exits non-zero when a target is missed.\n\n")
	w("The largest line items of the bills that miss their target:\n\n")
	for _, res := range r.Results {
		ls, ok := r.TargetLines[res.Name]
		if !ok || res.Met {
			continue
		}
		top := slices.Clone(ls)
		slices.SortStableFunc(top, func(a, b Line) int { return cmp.Compare(b.USD, a.USD) })
		w("- %s ($%.2f):", res.Name, res.Value)
		for i, l := range top[:min(5, len(top))] {
			sep := ","
			if i == 0 {
				sep = ""
			}
			w("%s %s $%.2f", sep, l.Item, l.USD)
		}
		w(".\n")
	}
	w("\n")
}

// Amount spells a target's figure: dollars, or a ratio.
func Amount(t Target, v float64) string {
	if t.USD() {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// billing writes the section on the functions' billing: the rate priced,
// both settings side by side, the break-even rates and the sizing.
func (r Report) billing(w func(string, ...any)) {
	a := r.Assumptions
	w("## Billing: request-based or instance-based\n\n")
	w("The tables below price a deployment that declares a steady **%g lifecycles a second**\n", a.LifecyclesPerSecond)
	w("(about %.1f million a month; ", a.LifecyclesPerSecond*HoursPerMonth*3600/1e6)
	if r.Declared.DeclaredRate > 0 && r.Declared.DeclaredRate == a.LifecyclesPerSecond {
		w("Terraform's `expected_lifecycles_per_second`; `-rate` prices another")
	} else {
		w("`-rate`")
	}
	w("), the api and the callbacks billed as `functions_billing = \"%s\"`\n", r.Declared.Billing)
	w("sets them for it: %s.\n\n", r.Defaults.Billings())
	w("Cloud Run bills a service one of two ways (https://cloud.google.com/run/docs/configuring/billing-settings).\n")
	w("**Request-based** (the default): $%.2f a million requests, and CPU and memory at\n", r.Prices.RunRequest.USD*1e6)
	w("$%g a vCPU-second and $%g a GiB-second while an instance serves at least one request,\n", r.Prices.RunCPU.USD, r.Prices.RunMemory.USD)
	w("each busy period rounded up to %d ms. **Instance-based**: no fee a request, CPU and\n", a.BillingGranularityMs)
	w("memory at $%g and $%g for an instance's whole life, idle or not, until Cloud Run\n", r.Prices.RunCPUInstance.USD, r.Prices.RunMemoryInstance.USD)
	w("stops it (assumed %.0f minutes after its last request). Busy instances are cheaper by\n", a.IdleInstanceSeconds/60)
	w("instance; an instance up for a few requests is dearer. Everything else the same, a\n")
	w("million lifecycles at each rate (`auto`: as Terraform picks at that rate):\n\n")
	w("| shape | billing |")
	for _, rate := range RateTable {
		w(" %s |", rateLabel(rate))
	}
	w("\n|---|---|")
	for range RateTable {
		w("---:|")
	}
	w("\n")
	for _, tr := range targetShapes(r.Recording) {
		for _, billing := range Billings {
			w("| %s | %s |", tr.Shape, billing)
			for _, usd := range r.Modes[tr.Shape][billing] {
				w(" $%.2f |", usd)
			}
			w("\n")
		}
	}
	w("\n")
	if len(r.BreakEvens) > 0 {
		w("**Break-even** (`cost.BreakEven`, the shape \"%s\", the lightest: instance-based billing\n", BreakEvenShape)
		w("chosen there is cheaper for every heavier lifecycle too): the declared rate from which\n")
		w("instance-based billing costs a function no more than request-based at every higher rate:")
		w("%s", eachFunction(func(name string) string { return "**" + rateSpelled(r.BreakEvens[name]) + " a second**" }))
		w(". `functions_billing = \"auto\"` (the default) bills each function\n")
		w("instance-based from its break-even on; Terraform keeps these rates in `local.billing_break_even`\n")
		w("(`terraform/main.tf`), equal to the program's (`TestTerraformBreakEven`).\n\n")
	}
	if len(r.Needed) > 0 {
		w("**max_instances** is sized from the declared rate: once busy, a function needs")
		w("%s", eachFunction(func(name string) string { return fmt.Sprintf("%g", r.Needed[name]) }))
		w("\ninstances per lifecycle a second (`cost.NeededPerLifecycleRate`, the shape \"%s\", the\n", SizingShape)
		w("heaviest; CPU and concurrency at %.0f %%), in `local.instances_per_lifecycle_rate`. Terraform sets\n", a.CPUTarget*100)
		w("`max_instances` to twice that at the declared rate (bursts to twice the declared rate), never\n")
		w("below the former defaults (api 20, callbacks 50); `functions.<name>.max_instances` overrides it.\n")
		w("At 1 000 a second:")
		w("%s", eachFunction(func(name string) string { return fmt.Sprintf("%.0f needed", math.Ceil(1000*r.Needed[name])) }))
		w(".\n\n")
	}
	w("What instance-based billing changes besides the bill: the api and the callbacks are then\n")
	w("Cloud Run services built from the same source (`terraform/modules/function`), under the same\n")
	w("names, invokers, environment and secrets; the callbacks' URL is the service's `run.app` one.\n")
	w("A deployment whose declared rate crosses a break-even, or whose `functions_billing` changes,\n")
	w("replaces those functions: plan it like an upgrade (`terraform/README.md`, \"Billing\"). A\n")
	w("rate declared above the real one bills idle instances: at a million lifecycles a month an\n")
	w("instance-based function costs about as much as one instance kept up all month.\n\n")
}

// rateSpelled spells a rate: 2.1, 35, 1 200; "never" for +Inf.
func rateSpelled(rate float64) string {
	if math.IsInf(rate, 1) {
		return "never"
	}
	if rate >= 1000 {
		return thousands(rate)
	}
	return fmt.Sprintf("%g", rate)
}

// location says which Firestore location class the bill prices, and why.
func (r Report) location(w func(string, ...any)) {
	if r.LocationAssumed {
		w("**Firestore location: not given.** `firestore_location` has no default and no var\n")
		w("file set it (`go run ./bench/cost -var-file terraform/examples/staging.tfvars` prices a\n")
		w("deployment's): Firestore is priced at the **%s** class (us-central1's prices), an\n", r.Class)
		w("assumption; a multi-region (nam5, eur3) costs twice as much a read, write and delete\n")
		w("(\"Firestore location\" below compares them).\n")
	} else {
		w("Firestore is priced at `%s`, a **%s** location", r.Defaults.FirestoreLocation, r.Class)
		if len(r.Defaults.VarFiles) > 0 {
			w(" (read from %s)", strings.Join(r.Defaults.VarFiles, ", "))
		}
		w(";\n\"Firestore location\" below compares the classes.\n")
	}
}

// sides writes the comparison of the location classes.
func (r Report) sides(w func(string, ...any)) {
	if len(r.Sides) == 0 {
		return
	}
	w("\n## Firestore location: regional or multi-region\n\n")
	w("`firestore_location` is a region (europe-west1, us-central1) or a multi-region (nam5,\n")
	w("eur3); it cannot be changed after the database is created. Everything else the same:\n\n")
	w("| location class |")
	var shapes []string
	for _, tr := range r.Recording.Shapes {
		if _, ok := r.Sides[0].PerMillion[tr.Shape]; ok {
			shapes = append(shapes, tr.Shape)
			for _, rate := range SideRates {
				w(" %s, at %s a second |", tr.Shape, rateLabel(rate))
			}
		}
	}
	w(" fixed a month (Servo's resources) |\n|---|")
	for range len(shapes) * len(SideRates) {
		w("---:|")
	}
	w("---:|\n")
	for _, side := range r.Sides {
		mark := ""
		if side.Class == r.Class {
			mark = " (priced above)"
		}
		w("| %s%s |", side.Class, mark)
		for _, s := range shapes {
			for _, usd := range side.PerMillion[s] {
				w(" $%.2f |", usd)
			}
		}
		w(" $%.2f |\n", side.Fixed)
	}
	w("\nWhat a multi-region buys: the database is replicated in two regions and a witness\n")
	w("region, so it keeps serving through the loss of a whole region (a region survives the\n")
	w("loss of a zone), and its SLA is 99.999 %% a month instead of a region's 99.99 %%\n")
	w("(https://cloud.google.com/firestore/sla; about 26 s of downtime a month instead of 4.4 min).\n")
	w("Servo's functions, queues and topics are regional (`region`) whatever the database's\n")
	w("location, so a region's loss stops them anyway unless they run in a region of the\n")
	w("multi-region and are redeployed elsewhere.\n")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// thousands spells n with a space between thousands: 50 000.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// lineItems are the items of the shapes' bills, each once: a shape's
// item the shapes before it lack comes after its own previous item.
func lineItems(shapes []Traffic, bills map[string][]Line) []string {
	var items []string
	for _, t := range shapes {
		prev := -1 // where this shape's previous item is
		for _, l := range bills[t.Shape] {
			if i := slices.Index(items, l.Item); i >= 0 {
				prev = i
				continue
			}
			prev++
			items = slices.Insert(items, prev, l.Item)
		}
	}
	return items
}

// schedules writes the section on schedules: the price of a fire (the
// recording's fire shape), of idle schedules, and of a tick with fires.
func (r Report) schedules(w func(string, ...any)) {
	i := slices.IndexFunc(r.Recording.Shapes, func(t Traffic) bool { return t.Fires > 0 })
	if i < 0 {
		return
	}
	fire, s, idle, tick := r.Recording.Shapes[i], r.Recording.IdleSchedule, r.Recording.Idle, r.Recording.FireTick
	table := func(title string, ls []Line) {
		w("| %s | quantity | unit price | USD |\n|---|---:|---|---:|\n", title)
		for _, l := range ls {
			w("| %s | %s | %s | $%s |\n", l.Item, qty(l.Quantity), unitPrice(l.Price), small(l.USD))
		}
		w("| **total** | | | **$%s** |\n\n", small(Total(ls)))
	}
	w("## Schedules\n\n")
	w("A schedule's fire is made by the sweeper's schedule duty (`dispatcher.Scheduler.FireDue`),\n")
	w("not by a submit: no api request, no request log. The shape \"%s\"\n", fire.Shape)
	w("above is a fire and its task's lifecycle: what the sweep pass that made the fire did more\n")
	w("than an idle pass (read the schedule, write the decision under the version read, create\n")
	w("the task and its Cloud Task, settle the schedule; perhaps read the task's outbox entry,\n")
	w("when the pass's re-drive queries it before its delivery deletes it; `TestCostModel`\n")
	w("counts them), the tick's request held %d ms longer, priced at the sweeper's sizing, and\n", fire.SweeperMs)
	w("the task's callbacks: **$%.2f per million fires**", Total(r.Shapes[fire.Shape]))
	if ls, ok := r.Shapes["1 attempt, 1 heartbeat"]; ok {
		w(", against $%.2f for the same lifecycle\nsubmitted", Total(ls))
	}
	w(".\n\n")
	w("An idle schedule costs nothing per sweep pass beyond the duty's fixed due queries shared by all schedules:\n")
	w("one query per group of due shards, among the %d queries of the fixed cost above whether\n", idle.FirestoreQueries)
	w("there are schedules or not, and it reads only the schedules due before the window's end.\nMeasured: a pass with %d\n", s.Schedules)
	w("schedules whose next fire is hours away read %d and wrote %d documents more than a pass with\n", s.PassReads, s.PassWrites)
	w("none (`TestCostModel` asserts none). A schedule at rest costs its document kept, %d bytes\n", s.DocBytes)
	w("and %d index entries after its first fire: **$%s a month per thousand schedules**.\n\n", s.IndexEntries, small(Total(r.IdleSchedules)))
	table(fmt.Sprintf("%s idle schedules, a month", qty(IdleSchedulesPriced)), r.IdleSchedules)
	w("A pass that made a fire is not idle, so the sweeper's invocation does not end after it:\n")
	w("it sweeps again at its next pass. Measured, an invocation whose first pass made a fire\n")
	w("held its request %.1f s in %d passes, against %.1f s in %d at zero traffic: a tick whose first\n",
		float64(tick.InvocationMs)/1000, tick.Passes, float64(idle.InvocationMs)/1000, idle.Passes)
	w("pass makes fires costs **$%s** more, however many fires it makes, $%.2f a month if every\n",
		small(Total(r.FireTick)), Total(r.FireTick)*r.Defaults.SweepTicksPerHour*HoursPerMonth)
	w("tick does. Fires in later passes keep the window open longer, up to the whole window\n")
	w("(as with `sweep_early_end` off) when schedules fire in every pass.\n\n")
	table("a tick with fires, beyond an idle tick", r.FireTick)
}

// small spells an amount to two significant digits, at least two
// decimals, without an exponent: 0.00015, 0.12, 3.40.
func small(usd float64) string {
	if usd == 0 {
		return "0"
	}
	return fmt.Sprintf("%.*f", max(2, 1-int(math.Floor(math.Log10(math.Abs(usd))))), usd)
}

func cell(ls []Line, item string) string {
	for _, l := range ls {
		if l.Item == item {
			return fmt.Sprintf("$%.2f", l.USD)
		}
	}
	return "–"
}

func qty(q float64) string {
	if q == float64(int64(q)) {
		return fmt.Sprintf("%d", int64(q))
	}
	return fmt.Sprintf("%.4g", q)
}

// roundUp2 rounds x up to two significant digits (as a decimal would
// spell it: 0.0084, not 0.008400000000000001).
func roundUp2(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x))-1)
	v, _ := strconv.ParseFloat(fmt.Sprintf("%.2g", math.Ceil(x/p-1e-9)*p), 64)
	return v
}

// rateLabel names a rate, and the month a rate below one makes.
func rateLabel(rate float64) string {
	if rate < 1 {
		return fmt.Sprintf("%.2f (%.0f M a month)", rate, rate*HoursPerMonth*3600/1e6)
	}
	return fmt.Sprintf("%.0f", rate)
}

func unitPrice(p Price) string { return fmt.Sprintf("$%.4g / %s", p.USD, p.Unit) }

// eachFunction is " api X, callbacks Y": each billed function's name and
// what f says of it.
func eachFunction(f func(name string) string) string {
	parts := make([]string, len(BilledFunctions))
	for i, name := range BilledFunctions {
		parts[i] = name + " " + f(name)
	}
	return " " + strings.Join(parts, ", ")
}
