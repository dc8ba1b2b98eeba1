package deploy

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// validationFuncs are the Terraform functions the variables' validations
// use, with Terraform's semantics for these arguments.
var validationFuncs = map[string]function.Function{
	"can":   tryfunc.CanFunc,
	"try":   tryfunc.TryFunc,
	"regex": stdlib.RegexFunc,
	"alltrue": function.New(&function.Spec{
		Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			for it := args[0].ElementIterator(); it.Next(); {
				if _, v := it.Element(); v.IsNull() || v.False() {
					return cty.False, nil
				}
			}
			return cty.True, nil
		},
	}),
	"regexall": stdlib.RegexAllFunc,
	"keys":     stdlib.KeysFunc,
	"values":   stdlib.ValuesFunc,
	// Terraform's length also takes a string.
	"length": function.New(&function.Spec{
		Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
		Type:   function.StaticReturnType(cty.Number),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if args[0].Type() == cty.String {
				return stdlib.Strlen(args[0])
			}
			return stdlib.Length(args[0])
		},
	}),
	"trimsuffix": stdlib.TrimSuffixFunc,
	"join":       stdlib.JoinFunc,
	"coalesce":   stdlib.CoalesceFunc,
	"sum": function.New(&function.Spec{
		Params: []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
		Type:   function.StaticReturnType(cty.Number),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if args[0].LengthInt() == 0 {
				return cty.NilVal, fmt.Errorf("sum of an empty list")
			}
			total := cty.Zero
			for it := args[0].ElementIterator(); it.Next(); {
				_, v := it.Element()
				n, err := convert.Convert(v, cty.Number)
				if err != nil {
					return cty.NilVal, err
				}
				total = total.Add(n)
			}
			return total, nil
		},
	}),
	"ceil":     stdlib.CeilFunc,
	"floor":    stdlib.FloorFunc,
	"max":      stdlib.MaxFunc,
	"range":    stdlib.RangeFunc,
	"contains": stdlib.ContainsFunc,
	"flatten":  stdlib.FlattenFunc,
	"tonumber": function.New(&function.Spec{
		Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
		Type:   function.StaticReturnType(cty.Number),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return convert.Convert(args[0], cty.Number)
		},
	}),
}

// variableValue returns the root module's variable block name and the
// value given in HCL (as in a tfvars file) converted to the variable's
// type, with the type's optional defaults applied; a value of the wrong
// type is an error.
func variableValue(t *testing.T, name, value string) (*hclsyntax.Block, cty.Value, error) {
	t.Helper()
	file := filepath.Join(repoRoot(t), "terraform", "variables.tf")
	f, diags := hclparse.NewParser().ParseHCLFile(file)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "variable" || b.Labels[0] != name {
			continue
		}
		typ, defaults, diags := typeexpr.TypeConstraintWithDefaults(b.Body.Attributes["type"].Expr)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		expr, diags := hclsyntax.ParseExpression([]byte(value), "value.tfvars", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", value, diags.Error())
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		if defaults != nil {
			v = defaults.Apply(v)
		}
		v, err := convert.Convert(v, typ)
		if err != nil {
			return b, cty.NilVal, err
		}
		if defaults != nil {
			v = defaults.Apply(v)
		}
		return b, v, nil
	}
	t.Fatalf("%s: no variable %q", file, name)
	return nil, cty.NilVal, nil
}

// variableValidations evaluates every validation of the root module's
// variable name for the value given in HCL (as in a tfvars file), with
// the type's optional defaults applied, and returns the error messages
// of the failing ones.
func variableValidations(t *testing.T, name, value string) []string {
	t.Helper()
	b, v, err := variableValue(t, name, value)
	if err != nil {
		return []string{"type: " + err.Error()}
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{name: v})},
		Functions: validationFuncs,
	}
	var failed []string
	for _, vb := range b.Body.Blocks {
		if vb.Type != "validation" {
			continue
		}
		ok, diags := vb.Body.Attributes["condition"].Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("variable %s: evaluate a validation: %s", name, diags.Error())
		}
		if ok.IsNull() || ok.False() {
			msg, _ := vb.Body.Attributes["error_message"].Expr.Value(ctx)
			failed = append(failed, msg.AsString())
		}
	}
	return failed
}

// The functions' sizing variable: its defaults pass its validations, and
// each kind of bad value is refused.
func TestTerraformFunctionSizingValidation(t *testing.T) {
	tests := []struct {
		name  string
		value string
		ok    bool
	}{
		{"defaults", `{}`, true},
		{"a custom callbacks size", `{callbacks = {memory = "1Gi", cpu = "2", concurrency = 200, min_instances = 2, max_instances = 100}}`, true},
		{"fractional cpu, concurrency 1", `{api = {cpu = "0.5", concurrency = 1}}`, true},
		{"memory without a unit", `{api = {memory = "512"}}`, false},
		{"cpu not a number", `{api = {cpu = "lots"}}`, false},
		{"concurrency above 1 on a fraction of a cpu", `{callbacks = {cpu = "0.5", concurrency = 10}}`, false},
		{"concurrency above 1 on 500m", `{callbacks = {cpu = "500m", concurrency = 10}}`, false},
		{"concurrency 0", `{callbacks = {concurrency = 0}}`, false},
		{"concurrency above 1000", `{callbacks = {concurrency = 1001}}`, false},
		{"min above max", `{callbacks = {min_instances = 5, max_instances = 2}}`, false},
		{"no instance", `{api = {max_instances = 0}}`, false},
		{"timeout 0", `{api = {timeout_seconds = 0}}`, false},
		{"sweeper timeout below its window", `{sweeper = {timeout_seconds = 30}}`, false},
		{"sweeper timeout above 540", `{sweeper = {timeout_seconds = 600}}`, false},
		{"sweeper concurrency above 1", `{sweeper = {concurrency = 4}}`, false},
		{"512Mi on a third of a cpu", `{sweeper = {memory = "512Mi", cpu = "0.333"}}`, true},
		{"1Gi on a third of a cpu", `{sweeper = {memory = "1Gi", cpu = "0.333"}}`, false},
		{"1Gi on half a cpu", `{sweeper = {memory = "1Gi", cpu = "500m"}}`, true},
		{"2Gi on half a cpu", `{api = {memory = "2Gi", cpu = "0.5", concurrency = 1}}`, false},
		{"2Gi on one cpu", `{api = {memory = "2Gi"}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			failed := variableValidations(t, "functions", tc.value)
			if (len(failed) == 0) != tc.ok {
				t.Fatalf("functions = %s: failed validations %q; want ok=%v", tc.value, failed, tc.ok)
			}
		})
	}
}
