package deploy

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The billing variables refuse what is not a rate or a setting.
func TestTerraformBillingValidation(t *testing.T) {
	tests := []struct {
		name, variable, value string
		ok                    bool
	}{
		{"a rate", "expected_lifecycles_per_second", `10`, true},
		{"a million a month", "expected_lifecycles_per_second", `0.38`, true},
		{"the ceiling", "expected_lifecycles_per_second", `50000`, true},
		{"zero", "expected_lifecycles_per_second", `0`, false},
		{"negative", "expected_lifecycles_per_second", `-1`, false},
		{"above the ceiling", "expected_lifecycles_per_second", `50001`, false},
		{"auto", "functions_billing", `"auto"`, true},
		{"request", "functions_billing", `"request"`, true},
		{"instance", "functions_billing", `"instance"`, true},
		{"a typo", "functions_billing", `"instances"`, false},
		{"empty", "functions_billing", `""`, false},
		{"max_instances sized", "functions", `{callbacks = {min_instances = 60}}`, true},
		{"max_instances overridden", "functions", `{callbacks = {max_instances = 7}}`, true},
		{"max_instances 0", "functions", `{callbacks = {max_instances = 0}}`, false},
		{"max_instances below min", "functions", `{api = {min_instances = 3, max_instances = 2}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			failed := variableValidations(t, tc.variable, tc.value)
			if (len(failed) == 0) != tc.ok {
				t.Fatalf("%s = %s: failed validations %q; want ok=%v", tc.variable, tc.value, failed, tc.ok)
			}
		})
	}
}

// billingLocals evaluates main.tf's billing locals (functions_billing,
// function_max_instances and the constants they read) for the variables
// given in HCL.
func billingLocals(t *testing.T, rate, billing, functions string) (map[string]string, map[string]int) {
	t.Helper()
	_, fns, err := variableValue(t, "functions", functions)
	if err != nil {
		t.Fatal(err)
	}
	_, r, err := variableValue(t, "expected_lifecycles_per_second", rate)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := variableValue(t, "functions_billing", billing)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclparse.NewParser().ParseHCLFile(filepath.Join(repoRoot(t), "terraform", "main.tf"))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	attrs := map[string]*hclsyntax.Attribute{}
	for _, blk := range f.Body.(*hclsyntax.Body).Blocks {
		if blk.Type == "locals" {
			for name, a := range blk.Body.Attributes {
				attrs[name] = a
			}
		}
	}
	locals := map[string]cty.Value{}
	ctx := &hcl.EvalContext{Functions: validationFuncs}
	for _, name := range []string{"billing_break_even", "instances_per_lifecycle_rate", "max_instances_floor", "functions_billing", "function_max_instances"} {
		a, ok := attrs[name]
		if !ok {
			t.Fatalf("terraform/main.tf: no local %s", name)
		}
		ctx.Variables = map[string]cty.Value{
			"var":   cty.ObjectVal(map[string]cty.Value{"functions": fns, "expected_lifecycles_per_second": r, "functions_billing": b}),
			"local": cty.ObjectVal(locals),
		}
		v, diags := a.Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("local.%s: %s", name, diags.Error())
		}
		locals[name] = v
	}
	billings, maxes := map[string]string{}, map[string]int{}
	for k, v := range locals["functions_billing"].AsValueMap() {
		billings[k] = v.AsString()
	}
	for k, v := range locals["function_max_instances"].AsValueMap() {
		n, _ := v.AsBigFloat().Int64()
		maxes[k] = int(n)
	}
	return billings, maxes
}

// functions_billing = "auto" bills each function by instance from its
// break-even (local.billing_break_even: api 9.4, callbacks 3.1 a
// second) on, by request below it; "request" and "instance" win.
func TestTerraformBillingAuto(t *testing.T) {
	tests := []struct {
		rate, billing  string
		api, callbacks string
	}{
		{`1`, `"auto"`, "request", "request"}, // the default: below both
		{`3.09`, `"auto"`, "request", "request"},
		{`3.1`, `"auto"`, "request", "instance"},
		{`9.39`, `"auto"`, "request", "instance"},
		{`9.4`, `"auto"`, "instance", "instance"},
		{`1000`, `"request"`, "request", "request"},
		{`0.01`, `"instance"`, "instance", "instance"},
	}
	for _, tc := range tests {
		got, _ := billingLocals(t, tc.rate, tc.billing, `{}`)
		if got["api"] != tc.api || got["callbacks"] != tc.callbacks || len(got) != 2 {
			t.Errorf("rate %s, %s: %v, want api %s, callbacks %s", tc.rate, tc.billing, got, tc.api, tc.callbacks)
		}
	}
	// The default rate is below both break-evens.
	_, def, err := variableValue(t, "expected_lifecycles_per_second", `1`)
	if err != nil || def.Equals(cty.NumberIntVal(1)).False() {
		t.Fatal(err)
	}
}

// max_instances: twice the instances the declared rate needs
// (local.instances_per_lifecycle_rate: api 0.0061, callbacks 0.05), never
// below 20 and 50 nor min_instances; a number in functions wins.
func TestTerraformMaxInstancesFromRate(t *testing.T) {
	tests := []struct {
		rate, functions string
		api, callbacks  int
	}{
		{`1`, `{}`, 20, 50},
		{`100`, `{}`, 20, 50},      // 1.22 and 10: the floors
		{`1000`, `{}`, 20, 100},    // ceil(12.2) under 20; 100
		{`10000`, `{}`, 122, 1000}, // ceil(122), 1000
		{`1000`, `{callbacks = {max_instances = 7}}`, 20, 7},
		{`1`, `{api = {min_instances = 30}}`, 30, 50},
	}
	for _, tc := range tests {
		_, got := billingLocals(t, tc.rate, `"auto"`, tc.functions)
		if got["api"] != tc.api || got["callbacks"] != tc.callbacks {
			t.Errorf("rate %s, functions %s: %v, want api %d, callbacks %d", tc.rate, tc.functions, got, tc.api, tc.callbacks)
		}
	}
}
