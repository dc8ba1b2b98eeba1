package deploy

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/servo-dev/servo/internal/enqueue"
)

// Durations are bounded, not only shaped like Go durations.
func TestTerraformDurationBounds(t *testing.T) {
	tests := []struct {
		variable, value string
		ok              bool
	}{
		{"sweep_every", `"15s"`, true},
		{"sweep_every", `"1s"`, true},
		{"sweep_every", `"55s"`, true},
		{"sweep_every", `"500ms"`, false},
		{"sweep_every", `"0s"`, false},
		{"sweep_every", `"1m"`, false},
		{"sweep_every", `"30m"`, false},
		{"sweep_every", `"15"`, false},
		{"start_timeout", `"10m"`, true},
		{"start_timeout", `"1m30s"`, true},
		{"start_timeout", `"24h"`, true},
		{"start_timeout", `"30s"`, false},
		{"start_timeout", `"25h"`, false},
		{"start_timeout", `"1h1s0h"`, true},
		{"start_timeout", `"ten minutes"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.variable+"="+tc.value, func(t *testing.T) {
			failed := variableValidations(t, tc.variable, tc.value)
			if (len(failed) == 0) != tc.ok {
				t.Fatalf("%s = %s: failed validations %q; want ok=%v", tc.variable, tc.value, failed, tc.ok)
			}
		})
	}
}

// A queue may not dispatch more at once than its worker's instances can
// take (max_instances x concurrency); by default it dispatches exactly that.
func TestTerraformWorkerCapacity(t *testing.T) {
	const img = `image = "i"`
	tests := []struct {
		name, workers string
		ok            bool
	}{
		{"defaults", `{ww = {` + img + `}}`, true},
		{"equal", `{ww = {` + img + `, max_instances = 5, concurrency = 4, queue = {max_concurrent_dispatches = 20}}}`, true},
		{"below", `{ww = {` + img + `, max_instances = 5, queue = {max_concurrent_dispatches = 3}}}`, true},
		{"above", `{ww = {` + img + `, max_instances = 10, concurrency = 1, queue = {max_concurrent_dispatches = 100}}}`, false},
		{"one of two above", `{aa = {` + img + `}, bb = {` + img + `, max_instances = 2, queue = {max_concurrent_dispatches = 3}}}`, false},
		// Above 500 dispatches/s a worker has several queues, and the
		// capacity holds for the worker over all of them.
		{"1500/s over three queues", `{ww = {` + img + `, max_instances = 30, concurrency = 10, queue = {max_dispatches_per_second = 1500}}}`, true},
		{"1500/s, total above capacity", `{ww = {` + img + `, max_instances = 30, concurrency = 10, queue = {max_dispatches_per_second = 1500, max_concurrent_dispatches = 301}}}`, false},
		{"1500/s, fewer dispatches at once than queues", `{ww = {` + img + `, max_instances = 2, queue = {max_dispatches_per_second = 1500}}}`, false},
		{"1500/s, above 5000 per queue", `{ww = {` + img + `, max_instances = 1000, concurrency = 20, queue = {max_dispatches_per_second = 1500, max_concurrent_dispatches = 15001}}}`, false},
		{"1500/s, 5000 per queue", `{ww = {` + img + `, max_instances = 1000, concurrency = 20, queue = {max_dispatches_per_second = 1500, max_concurrent_dispatches = 15000}}}`, true},
		{"50 000/s", `{ww = {` + img + `, max_instances = 100, queue = {max_dispatches_per_second = 50000}}}`, true},
		{"above 50 000/s", `{ww = {` + img + `, max_instances = 1000, queue = {max_dispatches_per_second = 50001}}}`, false},
		{"a worker named like another's extra queue", `{ww = {` + img + `, queue = {max_dispatches_per_second = 1500}}, ww-q2 = {` + img + `}}`, false},
		{"the same name beside a single-queue worker", `{ww = {` + img + `, queue = {max_dispatches_per_second = 500}}, ww-q2 = {` + img + `}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			failed := variableValidations(t, "workers", tc.workers)
			if ok := len(failed) == 0; ok != tc.ok {
				t.Errorf("workers = %s: valid %v (failed %q), want %v", tc.workers, ok, failed, tc.ok)
			}
		})
	}
	// The default the queue gets when none is set.
	for _, m := range loadTerraform(t).blocks("terraform", "module") {
		if m.addr() != "worker" {
			continue
		}
		if got := m.text(m.block.Body.Attributes["queue"].Expr); !strings.Contains(got,
			"max_concurrent_dispatches = coalesce(each.value.queue.max_concurrent_dispatches, each.value.max_instances * each.value.concurrency)") {
			t.Errorf(`module "worker": queue must default max_concurrent_dispatches to max_instances x concurrency, got %s`, got)
		}
	}
}

