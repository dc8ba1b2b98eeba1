package cost

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// callbacksOnly is hand-made traffic: n callbacks of wall ms, each cpuMs
// of CPU.
func callbacksOnly(n int64, wall, cpuMs int64) Traffic {
	walls, cpus := make([]int64, n), make([]int64, n)
	for i := range walls {
		walls[i], cpus[i] = wall, cpuMs*1000
	}
	return Traffic{Shape: BreakEvenShape, Invocations: map[string]int64{"callbacks": n}, RequestMs: map[string][]int64{"callbacks": walls}, CPUUs: map[string][]int64{"callbacks": cpus}}
}

// TestBillInstanceBased prices hand-made traffic with the callbacks
// billed by instance: no request line, CPU and memory for the instances'
// whole life (their count times the share of time they are up) at the
// instance-based prices.
func TestBillInstanceBased(t *testing.T) {
	d := testDefaults()
	f := d.Functions["callbacks"]
	f.Billing = Instance
	d.Functions["callbacks"] = f
	for _, c := range []struct {
		name      string
		rate      float64 // lifecycles a second
		instances float64
		alive     float64
	}{
		// 4 callbacks a lifecycle at 10 a second: 40 a second, 10 ms each,
		// 1 ms of CPU: one instance, up all the time.
		{"busy", 10, 1, 1 - math.Exp(-40*(0.010+900))},
		// One lifecycle an hour: the instance is up 15 minutes and 10 ms
		// after a request, unless another came: 1 − e^(−λ·900.01).
		{"an hour apart", 1.0 / 3600, 1, 1 - math.Exp(-4.0/3600*(0.010+900))},
		// 20 000 a second of 1 ms of CPU on 1 vCPU at 60 %: 33.3
		// instances' worth (concurrency 80 would need 4.2), 34 instances.
		{"20 000 a second", 5000, math.Ceil(20000 * 0.001 / 0.6), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := DefaultAssumptions
			a.LifecyclesPerSecond = c.rate
			ls, err := Bill(callbacksOnly(4, 10, 1), ListPrices, d, a)
			if err != nil {
				t.Fatal(err)
			}
			perSecond := 4 * c.rate
			secs := 4 * c.instances * c.alive / perSecond // instance-seconds a lifecycle
			want := map[string]float64{
				"Function CPU: callbacks (1 vCPU, instance-based)":   1e6 * secs * 1 * 0.000018,
				"Function memory: callbacks (256Mi, instance-based)": 1e6 * secs * 0.25 * 0.000002,
			}
			for _, l := range ls {
				if strings.HasPrefix(l.Item, "Function requests") {
					t.Errorf("%s: instance-based billing has no fee a request", l.Item)
				}
				if w, ok := want[l.Item]; ok {
					if !near(l.USD, w) {
						t.Errorf("%s: $%g, want $%g", l.Item, l.USD, w)
					}
					delete(want, l.Item)
				}
			}
			for item := range want {
				t.Errorf("no line %q", item)
			}
		})
	}
}

// TestAliveFraction checks the closed form against a direct count: the
// share of a long stretch that lies within wall+idle after an arrival.
func TestAliveFraction(t *testing.T) {
	for _, c := range []struct{ perSecond, wall, idle float64 }{{0.001, 0.01, 900}, {0.01, 0.1, 60}, {1, 0.01, 0.5}} {
		got := AliveFraction(c.perSecond, c.wall, c.idle)
		// Arrivals every 1/λ exactly would keep it up min(1, λ·(wall+idle));
		// Poisson arrivals, less, but never more.
		if bound := math.Min(1, c.perSecond*(c.wall+c.idle)); got > bound+1e-12 || got <= 0 {
			t.Errorf("AliveFraction(%v) = %g, want in (0, %g]", c, got, bound)
		}
	}
	if AliveFraction(0, 1, 900) != 0 {
		t.Error("no request, yet the instance is up")
	}
}

