package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/scale"
	"github.com/servo-dev/servo/internal/store"
)

// deployment is what the target takes from the deployment's Terraform
// variables (the root module's defaults, then -var-file's), and where
// each value came from.
type deployment struct {
	decl declared
	// from says where each variable's value came from: a flag given
	// explicitly ("-due-shards"), a var file's line, or "Terraform
	// default"; in the order read.
	from  []string
	files []string
}

// The Terraform variables the target takes, with the flag that wins over
// each.
var modelVariables = []struct {
	flag, variable string
	path           []string
}{
	{"due-shards", "due_shards", nil},
	{"region", "region", nil},
	{"sweep-every", "sweep_every", nil},
	{"api-instances", "functions", []string{"api", "max_instances"}},
	{"quota-shards", "quota_shards", nil},
}

// readDeployment reads the Terraform variables the model takes into tg,
// dueShards and quotaShards, those of a flag given explicitly (explicit)
// left as the flag set them: from the root module in dir ("": the
// module's terraform/, findTerraform) and varFiles over its defaults.
// Without varFiles, a module that cannot be found leaves the flags'
// defaults (store's and scale's constants), and says so.
func readDeployment(dir string, varFiles []string, explicit map[string]bool, tg *scale.Target, dueShards, quotaShards *int) (deployment, error) {
	dep := deployment{files: varFiles}
	if dir == "" {
		var err error
		if dir, err = findTerraform(); err != nil {
			if len(varFiles) > 0 {
				return dep, err
			}
			dep.from = append(dep.from, fmt.Sprintf("the flags' defaults (%v)", err))
			return dep, nil
		}
	}
	tf, err := readTerraform(dir, varFiles)
	if err != nil {
		return dep, err
	}
	for _, v := range modelVariables {
		name := v.variable + dotted(v.path)
		if explicit[v.flag] {
			dep.from = append(dep.from, fmt.Sprintf("%s from -%s", name, v.flag))
			continue
		}
		var where string
		var ok bool
		switch v.flag {
		case "due-shards":
			where, ok, err = tf.get(dueShards, v.variable)
		case "region":
			where, ok, err = tf.get(&tg.Region, v.variable)
		case "sweep-every":
			var s string
			if where, ok, err = tf.get(&s, v.variable); ok && err == nil {
				if tg.SweepEvery, err = time.ParseDuration(s); err != nil {
					err = fmt.Errorf("%s: sweep_every %q: %w", where, s, err)
				}
			}
		case "api-instances":
			where, ok, err = apiInstances(tf, &tg.APIInstances, max(tg.Submits, tg.Completions))
		case "quota-shards":
			where, ok, err = tf.get(quotaShards, v.variable)
		}
		if err != nil {
			return dep, err
		}
		if !ok {
			return dep, fmt.Errorf("terraform: %s has no value (no default, no var file setting it)", name)
		}
		dep.from = append(dep.from, fmt.Sprintf("%s from %s", name, where))
	}
	dep.decl.quotaShards = *quotaShards
	// The hot tenant: tenant_quotas' entry with the highest peak_rate
	// ("*", every other tenant's, is not read).
	names, where, _, err := tf.entries("tenant_quotas")
	if err != nil {
		return dep, err
	}
	for _, n := range names {
		if n == quota.Any {
			continue
		}
		var running, queued, rate float64
		for attr, out := range map[string]*float64{"max_running": &running, "max_queued": &queued, "peak_rate": &rate} {
			if _, _, err := tf.get(out, "tenant_quotas", n, attr); err != nil {
				return dep, err
			}
		}
		if dep.decl.hot == nil || rate > dep.decl.hot.PeakRate {
			dep.decl.hotName = n
			dep.decl.hot = &quota.Limits{MaxRunning: int(running), MaxQueued: int(queued), PeakRate: rate}
		}
	}
	if dep.decl.hot != nil {
		dep.from = append(dep.from, fmt.Sprintf("the hot tenant's quota from tenant_quotas[%q] (%s)", dep.decl.hotName, where))
	}
	// The big worker: workers' entry with the highest
	// queue.max_dispatches_per_second.
	if names, where, _, err = tf.entries("workers"); err != nil {
		return dep, err
	}
	for _, n := range names {
		var rate float64
		if _, got, err := tf.get(&rate, "workers", n, "queue", "max_dispatches_per_second"); err != nil {
			return dep, err
		} else if got && rate > dep.decl.bigDispatches {
			dep.decl.bigDispatches, dep.decl.bigName = rate, n
		}
	}
	if dep.decl.bigName != "" {
		dep.from = append(dep.from, fmt.Sprintf("the big worker's dispatch rate from workers[%q].queue.max_dispatches_per_second (%s)", dep.decl.bigName, where))
	}
	return dep, nil
}

