// Command cost prints Servo's bill from recorded traffic: per million
// lifecycles of each workload shape, every line item named, the fixed
// monthly cost at zero traffic, the functions' billing (request-based or
// instance-based) side by side with its break-even rates, and issue 54's
// targets (package internal/cost).
//
//	go run ./bench/cost                       # the bill, as Markdown
//	go run ./bench/cost -write docs/cost.md   # regenerate the doc
//	go run ./bench/cost -check                # exit 1 when a target is missed
//	go run ./bench/cost -rate 100             # price a deployment of 100 lifecycles a second (default: expected_lifecycles_per_second)
//	go run ./bench/cost -granularity 1        # Cloud Run rounding busy time to 1 ms instead of 100
//	go run ./bench/cost -record               # re-record the traffic (local stack, ~2 min)
//	go run ./bench/cost -var-file terraform/examples/staging.tfvars  # price a deployment's variables
//
// Firestore is priced at the location class of firestore_location as the
// var files set it; it has no default, so without one the regional class
// is priced, said in the output and on stderr as an assumption. The
// api's and the callbacks' billing is functions_billing's, for the
// declared rate (expected_lifecycles_per_second, or -rate).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/servo-dev/servo/internal/cost"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traffic := fs.String("traffic", "internal/cost/testdata/traffic.json", "recorded traffic")
	tf := fs.String("terraform", "terraform", "the Terraform root module whose defaults are priced")
	var varFiles []string
	fs.Func("var-file", "a Terraform var file whose variables replace the defaults (firestore_location, firestore_database, alerts_enabled, ...); repeatable, the last winning", func(s string) error {
		varFiles = append(varFiles, s)
		return nil
	})
	write := fs.String("write", "", "write the Markdown to this file instead of stdout")
	check := fs.Bool("check", false, "exit 1 when a target is missed")
	rate := fs.Float64("rate", 0, "the steady rate, lifecycles a second, the deployment is priced at, declared (default: Terraform's expected_lifecycles_per_second)")
	granularity := fs.Int64("granularity", cost.DefaultAssumptions.BillingGranularityMs, "milliseconds Cloud Run rounds an instance's billed busy periods up to (calibrate it against a real bill)")
	record := fs.Bool("record", false, "re-record the traffic on the local stack first (go test -bench BenchmarkCostRecord ./internal/devstack/)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
	if rateSet && *rate <= 0 {
		fmt.Fprintln(stderr, "cost: -rate must be above 0")
		return 2
	}
	if *granularity < 1 {
		fmt.Fprintln(stderr, "cost: -granularity must be at least 1 (ms)")
		return 2
	}
	if *record {
		abs, err := filepath.Abs(*traffic)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkCostRecord$", "-benchtime", "1x", "-count=1", "-timeout=10m", "./internal/devstack/")
		cmd.Env = append(os.Environ(), "SERVO_COST_RECORD="+abs)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(stderr, "cost: recording failed:", err)
			return 1
		}
	}
	rec, err := cost.ReadRecording(*traffic)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	d, err := cost.ReadDefaults(*tf, varFiles...)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	a := cost.DefaultAssumptions
	switch {
	case rateSet:
		a.LifecyclesPerSecond = *rate
	case d.DeclaredRate > 0:
		a.LifecyclesPerSecond = d.DeclaredRate
	}
	a.BillingGranularityMs = *granularity
	r, err := cost.Compute(rec, cost.ListPrices, d, a)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if r.LocationAssumed {
		fmt.Fprintf(stderr, "cost: firestore_location not set (no default, no -var-file setting it): Firestore priced at the %s class, an assumption\n", r.Class)
	}
	md := r.Markdown()
	if *write != "" {
		if err := os.WriteFile(*write, []byte(md), 0o644); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	} else {
		fmt.Fprint(stdout, md)
	}
	for _, m := range r.Missed() {
		fmt.Fprintf(stderr, "cost: target missed: %s: %s > %s %s\n", m.Name, cost.Amount(m.Target, m.Value), cost.Amount(m.Target, m.Max), m.Per)
	}
	if *check && len(r.Missed()) > 0 {
		return 1
	}
	return 0
}