// TestDefaultsAt: functions_billing's setting wins; under auto each
// function is billed by instance from its break-even on, by request below
// it and when none is known; other functions keep request-based billing.
func TestDefaultsAt(t *testing.T) {
	for _, c := range []struct {
		billing string
		rate    float64
		want    string
	}{
		{Auto, 3.19, "api request, callbacks request"},
		{Auto, 3.2, "api request, callbacks instance"},
		{Auto, 9.4, "api instance, callbacks instance"},
		{Request, 1000, "api request, callbacks request"},
		{Instance, 0.01, "api instance, callbacks instance"},
	} {
		d := testDefaults()
		d.Billing, d.BreakEven = c.billing, map[string]float64{"api": 9.4, "callbacks": 3.2}
		at := d.At(c.rate)
		if got := at.Billings(); got != c.want {
			t.Errorf("%s at %g: %s, want %s", c.billing, c.rate, got, c.want)
		}
		if at.Functions["sweeper"].Billing != "" {
			t.Errorf("%s at %g: the sweeper billed %q", c.billing, c.rate, at.Functions["sweeper"].Billing)
		}
		if d.Functions["callbacks"].Billing != "" {
			t.Error("At changed the defaults it was called on")
		}
	}
	d := testDefaults()
	d.Billing = Auto
	if got := d.At(1e6).Billings(); got != "api request, callbacks request" {
		t.Errorf("auto without break-evens: %s", got)
	}
}