// Each worker's entry in SERVO_WORKERS carries the request timeout of the
// endpoint Cloud Tasks calls, which caps the dispatch deadline (package
// enqueue, DispatchDeadline).
func TestTerraformWorkersCarryTimeout(t *testing.T) {
	mods := loadTerraform(t)
	for _, tc := range []struct{ local, want string }{
		{"servo_workers", "timeoutSeconds = var.workers[name].timeout_seconds"},
		{"servo_job_workers", "timeoutSeconds = var.functions.jobs.timeout_seconds"},
	} {
		b, expr := mods.local(t, "terraform", tc.local)
		if got := b.text(expr); !strings.Contains(got, tc.want) {
			t.Errorf("local.%s: want %s, got %s", tc.local, tc.want, got)
		}
	}
}

// The key ring Terraform writes: its history in "meta", the guard against
// dropping a key too early, and no version at all when the ring is managed
// outside Terraform.
func TestTerraformSigningKeys(t *testing.T) {
	mods := loadTerraform(t)
	const dir = "terraform/modules/signing_keys"
	res := map[string]tfBlock{}
	for _, b := range mods.blocks(dir, "resource") {
		res[b.addr()] = b
	}
	v, ok := res["google_secret_manager_secret_version.keys"]
	if !ok {
		t.Fatal("no google_secret_manager_secret_version.keys")
	}
	if got := v.text(v.block.Body.Attributes["count"].Expr); got != "var.managed_externally ? 0 : 1" {
		t.Errorf("%s: count must be var.managed_externally ? 0 : 1 (no version for an external ring), got %s", v.where(), got)
	}
	data := v.text(v.block.Body.Attributes["secret_data"].Expr)
	for _, want := range []string{"active = var.active", "keys =", "meta =", "createdAt =", "activatedAt =", "deactivatedAt ="} {
		if !strings.Contains(data, want) {
			t.Errorf("%s: secret_data lacks %q (auth.Ring with meta)", v.where(), want)
		}
	}
	var preconditions []string
	for _, lc := range v.block.Body.Blocks {
		if lc.Type != "lifecycle" {
			continue
		}
		for _, p := range lc.Body.Blocks {
			if p.Type == "precondition" {
				preconditions = append(preconditions, v.text(p.Body.Attributes["condition"].Expr))
			}
		}
	}
	if !containsAll(preconditions, "local.dropped", "local.within_min_grace") || !containsAll(preconditions, "local.dropped_with_activation") {
		t.Errorf("%s: want preconditions refusing to drop keys within the token lifetime, have %q", v.where(), preconditions)
	}
	a, ok := res["terraform_data.activation"]
	if !ok {
		t.Fatal("no terraform_data.activation (when the active kid became active)")
	}
	if got := a.text(a.block.Body.Attributes["triggers_replace"].Expr); got != "[var.active]" {
		t.Errorf("%s: triggers_replace must be [var.active], got %s", a.where(), got)
	}
	for _, name := range []string{"terraform_data.activation", "terraform_data.created"} {
		b := res[name]
		if b.block == nil || !strings.Contains(string(b.file.src[b.block.Range().Start.Byte:b.block.Range().End.Byte]), "ignore_changes = [input]") {
			t.Errorf("%s: the recorded time must be kept (lifecycle ignore_changes = [input])", name)
		}
	}
	_, min := mods.local(t, dir, "min_grace")
	if v, err := literal(min); err != nil || v.AsString() != "2h" {
		t.Errorf("local.min_grace must be \"2h\", the longest token lifetime (auth.MaxTaskTokenTTL)")
	}
}