// describe is the report's paragraph on the deployment: the shard counts
// and processes the target runs with, and where each came from.
func (dep deployment) describe(tg scale.Target, dueShards, quotaShards int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Deployment: %d due shards, region %s, a sweep every %s, up to %d API processes, %d counter shards a limited scope without a peak rate", dueShards, tg.Region, tg.SweepEvery, tg.APIInstances, quotaShards)
	hot := dep.decl.tenantLimits(tg, scale.Hot)
	policy := dep.decl.policy()
	switch {
	case dep.decl.hot != nil:
		fmt.Fprintf(&b, "; the hot tenant declares tenant_quotas[%q]'s peak_rate %g tasks/s (%d counter shards; its peak at the target %.0f tasks/s)",
			dep.decl.hotName, hot.PeakRate, policy.ShardsFor(hot), tg.PeakFactor()*tg.TenantRate(scale.Hot))
	default:
		fmt.Fprintf(&b, "; the hot tenant declares its peak, %g tasks/s (%d counter shards)", hot.PeakRate, policy.ShardsFor(hot))
	}
	big := dep.decl.workerRate(tg, scale.Hot)
	need := tg.PeakFactor() * DispatchesPerTask * tg.WorkerRate(scale.Hot)
	if dep.decl.bigName != "" {
		fmt.Fprintf(&b, "; the big worker declares workers[%q]'s %g dispatches/s (%d queues; its peak at the target %.0f)", dep.decl.bigName, big,
			enqueue.QueueCount(big), need)
	} else {
		fmt.Fprintf(&b, "; the big worker declares %.0f dispatches/s (%d queues; its peak at the target %.0f)", big, enqueue.QueueCount(big), need)
	}
	fmt.Fprintf(&b, ". Read: %s", strings.Join(dep.from, "; "))
	if len(dep.files) > 0 {
		fmt.Fprintf(&b, " (var files: %s)", strings.Join(dep.files, ", "))
	}
	b.WriteString(".")
	return b.String()
}

// runs are the recorded run documents (scale.Traffic.Runs): each write of
// the runs collection names its run (runs/{hhhh}_{runId}.{tenantKey},
// store.Run) and holds its tenant, and the driver counted the requests
// that carried that tenant's tasks of that run.
func (d *driver) runs(writes []store.RecordedWrite) (map[string]scale.RunInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]scale.RunInfo{}
	for _, w := range writes {
		if w.Collection != store.RunsCollection || w.Delete {
			continue
		}
		id := w.Doc[strings.LastIndex(w.Doc, "/")+1:]
		_, rest, ok1 := strings.Cut(id, "_")
		run, _, ok2 := strings.Cut(rest, ".")
		n := d.requests[runKey(run, w.TenantID)]
		if !ok1 || !ok2 || n == 0 {
			return nil, fmt.Errorf("run document %s (tenant %q): no recorded request submitted into run %q: the model cannot price it", w.Doc, w.TenantID, run)
		}
		out[w.Doc] = scale.RunInfo{Tenant: w.TenantID, Requests: n}
	}
	return out, nil
}

// apiInstances reads the api's max_instances as Terraform sets it: the
// var file's functions.api.max_instances, else (null, its default) sized
// from expected_lifecycles_per_second as main.tf's function_max_instances
// does: twice the instances the declared rate needs
// (local.instances_per_lifecycle_rate), at least local.max_instances_floor
// and min_instances. A module without those locals (before the sizing)
// has a numeric default. With expected_lifecycles_per_second at its
// Terraform default (1), the target's rate (submits or completions,
// the higher) is taken as declared: a deployment for it declares it.
func apiInstances(tf *terraform, out *int, target float64) (where string, ok bool, err error) {
	if where, ok, err = tf.get(out, "functions", "api", "max_instances"); ok || err != nil {
		return where, ok, err
	}
	var rate, per float64
	var floor, minInstances int
	if err := tf.local(&per, "instances_per_lifecycle_rate", "api"); err != nil {
		return "", false, err
	}
	if err := tf.local(&floor, "max_instances_floor", "api"); err != nil {
		return "", false, err
	}
	if _, _, err := tf.get(&minInstances, "functions", "api", "min_instances"); err != nil {
		return "", false, err
	}
	where, ok, err = tf.get(&rate, "expected_lifecycles_per_second")
	if !ok || err != nil {
		return "", false, err
	}
	if where == "Terraform default" && target > rate {
		// Undeclared: a deployment sized for the target declares its rate.
		rate, where = target, "unset: the target's rate, as a deployment sized for it declares"
	}
	// Terraform computes in decimal: 2 × 10 000 × 0.0061 is 122, not
	// 122.00000000000001.
	*out = max(floor, minInstances, int(math.Ceil(2*rate*per-1e-9)))
	return fmt.Sprintf("expected_lifecycles_per_second %g (%s): max(%d, min_instances %d, ⌈2 × %g × %g⌉), main.tf's function_max_instances", rate, where, floor, minInstances, rate, per), true, nil
}
