package cost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocationClassPrices: a location's class picks its Firestore prices,
// and a multi-region's reads, writes and deletes cost twice a region's
// (the pricing page's $0.06, $0.18, $0.02 against $0.03, $0.09, $0.01 per
// 100 000).
func TestLocationClassPrices(t *testing.T) {
	for _, c := range []struct {
		loc  string
		want LocationClass
		read float64
	}{
		{"us-central1", Regional, 0.03 / 1e5},
		{"europe-west1", Regional, 0.03 / 1e5},
		{"nam5", MultiRegion, 0.06 / 1e5},
		{"eur3", MultiRegion, 0.06 / 1e5},
	} {
		got, err := Class(c.loc)
		if err != nil || got != c.want {
			t.Errorf("Class(%q) = %q, %v, want %q", c.loc, got, err, c.want)
			continue
		}
		if p := ListPrices.At(got); !near(p.FirestoreRead.USD, c.read) {
			t.Errorf("%s: read $%g, want $%g", c.loc, p.FirestoreRead.USD, c.read)
		}
	}
	for _, bad := range []string{"", "mars", "EUR3"} {
		if _, err := Class(bad); err == nil {
			t.Errorf("Class(%q) accepted", bad)
		}
	}
	r, m := ListPrices.At(Regional), ListPrices.At(MultiRegion)
	for _, c := range []struct {
		name   string
		r, m   Price
		factor float64
	}{
		{"read", r.FirestoreRead, m.FirestoreRead, 2},
		{"write", r.FirestoreWrite, m.FirestoreWrite, 2},
		{"delete", r.FirestoreDelete, m.FirestoreDelete, 2},
		{"storage", r.FirestoreStorage, m.FirestoreStorage, 0.18 / 0.15},
	} {
		if !near(c.m.USD, c.factor*c.r.USD) {
			t.Errorf("%s: multi-region $%g, regional $%g: want a factor %g", c.name, c.m.USD, c.r.USD, c.factor)
		}
	}
}

// writeModule writes a root module whose firestore_location has no
// default, and an alerts module of 2 + 3×1 conditions.
func writeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"variables.tf": `variable "topic_message_retention" {
  default = "86400s"
}

variable "sweep_schedule" {
  default = "* * * * *"
}

variable "firestore_location" {
  type = string
}

variable "firestore_database" {
  type    = string
  default = "(default)"
}

variable "functions" {
  type = object({
    api = optional(object({
      memory = optional(string, "512Mi")
      cpu    = optional(string, "1")
    }), {})
    callbacks = optional(object({
      memory = optional(string, "256Mi")
      cpu    = optional(string, "1")
    }), {})
    sweeper = optional(object({
      memory = optional(string, "256Mi")
      cpu    = optional(string, "1")
    }), {})
  })
  default = {}
}
`,
		"alerts.tf": `variable "alerts_enabled" {
  type    = bool
  default = true
}
`,
		"main.tf": `resource "google_cloud_scheduler_job" "sweep" {}` + "\n",
		"modules/alerts/main.tf": `locals {
  functions = ["api", "callbacks", "sweeper"]
}

resource "google_monitoring_alert_policy" "two" {
  conditions {
    display_name = "a"
  }

  conditions {
    display_name = "b"
  }
}

resource "google_monitoring_alert_policy" "each" {
  for_each = toset(local.functions)

  conditions {
    display_name = "c"
  }
}
`,
		"staging.tfvars": `project_id          = "p"
firestore_location  = "eur3" # a multi-region
firestore_database  = "servo-staging"
alerts_enabled = false
functions = {
  api = { max_instances = 5 }
}
`,
		"dev.tfvars": `firestore_location = "europe-west1"
`,
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestVarFileLocation: the var file's firestore_location, database and
// alerts_enabled are read over the defaults and priced: its location's
// class, the free quota only for (default), the alert policies only when
// enabled; without a location the regional class is priced, said as an
// assumption.
func TestVarFileLocation(t *testing.T) {
	dir := writeModule(t)
	rec := Recording{Shapes: []Traffic{
		{Shape: "1 attempt, 1 heartbeat", FirestoreReads: 1, FirestoreWrites: 1, FirestoreDeletes: 1},
		{Shape: "1 attempt, 10 heartbeats", FirestoreReads: 1, FirestoreWrites: 1},
	}, Idle: Idle{FirestoreReads: 100, FirestoreWrites: 3}}
	for _, c := range []struct {
		name       string
		varFiles   []string
		loc, db    string
		class      LocationClass
		assumed    bool
		alerts     int // conditions priced
		freeQuota  bool
		perMillion float64 // the one-heartbeat shape's bill
	}{
		{"no var file", nil, "", DefaultDatabase, Regional, true, 5, true, 1.3},
		{"staging", []string{"staging.tfvars"}, "eur3", "servo-staging", MultiRegion, false, 0, false, 2.6},
		{"dev", []string{"dev.tfvars"}, "europe-west1", DefaultDatabase, Regional, false, 5, true, 1.3},
		{"dev then staging", []string{"dev.tfvars", "staging.tfvars"}, "eur3", "servo-staging", MultiRegion, false, 0, false, 2.6},
	} {
		t.Run(c.name, func(t *testing.T) {
			var files []string
			for _, f := range c.varFiles {
				files = append(files, filepath.Join(dir, f))
			}
			d, err := ReadDefaults(dir, files...)
			if err != nil {
				t.Fatal(err)
			}
			if d.FirestoreLocation != c.loc || d.FirestoreDatabase != c.db {
				t.Errorf("location %q, database %q, want %q, %q", d.FirestoreLocation, d.FirestoreDatabase, c.loc, c.db)
			}
			r, err := Compute(rec, ListPrices, d, DefaultAssumptions)
			if err != nil {
				t.Fatal(err)
			}
			if r.Class != c.class || r.LocationAssumed != c.assumed {
				t.Errorf("class %q (assumed %v), want %q (%v)", r.Class, r.LocationAssumed, c.class, c.assumed)
			}
			if got := Total(r.Shapes["1 attempt, 1 heartbeat"]); !near(got, c.perMillion) {
				t.Errorf("per million $%g, want $%g (the %s class's prices)", got, c.perMillion, c.class)
			}
			want := 0.0
			if c.alerts > 0 {
				want = float64(c.alerts) * (1.50 + AlertEvaluationsPerMonth*0.35/1e6)
			}
			if got := Total(r.Alerts); !near(got, want) {
				t.Errorf("alerts $%g a month, want $%g (%d conditions)", got, want, c.alerts)
			}
			if (len(r.FreeQuota) > 0) != c.freeQuota {
				t.Errorf("free quota lines %v, want them: %v", r.FreeQuota, c.freeQuota)
			}
			md := r.Markdown()
			if strings.Contains(md, "**Firestore location: not given.**") != c.assumed {
				t.Errorf("the doc says the location is not given: %v, want %v", !c.assumed, c.assumed)
			}
			if c.freeQuota != strings.Contains(md, "Firestore's free quota (50 000 reads") {
				t.Errorf("the doc says the free quota applies: %v, want %v", !c.freeQuota, c.freeQuota)
			}
		})
	}
	if _, err := ReadDefaults(dir, filepath.Join(dir, "nosuch.tfvars")); err == nil {
		t.Error("a missing var file was read")
	}
}

