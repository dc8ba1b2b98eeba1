package cost

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testDefaults are hand-made Terraform defaults.
func testDefaults() Defaults {
	return Defaults{
		Functions: map[string]Function{
			"api":       {Memory: "512Mi", CPU: 1, Concurrency: 80},
			"callbacks": {Memory: "256Mi", CPU: 1, Concurrency: 80},
			"sweeper":   {Memory: "512Mi", CPU: 1, Concurrency: 1},
		},
		SweepTicksPerHour: 60, TraceSampling: 0.5, TopicRetentionDays: 7, SchedulerJobs: 1, SigningKeyVersions: 1,
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestBillLineItems prices hand-made traffic that exercises one line item
// at a time: that line must carry the whole bill, at the hand-computed
// price.
func TestBillLineItems(t *testing.T) {
	const gib = float64(1 << 30)
	callbackLines := []string{"Function CPU: callbacks (1 vCPU)", "Function memory: callbacks (256Mi)", "Function requests: callbacks", "Cloud Logging (Servo's lines + Cloud Run request logs)"}
	// A rate so low that no two requests share an instance's billed time.
	alone := DefaultAssumptions
	alone.LifecyclesPerSecond = 1e-12
	for _, c := range []struct {
		item    string
		traffic Traffic
		want    float64
		also    []string // the other lines the traffic prices (tested in their own rows)
	}{
		{"Firestore document reads", Traffic{FirestoreReads: 10}, 10e6 * 0.03 / 1e5, nil},
		{"Firestore document writes", Traffic{FirestoreWrites: 10}, 10e6 * 0.09 / 1e5, nil},
		{"Firestore lookups of missing documents (as reads)", Traffic{FirestoreMissing: 10}, 10e6 * 0.03 / 1e5, nil},
		{"Firestore deletes (TTL included)", Traffic{FirestoreDeletes: 10}, 10e6 * 0.01 / 1e5, nil},
		// No retention in the defaults: 12 months of storage.
		{"Firestore storage: documents", Traffic{StoredDocBytes: 2048}, 1e6 * 2048 / gib * 12 * 0.15, nil},
		{"Firestore storage: index entries", Traffic{StoredIndexEntries: 10}, 1e6 * 10 * 100 / gib * 12 * 0.15, nil},
		// 100 bytes is one chunk, 40 000 two; each create has its push.
		{"Cloud Tasks operations (create + push, 32 KB chunks)", Traffic{CloudTasksCreates: []int64{100, 40000}}, 6e6 * 0.40 / 1e6, nil},
		// 10 bytes is billed as 1 000.
		{"Pub/Sub publish throughput (1 KB minimum)", Traffic{PubSubMessages: []int64{10, 2000}}, 3000e6 * 40 / (1 << 40), []string{"Pub/Sub publish throughput (1 KB minimum)", "Pub/Sub delivery to 1 subscription(s)", "Pub/Sub topic retention (7 days)"}},
		{"Pub/Sub delivery to 1 subscription(s)", Traffic{PubSubMessages: []int64{10, 2000}}, 3000e6 * 40 / (1 << 40), []string{"Pub/Sub publish throughput (1 KB minimum)", "Pub/Sub delivery to 1 subscription(s)", "Pub/Sub topic retention (7 days)"}},
		{"Pub/Sub topic retention (7 days)", Traffic{PubSubMessages: []int64{10, 2000}}, 3000e6 / gib * 7 / (730.0 / 24) * 0.27, []string{"Pub/Sub publish throughput (1 KB minimum)", "Pub/Sub delivery to 1 subscription(s)", "Pub/Sub topic retention (7 days)"}},
		{"Function requests: api", Traffic{Invocations: map[string]int64{"api": 2}}, 2e6 * 0.40 / 1e6, []string{"Function CPU: api (1 vCPU)", "Function memory: api (512Mi)", "Cloud Logging (Servo's lines + Cloud Run request logs)"}},
		// At a rate low enough that requests never overlap, 5 ms is
		// billed 100 ms and 150 ms 200 ms: 150 ms on average.
		{"Function CPU: callbacks (1 vCPU)", Traffic{RequestMs: map[string][]int64{"callbacks": {5, 150}}, Invocations: map[string]int64{"callbacks": 2}}, 2e6 * 0.15 * 0.000024, callbackLines},
		{"Function memory: callbacks (256Mi)", Traffic{RequestMs: map[string][]int64{"callbacks": {5, 150}}, Invocations: map[string]int64{"callbacks": 2}}, 2e6 * 0.15 * 0.25 * 0.0000025, callbackLines},
		// Servo's 1 000 bytes and no invocation: no request log.
		{"Cloud Logging (Servo's lines + Cloud Run request logs)", Traffic{LogBytes: 1000}, 1000e6 / gib * 0.50, nil},
		// Each line is billed as an entry: the line and the entry's own fields.
		{"Cloud Logging (Servo's lines + Cloud Run request logs)", Traffic{LogLines: 2, LogBytes: 1000}, (1000 + 2*400) * 1e6 / gib * 0.50, nil},
		{"Cloud Trace (sampling 0.5)", Traffic{Spans: 10}, 5e6 * 0.20 / 1e6, nil},
		{"Secret Manager accesses", Traffic{SecretAccesses: 1}, 1e6 * 0.03 / 1e4, nil},
		// A fire's pass held the sweeper's request 30 ms longer: its
		// sizing (1 vCPU, 512Mi here), no request and no rounding.
		{"Sweeper CPU: the fire's pass (1 vCPU)", Traffic{Fires: 1, SweeperMs: 30}, 1e6 * 0.03 * 0.000024, []string{"Sweeper memory: the fire's pass (512Mi)"}},
		{"Sweeper memory: the fire's pass (512Mi)", Traffic{Fires: 1, SweeperMs: 30}, 1e6 * 0.03 * 0.5 * 0.0000025, []string{"Sweeper CPU: the fire's pass (1 vCPU)"}},
		{"Sweeper CPU: the fire's pass (1 vCPU)", Traffic{Fires: 1}, 0, nil},
	} {
		t.Run(c.item, func(t *testing.T) {
			ls, err := Bill(c.traffic, ListPrices, testDefaults(), alone)
			if err != nil {
				t.Fatal(err)
			}
			var got *Line
			for i := range ls {
				switch {
				case ls[i].Item == c.item:
					got = &ls[i]
				case ls[i].USD != 0 && !slices.Contains(c.also, ls[i].Item):
					t.Errorf("%s priced $%g", ls[i].Item, ls[i].USD)
				}
			}
			if got == nil {
				t.Fatalf("no line %q in %v", c.item, ls)
			}
			if !near(got.USD, c.want) {
				t.Errorf("%s: $%g, want $%g", c.item, got.USD, c.want)
			}
		})
	}
}

// TestRequestLogPerInvocation: each invocation adds Cloud Run's request
// log entry to the logging bill.
func TestRequestLogPerInvocation(t *testing.T) {
	ls, err := Bill(Traffic{Invocations: map[string]int64{"callbacks": 3}}, ListPrices, testDefaults(), DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	want := 3e6 * 1000 / float64(1<<30) * 0.50
	for _, l := range ls {
		if l.Item == "Cloud Logging (Servo's lines + Cloud Run request logs)" && !near(l.USD, want) {
			t.Errorf("logging $%g, want $%g", l.USD, want)
		}
	}
}

// TestTTLStorage: a document with a TTL is priced until its TTL deletes
// it, not for the months of a document kept for good.
func TestTTLStorage(t *testing.T) {
	for _, c := range []struct {
		traffic Traffic
		want    float64
	}{
		// 1 MiB kept for a month (30.4 days).
		{Traffic{TTLDocByteDays: (1 << 20) * 730.0 / 24}, 1e6 / 1024 * 0.15},
		// 10 entries of 100 bytes kept for a month.
		{Traffic{TTLIndexEntryDays: 10 * 730.0 / 24}, 1e6 * 1000 / (1 << 30) * 0.15},
	} {
		ls, err := Bill(c.traffic, ListPrices, testDefaults(), DefaultAssumptions)
		if err != nil {
			t.Fatal(err)
		}
		if !near(Total(ls), c.want) {
			t.Errorf("%+v: $%g, want $%g", c.traffic, Total(ls), c.want)
		}
	}
}

// TestUnsizedFunction: traffic to a function Terraform does not size is
// an error, not a free line.
func TestUnsizedFunction(t *testing.T) {
	if _, err := Bill(Traffic{Shape: "s", Invocations: map[string]int64{"nosuch": 1}}, ListPrices, testDefaults(), DefaultAssumptions); err == nil {
		t.Fatal("no error")
	}
}

// TestFixedLineItems prices a hand-made idle invocation line by line.
func TestFixedLineItems(t *testing.T) {
	const ticks = 60 * 730.0
	idle := Idle{InvocationMs: 54950, Passes: 4, FirestoreReads: 100, FirestoreWrites: 10, FirestoreQueries: 96, LogLines: 1, LogBytes: 500, Spans: 8, StoredDocBytes: 1 << 30}
	d := testDefaults()
	d.Functions["callbacks"] = Function{Memory: "256Mi", CPU: 1, MinInstances: 1}
	ls, err := Fixed(idle, ListPrices, d, DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"Sweeper requests (Scheduler ticks)":                      ticks * 0.40 / 1e6,
		"Sweeper CPU (1 vCPU, request held 55.0 s a tick)":        ticks * 55 * 0.000024,
		"Sweeper memory (512Mi)":                                  ticks * 55 * 0.5 * 0.0000025,
		"Sweeper Firestore reads (4 passes a tick, 96 queries)":   ticks * 100 * 0.03 / 1e5,
		"Sweeper Firestore writes (pass record, pulse)":           ticks * 10 * 0.09 / 1e5,
		"Sweep topic publish + push delivery":                     ticks * 2000 * 40 / (1 << 40),
		"Cloud Logging (sweeper lines + request logs)":            ticks * (500 + 400 + 1000) / (1 << 30) * 0.50,
		"Cloud Trace (sampling 0.5)":                              ticks * 4 * 0.20 / 1e6,
		"Cloud Scheduler jobs (1)":                                0.10,
		"Secret Manager: signing-key versions (assumed 1 active)": 0.06,
		"Secret Manager: key re-reads by the sweeper's instance":  12 * 730 * (ticks * 55 / (730 * 3600)) * 0.03 / 1e4,
		"Firestore storage (meta documents)":                      0.15,
		"Minimum instances: callbacks CPU (1)":                    730 * 3600 * 0.000024,
		"Minimum instances: callbacks memory":                     730 * 3600 * 0.25 * 0.0000025,
	}
	var sum float64
	for item, w := range want {
		found := false
		for _, l := range ls {
			if l.Item == item {
				found = true
				if !near(l.USD, w) {
					t.Errorf("%s: $%g, want $%g", item, l.USD, w)
				}
			}
		}
		if !found {
			t.Errorf("no line %q", item)
		}
		sum += w
	}
	if !near(Total(ls), sum) || len(ls) != len(want) {
		t.Errorf("%d lines totalling $%g, want %d totalling $%g", len(ls), Total(ls), len(want), sum)
	}
}

// TestReadDefaults reads a hand-made root module, then the repository's:
// the sizes, cadence, sampling and retention the bill uses come from
// Terraform, not from a copy.
func TestReadDefaults(t *testing.T) {
	dir := t.TempDir()
	vars := `variable "topic_message_retention" {
  type    = string
  default = "86400s"
}

variable "sweep_schedule" {
  type    = string
  default = "*/2 * * * *"
}

variable "functions" {
  type = object({
    api = optional(object({
      memory          = optional(string, "1Gi")
      cpu             = optional(string, "2")
      min_instances   = optional(number, 1)
      concurrency     = optional(number, 40)
    }), {})
    callbacks = optional(object({
      memory          = optional(string, "128Mi")
      cpu             = optional(string, "500m")
    }), {})
    sweeper = optional(object({
      memory          = optional(string, "256Mi")
      cpu             = optional(string, "0.5")
    }), {})
  })
  default = {}
}

variable "trace_sampling_ratio" {
  type    = number
  default = 0.1
}

variable "retention_days" {
  type    = number
  default = 30
}
`
	if err := os.WriteFile(filepath.Join(dir, "variables.tf"), []byte(vars), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`resource "google_cloud_scheduler_job" "sweep" {}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := ReadDefaults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Functions["api"] != (Function{Memory: "1Gi", CPU: 2, MinInstances: 1, Concurrency: 40}) || d.Functions["callbacks"] != (Function{Memory: "128Mi", CPU: 0.5}) || d.Functions["sweeper"] != (Function{Memory: "256Mi", CPU: 0.5}) {
		t.Errorf("functions %+v", d.Functions)
	}
	if d.SweepTicksPerHour != 30 || d.TraceSampling != 0.1 || d.RetentionDays != 30 || d.TopicRetentionDays != 1 || d.SchedulerJobs != 1 {
		t.Errorf("defaults %+v", d)
	}

	repo, err := ReadDefaults("../../terraform")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api", "callbacks", "sweeper"} {
		f := repo.Functions[name]
		if _, err := f.MemoryGiB(); err != nil || f.CPU <= 0 || f.Concurrency < 1 {
			t.Errorf("terraform/: function %s sized %+v: %v", name, f, err)
		}
	}
	if repo.SweepTicksPerHour <= 0 || repo.TopicRetentionDays <= 0 || repo.TraceSampling <= 0 || repo.TraceSampling > 1 {
		t.Errorf("terraform/: defaults %+v", repo)
	}
	if !repo.NoOKRequestLogs["callbacks"] || len(repo.NoOKRequestLogs) != 1 {
		t.Errorf("terraform/: request logs excluded for %v, want callbacks (exclude_ok_request_logs)", repo.NoOKRequestLogs)
	}
	if !repo.NoOKSubmitRequestLogs["api"] || len(repo.NoOKSubmitRequestLogs) != 1 {
		t.Errorf("terraform/: submits' request logs excluded for %v, want api (exclude_ok_request_logs)", repo.NoOKSubmitRequestLogs)
	}
}

// TestReadRequestLogExclusions reads hand-made logging exclusions: one of
// every successful request excludes a function's request logs, one
// narrowed to the submits (POST, a URL pattern matching /v1/tasks and
// /v1/tasks:batch) only the submits', and one narrowed any other way, or
// off by default, none.
func TestReadRequestLogExclusions(t *testing.T) {
	vars, err := os.ReadFile("../../terraform/variables.tf")
	if err != nil {
		t.Fatal(err)
	}
	vars = append(vars, []byte(`
variable "off_by_default" {
  type    = bool
  default = false
}
`)...)
	exclusion := func(name, gate, fn string, terms ...string) string {
		f := []string{`"resource.type=\"cloud_run_revision\""`,
			`"resource.labels.service_name=\"${module.function["` + fn + `"].service_name}\""`,
			`"logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\""`, `"httpRequest.status<400"`}
		for _, term := range terms {
			f = append(f, strconv.Quote(term))
		}
		return fmt.Sprintf("resource \"google_logging_project_exclusion\" %q {\n  count = var.%s ? 1 : 0\n  filter = join(\" AND \", [\n    %s,\n  ])\n}\n",
			name, gate, strings.Join(f, ",\n    "))
	}
	const submits = `httpRequest.requestUrl=~"^(https?://[^/?#]+)?/v1/tasks(:batch)?([?].*)?$"`
	for _, c := range []struct {
		name              string
		main              string
		whole, submitOnly []string
	}{
		{"every successful request", exclusion("ok", "exclude_ok_request_logs", "callbacks"), []string{"callbacks"}, nil},
		{"the submits", exclusion("ok", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="POST"`, submits), nil, []string{"api"}},
		{"the submits, any method", exclusion("ok", "exclude_ok_request_logs", "api", submits), nil, []string{"api"}},
		{"both", exclusion("a", "exclude_ok_request_logs", "callbacks") + exclusion("b", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="POST"`, submits),
			[]string{"callbacks"}, []string{"api"}},
		{"reads only", exclusion("ok", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="GET"`), nil, nil},
		{"GET on the submit URLs", exclusion("ok", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="GET"`, submits), nil, nil},
		{"another path", exclusion("ok", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="POST"`, `httpRequest.requestUrl=~"/v1/runs/[^/]+/cancel$"`), nil, nil},
		{"batch only", exclusion("ok", "exclude_ok_request_logs", "api", `httpRequest.requestMethod="POST"`, `httpRequest.requestUrl=~"/v1/tasks:batch$"`), nil, nil},
		{"off by default", exclusion("ok", "off_by_default", "api", `httpRequest.requestMethod="POST"`, submits), nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "variables.tf"), vars, 0o644); err != nil {
				t.Fatal(err)
			}
			main := `resource "google_cloud_scheduler_job" "sweep" {}` + "\n\n" + c.main
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := ReadDefaults(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedKeys(d.NoOKRequestLogs); !slices.Equal(got, c.whole) {
				t.Errorf("request logs excluded for %v, want %v\n%s", got, c.whole, main)
			}
			if got := sortedKeys(d.NoOKSubmitRequestLogs); !slices.Equal(got, c.submitOnly) {
				t.Errorf("submits' request logs excluded for %v, want %v\n%s", got, c.submitOnly, main)
			}
		})
	}
}