// TestBreakEven: below the rate it names instance-based billing costs the
// function more, from it on no more (checked at it and on a grid above
// it); a function that is never cheaper so says +Inf.
func TestBreakEven(t *testing.T) {
	d := testDefaults()
	tr := callbacksOnly(4, 10, 1)
	be, err := BreakEven(tr, "callbacks", ListPrices, d, DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	cost := func(billing string, rate float64) float64 {
		a := DefaultAssumptions
		a.LifecyclesPerSecond = rate
		usd, err := FunctionUSD(tr, "callbacks", billing, ListPrices, d, a)
		if err != nil {
			t.Fatal(err)
		}
		return usd
	}
	if be <= breakEvenRange[0] || math.IsInf(be, 1) {
		t.Fatalf("break-even %g", be)
	}
	for _, rate := range []float64{be, be * 1.5, be * 10, be * 1000} {
		if inst, req := cost(Instance, rate), cost(Request, rate); inst > req {
			t.Errorf("at %g (break-even %g): instance-based $%g > request-based $%g", rate, be, inst, req)
		}
	}
	if below := be / 1.05; cost(Instance, below) <= cost(Request, below) {
		t.Errorf("at %g, under the break-even %g, instance-based is already no dearer", below, be)
	}
	// Instance-based CPU at $1 a vCPU-second never pays, however busy.
	dear := ListPrices
	dear.RunCPUInstance.USD = 1
	if be, err := BreakEven(tr, "callbacks", dear, d, DefaultAssumptions); err != nil || !math.IsInf(be, 1) {
		t.Errorf("instance-based CPU at $1 a second: break-even %g, %v; want +Inf", be, err)
	}
}

// TestTerraformBreakEven: Terraform's local.billing_break_even and
// local.instances_per_lifecycle_rate are the program's figures for the
// committed recording (update terraform/main.tf with the figures this
// test names).
func TestTerraformBreakEven(t *testing.T) {
	_, d, r := repoReport(t)
	for _, name := range BilledFunctions {
		if got, want := d.BreakEven[name], r.BreakEvens[name]; got != want {
			t.Errorf("terraform/main.tf local.billing_break_even.%s = %g, the program computes %g", name, got, want)
		}
		if got, want := d.NeededPerRate[name], r.Needed[name]; got != want {
			t.Errorf("terraform/main.tf local.instances_per_lifecycle_rate.%s = %g, the program computes %g", name, got, want)
		}
	}
}

// TestTargets checks each kind of target against hand-made traffic: a
// per-million bill priced at its own rate, the multi-region ratio, the
// fixed cost without and with the alert policies.
func TestTargets(t *testing.T) {
	rec := Recording{Shapes: []Traffic{
		{Shape: "1 attempt, 1 heartbeat", FirestoreWrites: 8},    // $7.20 regional, $14.40 multi-region
		{Shape: "1 attempt, 10 heartbeats", FirestoreWrites: 17}, // $15.30: over $15
	}, Idle: Idle{FirestoreReads: 100}} // 4.38 M reads a month: $1.31
	d := testDefaults()
	d.AlertConditions = 7 // $10.50 + series: $11.83 + fixed
	r, err := Compute(rec, ListPrices, d, DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, res := range r.Results {
		got[res.Name] = res
	}
	fixed := 43800*100*0.03/1e5 + Total(Alerts(ListPrices, Defaults{AlertsEnabled: true, AlertConditions: 0}))
	for _, c := range []struct {
		name  string
		value float64
		met   bool
	}{
		{"1 attempt, 10 heartbeats, at 10 a second", 15.30, false},
		{"1 attempt, 1 heartbeat, at 10 a second", 7.20, true},
		{"1 attempt, 10 heartbeats, at 1 M a month", 15.30, true},
		{"1 attempt, 1 heartbeat, at 1 M a month", 7.20, true},
		{"multi-region Firestore, each bill above", 2, false},
	} {
		res, ok := got[c.name]
		if !ok || !near(res.Value, c.value) || res.Met != c.met {
			t.Errorf("%s: %+v, want %g, met %v", c.name, res, c.value, c.met)
		}
	}
	off := got["fixed, zero traffic, alerts off"]
	on := got["fixed, zero traffic, alerts on"]
	if off.Value < fixed || off.Value > fixed+1 || !off.Met {
		t.Errorf("fixed, alerts off: %+v (reads $%g)", off, fixed)
	}
	if alerts := 7 * (1.50 + AlertEvaluationsPerMonth*0.35/1e6); !near(on.Value, off.Value+alerts) || on.Value <= 12 || on.Met {
		t.Errorf("fixed, alerts on: %+v, want $%g + $%g, missed", on, off.Value, alerts)
	}
	if len(r.Missed()) != 3 {
		t.Errorf("missed %+v, want 3", r.Missed())
	}
	if _, err := Compute(Recording{Shapes: rec.Shapes[:1]}, ListPrices, testDefaults(), DefaultAssumptions); err == nil {
		t.Error("a recording without a target's shape was priced")
	}
}

// TestReadBilling reads functions_billing, expected_lifecycles_per_second
// and the break-even locals from Terraform and a var file; a bad value is
// an error.
func TestReadBilling(t *testing.T) {
	dir := writeModule(t)
	extra := map[string]string{
		"billing.tf": `variable "expected_lifecycles_per_second" {
  type    = number
  default = 1
}

variable "functions_billing" {
  type    = string
  default = "auto"
}

locals {
  billing_break_even = {
    api       = 9.4
    callbacks = 3.2
  }
  instances_per_lifecycle_rate = {
    api       = 0.0084
    callbacks = 0.066
  }
}
`,
		"busy.tfvars":  "expected_lifecycles_per_second = 5\n",
		"bad.tfvars":   "functions_billing = \"always\"\n",
		"force.tfvars": "functions_billing = \"instance\"\n",
		"zero.tfvars":  "expected_lifecycles_per_second = 0\n",
	}
	for name, text := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		varFile string
		rate    float64
		billing string
		at      string
	}{
		{"", 1, Auto, "api request, callbacks request"},
		{"busy.tfvars", 5, Auto, "api request, callbacks instance"},
		{"force.tfvars", 1, Instance, "api instance, callbacks instance"},
	} {
		var files []string
		if c.varFile != "" {
			files = append(files, filepath.Join(dir, c.varFile))
		}
		d, err := ReadDefaults(dir, files...)
		if err != nil {
			t.Fatal(err)
		}
		if d.DeclaredRate != c.rate || d.Billing != c.billing || d.BreakEven["callbacks"] != 3.2 || d.NeededPerRate["api"] != 0.0084 {
			t.Errorf("%s: rate %g, billing %q, break-even %v, needed %v", c.varFile, d.DeclaredRate, d.Billing, d.BreakEven, d.NeededPerRate)
		}
		if got := d.At(d.DeclaredRate).Billings(); got != c.at {
			t.Errorf("%s: %s, want %s", c.varFile, got, c.at)
		}
	}
	for _, bad := range []string{"bad.tfvars", "zero.tfvars"} {
		if _, err := ReadDefaults(dir, filepath.Join(dir, bad)); err == nil {
			t.Errorf("%s was read", bad)
		}
	}
}
