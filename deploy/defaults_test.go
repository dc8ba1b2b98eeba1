package deploy

import (
	"strings"
	"testing"
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