// TestExcludedRequestLogs: a function whose successful request logs are
// excluded adds none to the logging bill; one whose submits' are excluded
// adds those of its other requests; the others still add all of theirs.
func TestExcludedRequestLogs(t *testing.T) {
	const perLog = 1e6 * 1000 / float64(1<<30) * 0.50 // one request log per lifecycle
	// A lifecycle: a submit and a cancel to the api, 3 callbacks.
	traffic := Traffic{Invocations: map[string]int64{"callbacks": 3, "api": 2}, SubmitRequests: 1}
	for _, c := range []struct {
		name            string
		whole, submits  map[string]bool
		traffic         Traffic
		wantRequestLogs float64
	}{
		{"none excluded", nil, nil, traffic, 5},
		{"callbacks", map[string]bool{"callbacks": true}, nil, traffic, 2},
		{"the api's submits", nil, map[string]bool{"api": true}, traffic, 4},
		{"callbacks and the api's submits", map[string]bool{"callbacks": true}, map[string]bool{"api": true}, traffic, 1},
		{"only submits to the api", map[string]bool{"callbacks": true}, map[string]bool{"api": true},
			Traffic{Invocations: map[string]int64{"callbacks": 3, "api": 1}, SubmitRequests: 1}, 0},
		{"no submit recorded", map[string]bool{"callbacks": true}, map[string]bool{"api": true},
			Traffic{Invocations: map[string]int64{"callbacks": 3, "api": 2}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := testDefaults()
			d.NoOKRequestLogs, d.NoOKSubmitRequestLogs = c.whole, c.submits
			ls, err := Bill(c.traffic, ListPrices, d, DefaultAssumptions)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range ls {
				if l.Item == "Cloud Logging (Servo's lines + Cloud Run request logs)" {
					found = true
					if !near(l.USD, c.wantRequestLogs*perLog) {
						t.Errorf("logging $%g, want $%g (%g request logs)", l.USD, c.wantRequestLogs*perLog, c.wantRequestLogs)
					}
				}
			}
			if !found {
				t.Error("no logging line")
			}
		})
	}
}

