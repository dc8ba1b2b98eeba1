package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
)

// passingDueShards is the due shards under which the default target
// passes at its peak: TestScaleCommand's layout, and the mutants'.
const passingDueShards = 512

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// TestScaleCommand runs the command at the default recorded workload (60
// tasks: fewer make the sequential-range test noisy) with the
// default target on the emulators: the table is printed, no row is over
// its limit, and the command exits 0. The rows the issue named as over on
// the earlier layout (sequential task names and index values, 4 quota
// shards for the hot tenant, one queue for the worker with half the
// tasks) are present and under their limits; so are the schedules' rows
// at the top of the minute, the steady load added where it shares a row.
//
// It runs at passingDueShards: with deletes counted and every rate at the
// default peak (2 × the mean), production's default of 128 due shards
// leaves the lease and outbox due ranges (and two listing ranges) over
// their limits (docs/scale.md).
func TestScaleCommand(t *testing.T) {
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"-tasks", "60", "-due-shards", strconv.Itoa(passingDueShards), "-project", emulatortest.ProjectID(t)}, &out, &errs)
	if code == 2 {
		t.Fatalf("the workload failed: %s", errs.String())
	}
	table := out.String()
	t.Log("\n" + table)
	for _, want := range []string{"| document | tasks/{id} |", "| collection | tasks |", "| queue | queues/big-q{k} |",
		"| document | quotas/{id} | quotas/", "| index | tasks(dueShard,state,leaseExpiresAt)",
		"| ordering key | servo-task-events {key} |", "| topic | servo-task-events |", "| limit | per second | source | read |",
		"## Schedules at the top of the minute", "| document | schedules/{id} | schedules/", "| collection | schedules |",
		"| index | schedules(dueShard,dueAt)", "steady) | 500 entries/s", "Per task, recorded: counter writes"} {
		if !strings.Contains(table, want) {
			t.Errorf("no row %q in the table", want)
		}
	}
	over := regexp.MustCompile(`(?m)^\| (\w[\w ]*) \| ([^|]+) \|.*\*\*OVER\*\*`).FindAllStringSubmatch(table, -1)
	var got []string
	for _, m := range over {
		got = append(got, m[1]+" "+strings.TrimSpace(m[2]))
	}
	if code != 0 || len(got) > 0 {
		t.Errorf("exit %d with rows over their limits: %q; want exit 0 and none", code, got)
	}
}

// TestFlagsRefused: a target the model cannot take is refused with exit 2
// before anything runs.
func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{{"-due-shards", "0"}, {"-same-minute", "1.5"}, {"-fire-within", "0s"}, {"-schedule-every", "30s"}} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("%v: exit %d, %q; want 2 and a message", args, code, errs.String())
		}
	}
}

// TestScaleCommandAtAnotherLayout: a hot tenant over the quota's peak cap
// is reported, not refused (exit 1 with the rows), and more due shards
// carry a load the default's would not.
func TestScaleCommandAtAnotherLayout(t *testing.T) {
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"-tasks", "30", "-recorded-schedules", "0", "-submits", "30000", "-completions", "30000",
		"-running", "3000000", "-hot-share", "0.3", "-due-shards", "2048", "-project", emulatortest.ProjectID(t)}, &out, &errs)
	if code != 1 || !strings.Contains(out.String(), "The hot tenant's declared peak (18000 tasks/s: 2 × its 9000) is over the quota's cap of 10000 tasks/s") {
		t.Fatalf("exit %d; want 1 and the cap named:\n%s\n%s", code, out.String(), errs.String())
	}
	if strings.Contains(out.String(), "| index | tasks(dueShard,state,leaseExpiresAt) (monotonic) | dueShard={k},state=\"RUNNING\" | global | 117 | 914") ||
		regexp.MustCompile(`(?m)^\| index \| tasks\(dueShard,state,leaseExpiresAt\).*\*\*OVER\*\*`).MatchString(out.String()) {
		t.Errorf("the lease index is over at 2048 due shards:\n%s", out.String())
	}
}
