package scale_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/scale"
)

// TestRunWrites: a run's document is created once, then rewritten at
// most once an interval by each process serving its submits, never more
// than once a request.
func TestRunWrites(t *testing.T) {
	for _, c := range []struct {
		name                   string
		size, batch, procs     int
		every                  time.Duration
		rate, perRequest, want float64
	}{
		// 1 000 000 tasks at 3 000/s: 333 s, 6 minutes begun; created
		// once, then 20 processes rewrite it in each of the 5 after
		// their first: 101 writes in 333 s.
		{"a run of a million, 20 processes", 1_000_000, 1, 20, time.Minute, 3000, 0, 101 / (1e6 / 3000.0)},
		// The same at the peak's 6 000/s: 167 s, 3 minutes begun.
		{"at the peak", 1_000_000, 1, 20, time.Minute, 6000, 0, 41 / (1e6 / 6000.0)},
		// 200 processes: 401 writes in 167 s.
		{"200 processes", 1_000_000, 1, 200, time.Minute, 6000, 0, 401 / (1e6 / 6000.0)},
		// 840 processes at 28 minutes (SERVO_RUN_DOCUMENT_EVERY): the
		// run is over before any rewrites it: created once.
		{"840 processes", 1_000_000, 1, 840, 28 * time.Minute, 30000, 0, 1 / (1e6 / 30000.0)},
		// A run of 1 000 at 6 000/s lasts 0.17 s: created once.
		{"a short run", 1000, 1, 20, time.Minute, 6000, 0, 1},
		// Batches of 500: two requests, one write.
		{"a short run in batches", 1000, 500, 20, time.Minute, 6000, 0, 1},
		// Batched: 2 000 requests over 20 processes, as unbatched.
		{"a million in batches", 1_000_000, 500, 20, time.Minute, 6000, 0, 41 / (1e6 / 6000.0)},
		// Every task its own run: no run document.
		{"own runs", 1, 1, 20, time.Minute, 6000, 0, 0},
		// The rule broken: every request writes it.
		{"a write every request", 1_000_000, 1, 20, time.Minute, 6000, 1, 6000},
		{"a write every batch", 1_000_000, 100, 20, time.Minute, 6000, 1, 60},
		// A slow run of 100 requests over 50 processes, 2 each: one
		// rewrite each at most, within the run's 10 minutes.
		{"few requests a process", 100, 1, 50, time.Minute, 1.0 / 6, 0, 51 / 600.0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := scale.DefaultTarget
			tg.RunSize, tg.Batch, tg.APIInstances = c.size, c.batch, c.procs
			if got := tg.RunWrites(c.rate, c.every, c.perRequest); math.Abs(got-c.want) > 1e-9*max(1, c.want) {
				t.Errorf("RunWrites = %.4f, want %.4f", got, c.want)
			}
		})
	}
}

// runTraffic is 40 tasks of tenant "hot" in one run, each submitted by a
// request of its own, the run's document written docWrites times.
func runTraffic(docWrites int) scale.Traffic {
	tr := workload(120, func(i int, id string) []scale.Event {
		return []scale.Event{doc("tasks/"+hash(id), "tasks", id)}
	})
	var first string
	for id, ti := range tr.Tasks {
		if ti.Tenant == "hot" && (first == "" || id < first) {
			first = id
		}
	}
	for range docWrites {
		tr.Events = append(tr.Events, doc("runs/ab12_run_1.hot", "runs", first))
	}
	tr.Runs = map[string]scale.RunInfo{"runs/ab12_run_1.hot": {Tenant: "hot", Requests: 40}}
	tr.RunEvery, tr.Duration = time.Minute, 20*time.Second
	return tr
}

// TestRunRow: the run document's row is priced by the run model (its
// size, the batch, the processes), not per recorded task; over its limit
// it says so; a recording that wrote it more often than the rule allows
// is priced per request.
func TestRunRow(t *testing.T) {
	for _, c := range []struct {
		name      string
		docWrites int
		size      int
		batch     int
		procs     int
		over      bool
	}{
		{"a million, 20 processes", 1, 1_000_000, 1, 20, false},
		{"a million, 100 processes", 1, 1_000_000, 1, 100, true},
		{"a thousand, one a request", 1, 1000, 1, 20, false}, // created once, in its second
		{"a thousand, in batches of 1000", 1, 1000, 1000, 20, false},
		{"written every request", 40, 1_000_000, 1, 20, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := scale.DefaultTarget
			tg.RunSize, tg.Batch, tg.APIInstances = c.size, c.batch, c.procs
			var row *scale.Row
			for _, r := range scale.New(runTraffic(c.docWrites)).Extrapolate(tg) {
				if r.Section == "document" && r.Name == "runs/{id}" {
					row = &r
				}
			}
			if row == nil {
				t.Fatal("no runs/{id} row")
			}
			perRequest := 0.0
			if c.docWrites > 1 {
				perRequest = float64(c.docWrites) / 40
			}
			want := tg.RunWrites(tg.TenantRate(scale.Hot)*tg.PeakFactor(), time.Minute, perRequest)
			if row.Scope != scale.PerRun || math.Abs(row.Rate-want) > 1e-9*want || row.Over() != c.over {
				t.Errorf("row %s %.3f (over %v), want %s %.3f (over %v)", row.Scope, row.Rate, row.Over(), scale.PerRun, want, c.over)
			}
		})
	}
}

// TestShareRow: a tenant's share of a worker is priced at the tenant's
// rate times the worker's share of all tasks, a row of its own.
func TestShareRow(t *testing.T) {
	tr := workload(120, func(i int, id string) []scale.Event {
		if i%3 == 1 && i%2 == 1 { // t1's tasks on w1
			return []scale.Event{doc("quotas/s_w1t1-0", "quotas", id), doc("quotas/s_w1t1-0", "quotas", id)}
		}
		return nil
	})
	tr.Pairs = map[string]bool{"quotas/s_w1t1-0": true}
	tg := mean()
	rows := scale.New(tr).Extrapolate(tg)
	want := 2 * tg.TenantRate(scale.Ordinary) * tg.WorkerRate(scale.Ordinary) / tg.Submits
	for _, r := range rows {
		if r.Name == "quotas/{id} (tenant × worker)" {
			if r.Scope != scale.PerShare || math.Abs(r.Mean-want) > 1e-9 {
				t.Errorf("share row %s %.5f, want %s %.5f", r.Scope, r.Mean, scale.PerShare, want)
			}
			return
		}
	}
	t.Errorf("no share row in %v", fmt.Sprint(rows))
}

// TestExpiryTies: documents written by one commit (a batch's) expire at
// the same instant, in no order among them: a range of them is not
// sequential however the recording lists them; expiring one after the
// other in name order, it is.
func TestExpiryTies(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		step time.Duration
		mono bool
	}{{"one instant", 0, false}, {"in order", time.Second, true}} {
		t.Run(c.name, func(t *testing.T) {
			tr := workload(40, func(i int, id string) []scale.Event {
				e := entry("idempotency.tenantId ASCENDING", "", `"hot"`, fmt.Sprintf("idempotency/%04d", i), id)
				e.Delete, e.Expiry, e.At = true, true, at.Add(time.Duration(i)*c.step)
				return []scale.Event{e}
			})
			for _, r := range scale.New(tr).Extrapolate(mean()) {
				if r.Name == "idempotency.tenantId ASCENDING" && r.Monotonic != c.mono {
					t.Errorf("monotonic %v, want %v", r.Monotonic, c.mono)
				}
			}
		})
	}
}
