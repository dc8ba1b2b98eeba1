package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/cost"
)

// TestProgramPrintsTheBill runs the program on the committed recording:
// it prints every shape's bill, the fixed cost and the targets, exits 0
// without -check, and with -check exits 1 exactly when a target is
// missed.
func TestProgramPrintsTheBill(t *testing.T) {
	const recorded = "../../internal/cost/testdata/traffic.json"
	rec, err := cost.ReadRecording(recorded)
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run([]string{"-traffic", recorded, "-terraform", "../../terraform"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"## Targets (issue 54)", "## Billing: request-based or instance-based", "## Per million lifecycles", "## Fixed cost a month at zero traffic", "## Schedules", "AWS Step Functions Standard", "| **total** |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output has no %q", want)
		}
	}
	for _, s := range rec.Shapes {
		if !regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(s.Shape) + ` \| \d+( \(\+\d+ missing\))? \|`).MatchString(out.String()) {
			t.Errorf("the output has no traffic row for shape %q", s.Shape)
		}
	}
	if total := regexp.MustCompile(`(?m)^\| \*\*total\*\* \|( \*\*\$[0-9.]+\*\* \|)+$`).FindString(out.String()); strings.Count(total, "$") != len(rec.Shapes) {
		t.Errorf("the totals row %q has not one total per shape (%d)", total, len(rec.Shapes))
	}
	missed := strings.Count(errs.String(), "target missed")
	code := run([]string{"-traffic", recorded, "-terraform", "../../terraform", "-check"}, &bytes.Buffer{}, &bytes.Buffer{})
	if (missed > 0) != (code == 1) {
		t.Errorf("-check exited %d with %d targets missed", code, missed)
	}

	// Priced busier, the bill of a shape is lower (instances shared by
	// more requests, and billed by instance from the break-even on); a
	// rate of 0 is refused.
	shape := func(flags ...string) float64 {
		var out bytes.Buffer
		if code := run(append([]string{"-traffic", recorded, "-terraform", "../../terraform"}, flags...), &out, &bytes.Buffer{}); code != 0 {
			t.Fatalf("%v: exit %d", flags, code)
		}
		m := regexp.MustCompile(`(?m)^\| \*\*total\*\* \| \*\*\$([0-9.]+)\*\* \| \*\*\$([0-9.]+)\*\* \|`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("%v: no totals row", flags)
		}
		usd, err := strconv.ParseFloat(m[2], 64) // the second shape: 1 attempt, 10 heartbeats
		if err != nil {
			t.Fatal(err)
		}
		return usd
	}
	if low, high := shape("-rate", "0.1"), shape("-rate", "1000"); high >= low {
		t.Errorf("10 heartbeats: $%.2f at 1 000 a second, $%.2f at 0.1: busier is not cheaper", high, low)
	}
	// Rounded to 1 ms instead of 100, request-billed instances are billed
	// less: -granularity reaches the model (at 1 a second, below both
	// break-evens).
	if fine, coarse := shape("-rate", "1", "-granularity", "1"), shape("-rate", "1"); fine >= coarse {
		t.Errorf("10 heartbeats: $%.2f with busy time rounded to 1 ms, $%.2f to 100 ms", fine, coarse)
	}
	// Without -rate, the declared rate (expected_lifecycles_per_second) is
	// priced.
	if declared, one := shape(), shape("-rate", "1"); declared != one {
		t.Errorf("without -rate $%.2f, at the declared 1 a second $%.2f", declared, one)
	}
	for _, bad := range [][]string{{"-rate", "0"}, {"-granularity", "0"}, {"-granularity", "-5"}} {
		if code := run(append([]string{"-traffic", recorded, "-terraform", "../../terraform"}, bad...), &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}

	// A cheap recording meets every target: -check exits 0.
	cheap := filepath.Join(t.TempDir(), "cheap.json")
	if err := cost.WriteRecording(cheap, cost.Recording{Recorded: "2026-11-26", Shapes: []cost.Traffic{
		// $0.90 of writes (twice that multi-region) and $1.40 of logs.
		{Shape: "1 attempt, 1 heartbeat", FirestoreWrites: 1, LogBytes: 3000}, {Shape: "1 attempt, 10 heartbeats", FirestoreWrites: 1, LogBytes: 3000},
	}}); err != nil {
		t.Fatal(err)
	}
	errs.Reset()
	if code := run([]string{"-traffic", cheap, "-terraform", "../../terraform", "-check"}, &bytes.Buffer{}, &errs); code != 0 {
		t.Errorf("-check on a cheap recording: exit %d: %s", code, errs.String())
	}
	// An expensive one misses them: -check exits 1.
	dear := filepath.Join(t.TempDir(), "dear.json")
	if err := cost.WriteRecording(dear, cost.Recording{Recorded: "2026-11-26", Shapes: []cost.Traffic{
		{Shape: "1 attempt, 1 heartbeat", FirestoreWrites: 100}, {Shape: "1 attempt, 10 heartbeats", FirestoreWrites: 100},
	}}); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"-traffic", dear, "-terraform", "../../terraform", "-check"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("-check on an expensive recording: exit %d, want 1", code)
	}
}

// TestVarFile prices the shipped examples' variables: staging's eur3
// multi-region and named database (no free quota), dev's location and
// its alerts off; without a var file the location is said to be assumed.
func TestVarFile(t *testing.T) {
	const recorded = "../../internal/cost/testdata/traffic.json"
	for _, c := range []struct {
		name     string
		varFiles []string
		want     []string
		stderr   bool // the assumed location said on stderr
	}{
		{"none", nil, []string{"**Firestore location: not given.**", "| regional (priced above) |", "Cloud Monitoring alert conditions (7, alerts_enabled)",
			"sets them for it: api request, callbacks request."}, true},
		{"staging", []string{"../../terraform/examples/staging.tfvars"},
			[]string{"Firestore is priced at `eur3`, a **multi-region** location", "| multi-region (priced above) |", "The database is `servo-staging`, not `(default)`", "Cloud Monitoring alert conditions (7, alerts_enabled)",
				"a steady **10 lifecycles a second**", "sets them for it: api instance, callbacks instance."}, false},
		{"dev", []string{"../../terraform/examples/dev.tfvars"},
			[]string{"The alert policies are off (`alerts_enabled = false`)", "The database is `(default)`: Firestore's free quota"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"-traffic", recorded, "-terraform", "../../terraform"}
			for _, f := range c.varFiles {
				args = append(args, "-var-file", f)
			}
			var out, errs bytes.Buffer
			if code := run(args, &out, &errs); code != 0 {
				t.Fatalf("exit %d: %s", code, errs.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the output has no %q", w)
				}
			}
			if got := strings.Contains(errs.String(), "firestore_location not set"); got != c.stderr {
				t.Errorf("stderr says the location is assumed: %v, want %v: %s", got, c.stderr, errs.String())
			}
		})
	}
	if code := run([]string{"-traffic", recorded, "-terraform", "../../terraform", "-var-file", "nosuch.tfvars"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("a missing var file: exit %d, want 1", code)
	}
}