// containsAll reports whether one of texts contains every want.
func containsAll(texts []string, want ...string) bool {
	for _, s := range texts {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(s, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// A worker's queues in Terraform are the ones Servo derives from
// SERVO_WORKERS (enqueue.QueueName): the first keeps the single-queue
// name, the others add -q1, -q2, ...; each gets its share of the worker's
// rate and concurrency; SERVO_WORKERS carries the declared rate.
func TestTerraformWorkerQueues(t *testing.T) {
	mods := loadTerraform(t)
	res := map[string]tfBlock{}
	for _, b := range mods.blocks("terraform/modules/worker", "resource") {
		res[b.addr()] = b
	}
	for _, c := range []struct{ addr, name, count string }{
		{"google_cloud_tasks_queue.worker", `"${var.name_prefix}-${var.name}"`, ""},
		{"google_cloud_tasks_queue.sibling", `"${var.name_prefix}-${var.name}-q${count.index + 1}"`, "local.queue_count - 1"},
	} {
		b, ok := res[c.addr]
		if !ok {
			t.Fatalf("modules/worker: no %s", c.addr)
		}
		if got := b.text(b.block.Body.Attributes["name"].Expr); got != c.name {
			t.Errorf("%s: name %s, want %s", b.where(), got, c.name)
		}
		if a, ok := b.block.Body.Attributes["count"]; c.count != "" && (!ok || b.text(a.Expr) != c.count) {
			t.Errorf("%s: count must be %s", b.where(), c.count)
		}
		for _, rl := range b.block.Body.Blocks {
			if rl.Type != "rate_limits" {
				continue
			}
			for attr, want := range map[string]string{
				"max_dispatches_per_second": "local.queue_rate_limits.max_dispatches_per_second",
				"max_concurrent_dispatches": "local.queue_rate_limits.max_concurrent_dispatches",
			} {
				if got := b.text(rl.Body.Attributes[attr].Expr); got != want {
					t.Errorf("%s: rate_limits.%s = %s, want %s", b.where(), attr, got, want)
				}
			}
		}
	}
	// The module's queue count, evaluated, against Servo's.
	_, expr := mods.local(t, "terraform/modules/worker", "queue_count")
	for _, rate := range []int64{1, 10, 499, 500, 501, 1000, 1500, 1501, 10000, 50000} {
		ctx := &hcl.EvalContext{
			Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{
				"queue": cty.ObjectVal(map[string]cty.Value{"max_dispatches_per_second": cty.NumberIntVal(rate)}),
			})},
			Functions: validationFuncs,
		}
		v, diags := expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("modules/worker local.queue_count: %s", diags.Error())
		}
		if n, _ := v.AsBigFloat().Int64(); n != int64(enqueue.QueueCount(float64(rate))) {
			t.Errorf("rate %d: Terraform makes %d queues, Servo expects %d", rate, n, enqueue.QueueCount(float64(rate)))
		}
	}
	// Servo's names for queue i of base B.
	for i, want := range []string{"B", "B-q1", "B-q2"} {
		if got := enqueue.QueueName("B", i); got != want {
			t.Errorf("enqueue.QueueName(B, %d) = %s, want %s (the module's names)", i, got, want)
		}
	}
	if enqueue.MaxQueueDispatchesPerSecond != 500 {
		t.Errorf("enqueue.MaxQueueDispatchesPerSecond = %d, the module divides by 500", enqueue.MaxQueueDispatchesPerSecond)
	}
	sw, sexpr := mods.local(t, "terraform", "servo_workers")
	if got := sw.text(sexpr); !strings.Contains(got, "maxDispatchesPerSecond = var.workers[name].queue.max_dispatches_per_second") {
		t.Errorf("local.servo_workers must carry maxDispatchesPerSecond = var.workers[name].queue.max_dispatches_per_second, got %s", got)
	}
}
