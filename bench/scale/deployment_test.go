package main

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
)

// TestVarFile: the target takes the deployment's Terraform variables
// from -var-file over the root module's defaults (the last file setting
// one winning), a flag given explicitly wins over both, and the report
// names where each came from.
func TestVarFile(t *testing.T) {
	tf, err := readTerraform("../../terraform", nil)
	if err != nil {
		t.Fatal(err)
	}
	var defShards, defQuotaShards int
	var defRegion string
	for out, name := range map[any]string{&defShards: "due_shards", &defRegion: "region", &defQuotaShards: "quota_shards"} {
		if _, ok, err := tf.get(out, name); !ok || err != nil {
			t.Fatalf("Terraform's default %s: %v", name, err)
		}
	}
	var per float64
	if err := tf.local(&per, "instances_per_lifecycle_rate", "api"); err != nil {
		t.Fatal(err)
	}
	type want struct {
		dueShards, apiInstances, quotaShards int
		region                               string
		sweepEvery                           time.Duration
		hot                                  string  // the hot tenant's tenant_quotas entry ("": the target's)
		hotPeak                              float64 // its peak_rate
		big                                  string  // the big worker's workers entry
		bigRate                              float64
		from                                 []string // in the report's "Read:"
	}
	for _, c := range []struct {
		name string
		args []string
		want want
	}{
		// expected_lifecycles_per_second unset: the target's 10 000 a
		// second declared, ⌈2 × 10 000 × 0.0061⌉ = 122 api processes.
		{"the Terraform defaults", nil, want{dueShards: defShards, apiInstances: 122, quotaShards: defQuotaShards, region: defRegion,
			sweepEvery: 15 * time.Second, from: []string{"due_shards from Terraform default", "region from Terraform default", "quota_shards from Terraform default",
				"functions.api.max_instances from expected_lifecycles_per_second 10000 (unset: the target's rate"}}},
		{"a var file", []string{"-var-file", "testdata/target.tfvars"}, want{dueShards: 1024, apiInstances: 50, quotaShards: 16, region: "asia-south1",
			sweepEvery: 10 * time.Second, hot: "acme", hotPeak: 2000, big: "render", bigRate: 2000,
			from: []string{"due_shards from testdata/target.tfvars:3", "region from testdata/target.tfvars:4", "sweep_every from testdata/target.tfvars:5",
				"functions.api.max_instances from testdata/target.tfvars:8", "quota_shards from testdata/target.tfvars:6",
				`the hot tenant's quota from tenant_quotas["acme"] (testdata/target.tfvars:12)`,
				`the big worker's dispatch rate from workers["render"].queue.max_dispatches_per_second (testdata/target.tfvars:18)`}}},
		{"the last file wins", []string{"-var-file", "testdata/target.tfvars", "-var-file", "testdata/override.tfvars"},
			want{dueShards: 2048, apiInstances: 50, quotaShards: 16, region: "asia-south1", sweepEvery: 10 * time.Second, hot: "acme", hotPeak: 2000, big: "render", bigRate: 2000,
				from: []string{"due_shards from testdata/override.tfvars:2", "region from testdata/target.tfvars:4"}}},
		{"a flag wins", []string{"-var-file", "testdata/target.tfvars", "-due-shards", "64", "-region", "us-east1", "-api-instances", "7"},
			want{dueShards: 64, apiInstances: 7, quotaShards: 16, region: "us-east1", sweepEvery: 10 * time.Second, hot: "acme", hotPeak: 2000, big: "render", bigRate: 2000,
				from: []string{"due_shards from -due-shards", "region from -region", "functions.api.max_instances from -api-instances", "sweep_every from testdata/target.tfvars:5"}}},
		// Terraform sizes the api from the declared rate: twice what it
		// needs, at least 20.
		{"the api sized from the declared rate", []string{"-var-file", "testdata/expected.tfvars"},
			want{dueShards: defShards, apiInstances: max(scale.DefaultAPIInstances, int(math.Ceil(2*10000*per-1e-9))), quotaShards: defQuotaShards, region: defRegion, sweepEvery: 15 * time.Second,
				from: []string{"functions.api.max_instances from expected_lifecycles_per_second 10000 (testdata/expected.tfvars:2)"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := parse(c.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			w := c.want
			d := o.dep.decl
			if o.dueShards != w.dueShards || o.tg.APIInstances != w.apiInstances || o.quotaShards != w.quotaShards || d.quotaShards != w.quotaShards ||
				o.tg.Region != w.region || o.tg.SweepEvery != w.sweepEvery || d.hotName != w.hot || d.bigName != w.big || d.bigDispatches != w.bigRate {
				t.Errorf("due shards %d, api %d, quota shards %d/%d, region %s, sweep %s, hot %q, big %q %g; want %+v",
					o.dueShards, o.tg.APIInstances, o.quotaShards, d.quotaShards, o.tg.Region, o.tg.SweepEvery, d.hotName, d.bigName, d.bigDispatches, w)
			}
			if w.hot != "" && (d.hot == nil || d.hot.PeakRate != w.hotPeak) {
				t.Errorf("hot tenant's limits %+v, want peak_rate %g", d.hot, w.hotPeak)
			}
			report := o.dep.describe(o.tg, o.dueShards, o.quotaShards)
			for _, f := range w.from {
				if !strings.Contains(report, f) {
					t.Errorf("the report does not say %q:\n%s", f, report)
				}
			}
		})
	}
}

// TestVarFileRefused: a var file the model cannot read is refused (exit
// 2) with its file and line.
func TestVarFileRefused(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"testdata/bad.tfvars", "testdata/bad.tfvars:2"},
		{"testdata/badtype.tfvars", "testdata/badtype.tfvars:1: due_shards"},
		{"testdata/missing.tfvars", "missing.tfvars"},
	} {
		_, err := parse([]string{"-var-file", c.file}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.file, err, c.want)
		}
	}
}