// TestFreeQuota: the free quota takes off the fixed cost what it covers,
// at most a day's quota times the days of a month, and only for the
// (default) database.
func TestFreeQuota(t *testing.T) {
	p := ListPrices.At(Regional)
	const days = HoursPerMonth / 24
	fixed := []Line{
		line("reads", 3e6, p.FirestoreRead),      // above the quota
		line("writes", 1000, p.FirestoreWrite),   // within it
		line("storage", 0.5, p.FirestoreStorage), // within it
	}
	for _, c := range []struct {
		db   string
		want float64
	}{
		{DefaultDatabase, -(50_000*days*0.03/1e5 + 1000*0.09/1e5 + 0.5*0.15)},
		{"servo-staging", 0},
	} {
		d := testDefaults()
		d.FirestoreDatabase = c.db
		if got := Total(FreeQuotaLines(fixed, p, d, FirestoreFreeQuota)); !near(got, c.want) {
			t.Errorf("%s: the free quota takes $%g, want $%g", c.db, got, c.want)
		}
	}
}

// TestCancelDeletesItsCloudTask: a cancel's DeleteTask is a billable
// Cloud Tasks operation ($0.40 per million). Only a cancel of a PENDING or
// QUEUED attempt makes one (task.Result.Dequeue): a RUNNING attempt's
// Cloud Task was delivered and is gone, so the recorded "cancelled while
// running" shape has none (the recorder counts DeleteTask calls).
func TestCancelDeletesItsCloudTask(t *testing.T) {
	for _, c := range []struct {
		deletes int64
		want    float64
	}{{0, 0.80}, {1, 1.20}, {2, 1.60}} {
		ls, err := Bill(Traffic{CloudTasksCreates: []int64{1000}, CloudTasksDeletes: c.deletes}, ListPrices, testDefaults(), DefaultAssumptions)
		if err != nil {
			t.Fatal(err)
		}
		var tasks float64
		for _, l := range ls {
			if strings.HasPrefix(l.Item, "Cloud Tasks") {
				tasks += l.USD
			}
		}
		if !near(tasks, c.want) {
			t.Errorf("%d deletes: Cloud Tasks $%g per million, want $%g", c.deletes, tasks, c.want)
		}
	}
}

// TestAlertsPricedWhenEnabled: the alert policies are priced, per
// condition and time series, only when alerts_enabled.
func TestAlertsPricedWhenEnabled(t *testing.T) {
	for _, c := range []struct {
		enabled    bool
		conditions int
		want       float64
	}{
		{false, 10, 0},
		{true, 10, 10*1.50 + 10*AlertEvaluationsPerMonth*0.35/1e6},
		{true, 1, 1.50 + AlertEvaluationsPerMonth*0.35/1e6},
	} {
		d := testDefaults()
		d.AlertsEnabled, d.AlertConditions = c.enabled, c.conditions
		if got := Total(Alerts(ListPrices, d)); !near(got, c.want) {
			t.Errorf("enabled %v, %d conditions: $%g, want $%g", c.enabled, c.conditions, got, c.want)
		}
	}
	repo, err := ReadDefaults("../../terraform")
	if err != nil {
		t.Fatal(err)
	}
	// modules/alerts: sweeper lag 1, sweeper silent 1 (missing data
	// counts as met), outbox 1, dead letters 1, queued age 1, publish
	// failures 1, 5xx ratio 1 (grouped by function).
	if !repo.AlertsEnabled || repo.AlertConditions != 7 {
		t.Errorf("terraform/: alerts enabled %v, %d conditions, want true, 7", repo.AlertsEnabled, repo.AlertConditions)
	}
}