// repoReport computes the report of the committed recording, prices and
// Terraform defaults.
func repoReport(t *testing.T) (Recording, Defaults, Report) {
	t.Helper()
	rec, err := ReadRecording("testdata/traffic.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ReadDefaults("../../terraform")
	if err != nil {
		t.Fatal(err)
	}
	// As the program prices it: at the declared rate.
	a := DefaultAssumptions
	if d.DeclaredRate > 0 {
		a.LifecyclesPerSecond = d.DeclaredRate
	}
	r, err := Compute(rec, ListPrices, d, a)
	if err != nil {
		t.Fatal(err)
	}
	return rec, d, r
}

// TestDocIsGenerated fails when docs/cost.md differs from what the
// program generates from the committed recording, prices and Terraform
// defaults (regenerate: go run ./bench/cost -write docs/cost.md).
func TestDocIsGenerated(t *testing.T) {
	_, _, r := repoReport(t)
	doc, err := os.ReadFile("../../docs/cost.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != r.Markdown() {
		t.Error("docs/cost.md is not what the cost program generates: run go run ./bench/cost -write docs/cost.md")
	}
}

// TestFireWithoutSubmit: a fire's lifecycle has no api request, so no api
// line and no request log of a submit; a shape without a fire has no
// sweeper line.
func TestFireWithoutSubmit(t *testing.T) {
	fire := Traffic{Fires: 1, SweeperMs: 10, Invocations: map[string]int64{"callbacks": 3}}
	ls, err := Bill(fire, ListPrices, testDefaults(), DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if strings.Contains(l.Item, ": api") {
			t.Errorf("a fire priced %s", l.Item)
		}
	}
	submitted, err := Bill(Traffic{SubmitRequests: 1, Invocations: map[string]int64{"api": 1, "callbacks": 3}}, ListPrices, testDefaults(), DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range submitted {
		if strings.HasPrefix(l.Item, "Sweeper") {
			t.Errorf("a submit priced %s", l.Item)
		}
	}
	d := testDefaults()
	delete(d.Functions, "sweeper")
	if _, err := Bill(fire, ListPrices, d, DefaultAssumptions); err == nil {
		t.Error("a fire priced without the sweeper's sizing")
	}
}

// TestIdleSchedules prices schedules at rest for a month: their documents
// and index entries kept, and the reads and writes measured per pass
// (none, as recorded), scaled from the schedules measured to those priced.
func TestIdleSchedules(t *testing.T) {
	const (
		gib    = float64(1 << 30)
		passes = 60 * 730.0 // a pass a tick
	)
	for _, c := range []struct {
		name string
		s    IdleSchedule
		n    float64
		idle Idle
		want map[string]float64
	}{
		{"documents", IdleSchedule{DocBytes: 1 << 20, IndexEntries: 10, Schedules: 50}, 1024, Idle{Passes: 1},
			map[string]float64{"Firestore storage: schedule documents": 0.15, "Firestore storage: their index entries": 1024 * 10 * 100 / gib * 0.15}},
		{"nothing per pass", IdleSchedule{DocBytes: 0, Schedules: 50}, 1000, Idle{Passes: 1}, map[string]float64{}},
		// Were a pass to read each schedule: 1 000 reads a pass.
		{"a read per schedule and pass", IdleSchedule{Schedules: 50, PassReads: 50, PassWrites: 5}, 1000, Idle{Passes: 1},
			map[string]float64{"Sweeper Firestore reads (43800 passes)": passes * 1000 * 0.03 / 1e5, "Sweeper Firestore writes": passes * 100 * 0.09 / 1e5}},
		{"four passes a tick", IdleSchedule{Schedules: 1, PassReads: 1}, 1, Idle{Passes: 4},
			map[string]float64{"Sweeper Firestore reads (175200 passes)": 4 * passes * 0.03 / 1e5}},
		{"none measured", IdleSchedule{PassReads: 1}, 1000, Idle{}, map[string]float64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ls := IdleSchedules(c.s, c.n, c.idle, ListPrices, testDefaults(), DefaultAssumptions)
			var sum float64
			for _, l := range ls {
				w := c.want[l.Item]
				if !near(l.USD, w) {
					t.Errorf("%s: $%g, want $%g", l.Item, l.USD, w)
				}
				sum += w
			}
			for item, w := range c.want {
				if !slices.ContainsFunc(ls, func(l Line) bool { return l.Item == item }) {
					t.Errorf("no line %q ($%g)", item, w)
				}
			}
			if !near(Total(ls), sum) {
				t.Errorf("total $%g, want $%g", Total(ls), sum)
			}
		})
	}
}

// TestFireTick prices a tick whose first pass fires beyond an idle tick:
// the request held longer (each rounded up to 100 ms), and an idle pass's
// reads, writes and spans for each further pass.
func TestFireTick(t *testing.T) {
	idle := Idle{InvocationMs: 205, Passes: 1, FirestoreReads: 63, FirestoreWrites: 3, Spans: 71}
	for _, c := range []struct {
		name       string
		fire, idle Idle
		want       map[string]float64
	}{
		{"one more pass", Idle{InvocationMs: 15250, Passes: 2}, idle, map[string]float64{
			"Sweeper CPU (1 vCPU, request held 15.0 s more)": 15 * 0.000024,
			"Sweeper memory (512Mi)":                         15 * 0.5 * 0.0000025,
			"Sweeper Firestore reads (1 more pass)":          63 * 0.03 / 1e5,
			"Sweeper Firestore writes (pass record, pulse)":  3 * 0.09 / 1e5,
			"Cloud Trace (sampling 0.5)":                     71 * 0.5 * 0.20 / 1e6,
		}},
		{"no longer than idle", Idle{InvocationMs: 150, Passes: 1}, idle, map[string]float64{
			"Sweeper CPU (1 vCPU, request held 0.0 s more)": 0, "Sweeper Firestore reads (0 more passes)": 0,
		}},
		// An unrecorded idle invocation is billed its minimum, 100 ms.
		{"no idle pass recorded", Idle{InvocationMs: 1000, Passes: 2}, Idle{}, map[string]float64{
			"Sweeper CPU (1 vCPU, request held 0.9 s more)": 0.9 * 0.000024, "Sweeper memory (512Mi)": 0.9 * 0.5 * 0.0000025,
			"Sweeper Firestore reads (2 more passes)": 0,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ls, err := FireTick(c.fire, c.idle, ListPrices, testDefaults(), DefaultAssumptions)
			if err != nil {
				t.Fatal(err)
			}
			var sum float64
			for _, w := range c.want {
				sum += w
			}
			for item, w := range c.want {
				i := slices.IndexFunc(ls, func(l Line) bool { return l.Item == item })
				if i < 0 {
					t.Errorf("no line %q in %v", item, ls)
				} else if !near(ls[i].USD, w) {
					t.Errorf("%s: $%g, want $%g", item, ls[i].USD, w)
				}
			}
			if !near(Total(ls), sum) {
				t.Errorf("total $%g, want $%g: %v", Total(ls), sum, ls)
			}
		})
	}
	d := testDefaults()
	delete(d.Functions, "sweeper")
	if _, err := FireTick(Idle{}, idle, ListPrices, d, DefaultAssumptions); err == nil {
		t.Error("priced without the sweeper's sizing")
	}
}

// TestSmall spells small amounts plainly, to two significant digits.
func TestSmall(t *testing.T) {
	for _, c := range []struct {
		usd  float64
		want string
	}{
		{0, "0"}, {0.0000094, "0.0000094"}, {0.00015, "0.00015"}, {0.000752, "0.00075"}, {0.1465, "0.15"}, {3.4, "3.40"}, {6.671, "6.67"},
	} {
		if got := small(c.usd); got != c.want {
			t.Errorf("small(%g) = %q, want %q", c.usd, got, c.want)
		}
	}
}

// TestLineItems: the per-million table lists each item once, an item only
// later shapes have after that shape's previous item.
func TestLineItems(t *testing.T) {
	bill := func(items ...string) []Line {
		var ls []Line
		for _, it := range items {
			ls = append(ls, Line{Item: it})
		}
		return ls
	}
	shapes := []Traffic{{Shape: "submit"}, {Shape: "fire"}, {Shape: "other"}}
	bills := map[string][]Line{
		"submit": bill("reads", "api", "callbacks", "logging"),
		"fire":   bill("reads", "callbacks", "sweeper CPU", "sweeper memory", "logging"),
		"other":  bill("first", "reads", "logging", "last"),
	}
	want := []string{"first", "reads", "api", "callbacks", "sweeper CPU", "sweeper memory", "logging", "last"}
	if got := lineItems(shapes, bills); !slices.Equal(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
}

// TestSchedulesSection: the doc prices schedules when the recording has a
// fire, and says nothing of them otherwise.
func TestSchedulesSection(t *testing.T) {
	rec := Recording{Shapes: []Traffic{
		{Shape: "1 attempt, 1 heartbeat", FirestoreWrites: 6},
		{Shape: "1 attempt, 10 heartbeats", FirestoreWrites: 10},
	}, Idle: Idle{InvocationMs: 200, Passes: 1, FirestoreQueries: 52}}
	r, err := Compute(rec, ListPrices, testDefaults(), DefaultAssumptions)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Markdown(), "## Schedules") {
		t.Error("a recording without a fire has a schedules section")
	}
	rec.Shapes = append(rec.Shapes, Traffic{Shape: "a fire", Fires: 1, FirestoreWrites: 4})
	rec.IdleSchedule = IdleSchedule{DocBytes: 1 << 20, Schedules: 50}
	rec.FireTick = Idle{InvocationMs: 15200, Passes: 2}
	if r, err = Compute(rec, ListPrices, testDefaults(), DefaultAssumptions); err != nil {
		t.Fatal(err)
	}
	md := r.Markdown()
	for _, want := range []string{
		"## Schedules",
		"**$3.60 per million fires**, against $5.40 for the same lifecycle submitted",
		"| a tick with fires, beyond an idle tick | quantity | unit price | USD |",
		"An idle schedule costs nothing per sweep pass beyond the duty's fixed due queries shared by all schedules",
		"**$0.15 a month per thousand schedules**",
		"held its request 15.2 s in 2 passes, against 0.2 s in 1",
	} {
		if !strings.Contains(strings.ReplaceAll(md, "\n", " "), want) {
			t.Errorf("the doc has no %q", want)
		}
	}
}