// TestTerraformDefaults: the Go constants that stand for Terraform's
// defaults are Terraform's: the api's processes (functions.api's
// max_instances, sized from expected_lifecycles_per_second's default)
// and the counter shards (quota_shards).
func TestTerraformDefaults(t *testing.T) {
	tf, err := readTerraform("../../terraform", nil)
	if err != nil {
		t.Fatal(err)
	}
	var api, shards int
	if _, _, err := apiInstances(tf, &api, 0); err != nil || api != scale.DefaultAPIInstances {
		t.Errorf("Terraform's api max_instances %d (%v), scale.DefaultAPIInstances %d", api, err, scale.DefaultAPIInstances)
	}
	if _, _, err := tf.get(&shards, "quota_shards"); err != nil || shards != quota.DefaultShards {
		t.Errorf("Terraform's quota_shards %d (%v), quota.DefaultShards %d", shards, err, quota.DefaultShards)
	}
}

// TestTargetFlags: -run-size and -batch reach the target, and a
// combination the model cannot take is refused.
func TestTargetFlags(t *testing.T) {
	o, err := parse([]string{"-run-size", "1000", "-batch", "20"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.tg.RunSize != 1000 || o.tg.Batch != 20 {
		t.Errorf("run size %d, batch %d; want 1000, 20", o.tg.RunSize, o.tg.Batch)
	}
	if o, _ := parse(nil, io.Discard); o.tg.RunSize != scale.DefaultTarget.RunSize || o.tg.Batch != 1 {
		t.Errorf("defaults: run size %d, batch %d", o.tg.RunSize, o.tg.Batch)
	}
}

// TestLayout: the recorded tenants submit into runs of the run size, in
// requests of the batch, each one tenant's and one run's; the limited
// worker takes only ordinary tenants' tasks.
func TestLayout(t *testing.T) {
	for _, c := range []struct{ runSize, batch int }{{1, 1}, {1_000_000, 1}, {5, 1}, {1_000_000, 4}, {6, 3}, {1_000_000, 500}} {
		tg := scale.DefaultTarget
		tg.RunSize, tg.Batch = c.runSize, c.batch
		p := newPlan(60, 3, tg, declared{})
		l := p.layout(tg.HotShare, time.Now())
		seen, runTasks, biggest := map[int]bool{}, map[string]int{}, 0
		for _, req := range l.requests {
			biggest = max(biggest, len(req))
			for _, i := range req {
				if seen[i] || l.tenant[i] != l.tenant[req[0]] || l.run[i] != l.run[req[0]] {
					t.Errorf("%+v: request %v mixes tenants or runs, or repeats a task", c, req)
				}
				seen[i] = true
				runTasks[l.run[i]+"/"+l.tenant[i]]++
			}
		}
		if len(seen) != 60 || biggest > c.batch || (c.batch > 1 && biggest < 2) {
			t.Errorf("%+v: %d tasks in requests of up to %d", c, len(seen), biggest)
		}
		for k, n := range runTasks {
			if (c.runSize == 1) != strings.HasPrefix(k, "/") || (c.runSize > 1 && n > c.runSize) {
				t.Errorf("%+v: run %s of %d tasks", c, k, n)
			}
		}
		for i, w := range l.worker {
			if w == p.limitedWorker && p.tenants[l.tenant[i]] != scale.Ordinary {
				t.Errorf("%+v: task %d of tenant %s on the limited worker", c, i, l.tenant[i])
			}
		}
	}
}
