package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// terraform is a Terraform root module's variables as a deployment sets
// them: the module's declarations (each variable's type, its optional
// attributes' defaults and its default) with the var files' values over
// them, as `terraform apply -var-file` reads them (the last file that
// sets a variable wins).
type terraform struct {
	dir  string
	decl map[string]tfVariable
	set  map[string]tfSetting
	// locals are the module's locals whose values are literals (a
	// constant table), by name.
	locals map[string]cty.Value
}

type tfVariable struct {
	ty       cty.Type
	defaults *typeexpr.Defaults
	def      cty.Value // cty.NilVal: no default
}

type tfSetting struct {
	val   cty.Value
	where string // file:line
}

// readTerraform reads the variable declarations of the root module in dir
// (every *.tf file) and the var files' assignments. A var file is HCL
// (.tfvars): top-level `name = value` assignments of literal values
// (numbers, strings, bools, lists, maps and objects); anything else (a
// reference, a function call, a block) is refused with its file and
// line, and so is a value that does not convert to its variable's type.
func readTerraform(dir string, varFiles []string) (*terraform, error) {
	tf := &terraform{dir: dir, decl: map[string]tfVariable{}, set: map[string]tfSetting{}, locals: map[string]cty.Value{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, fmt.Errorf("terraform: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("terraform: no *.tf file in %s", dir)
	}
	p := hclparse.NewParser()
	schema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "variable", LabelNames: []string{"name"}}, {Type: "locals"}}}
	varSchema := &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "type"}, {Name: "default"}}}
	for _, f := range files {
		file, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			return nil, fmt.Errorf("terraform: %w", diags)
		}
		content, _, diags := file.Body.PartialContent(schema)
		if diags.HasErrors() {
			return nil, fmt.Errorf("terraform: %w", diags)
		}
		for _, b := range content.Blocks {
			if b.Type == "locals" {
				attrs, _ := b.Body.JustAttributes()
				for name, a := range attrs {
					if v, diags := a.Expr.Value(nil); !diags.HasErrors() {
						tf.locals[name] = v
					}
				}
				continue
			}
			attrs, _, diags := b.Body.PartialContent(varSchema)
			if diags.HasErrors() {
				return nil, fmt.Errorf("terraform: variable %s: %w", b.Labels[0], diags)
			}
			v := tfVariable{ty: cty.DynamicPseudoType, def: cty.NilVal}
			if a, ok := attrs.Attributes["type"]; ok {
				if v.ty, v.defaults, diags = typeexpr.TypeConstraintWithDefaults(a.Expr); diags.HasErrors() {
					return nil, fmt.Errorf("terraform: variable %s's type: %w", b.Labels[0], diags)
				}
			}
			if a, ok := attrs.Attributes["default"]; ok {
				if v.def, diags = a.Expr.Value(nil); diags.HasErrors() {
					return nil, fmt.Errorf("terraform: variable %s's default: %w", b.Labels[0], diags)
				}
			}
			tf.decl[b.Labels[0]] = v
		}
	}
	for _, f := range varFiles {
		file, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			return nil, fmt.Errorf("var file: %w", diags)
		}
		attrs, diags := file.Body.JustAttributes()
		if diags.HasErrors() {
			return nil, fmt.Errorf("var file: %w", diags)
		}
		for name, a := range attrs {
			val, diags := a.Expr.Value(nil)
			where := fmt.Sprintf("%s:%d", f, a.Range.Start.Line)
			if diags.HasErrors() {
				return nil, fmt.Errorf("var file %s: %s: not a literal value: %w", where, name, diags)
			}
			tf.set[name] = tfSetting{val: val, where: where}
		}
	}
	return tf, nil
}

// value is variable name's value, converted to its declared type with its
// optional attributes' defaults, and where it came from: a var file's
// line, or "Terraform default" (ok false: the variable has neither).
func (tf *terraform) value(name string) (val cty.Value, where string, ok bool, err error) {
	d, declared := tf.decl[name]
	if !declared {
		return cty.NilVal, "", false, fmt.Errorf("terraform: %s declares no variable %q", tf.dir, name)
	}
	where = "Terraform default"
	val = d.def
	if s, set := tf.set[name]; set {
		val, where = s.val, s.where
	}
	if val == cty.NilVal || val.IsNull() {
		return cty.NilVal, "", false, nil
	}
	if d.defaults != nil {
		val = d.defaults.Apply(val)
	}
	if val, err = convert.Convert(val, d.ty); err != nil {
		return cty.NilVal, "", false, fmt.Errorf("%s: %s: %w", where, name, err)
	}
	return val, where, true, nil
}

// get reads the value at path (a variable, then attribute or map keys)
// into out (gocty: an int, a float64, a string, a bool) and says where it
// came from; ok is false when the variable is unset with no default, or
// an element of path is absent or null.
func (tf *terraform) get(out any, name string, path ...string) (where string, ok bool, err error) {
	val, where, ok, err := tf.value(name)
	if !ok || err != nil {
		return "", false, err
	}
	for _, k := range path {
		switch ty := val.Type(); {
		case ty.IsObjectType() && ty.HasAttribute(k):
			val = val.GetAttr(k)
		case ty.IsMapType() && val.LengthInt() > 0 && val.HasIndex(cty.StringVal(k)).True():
			val = val.Index(cty.StringVal(k))
		default:
			return "", false, nil
		}
		if val.IsNull() {
			return "", false, nil
		}
	}
	if err := gocty.FromCtyValue(val, out); err != nil {
		return "", false, fmt.Errorf("%s: %s%s: %w", where, name, dotted(path), err)
	}
	return where, true, nil
}

// entries returns the keys of map variable name, sorted, and where it
// came from (ok false: unset or empty).
func (tf *terraform) entries(name string) (keys []string, where string, ok bool, err error) {
	val, where, ok, err := tf.value(name)
	if !ok || err != nil || !val.Type().IsMapType() || val.LengthInt() == 0 {
		return nil, "", false, err
	}
	for it := val.ElementIterator(); it.Next(); {
		k, _ := it.Element()
		keys = append(keys, k.AsString())
	}
	slices.Sort(keys)
	return keys, where, true, nil
}

// local reads local name's literal value at key into out.
func (tf *terraform) local(out any, name, key string) error {
	v, ok := tf.locals[name]
	if !ok || !v.Type().IsObjectType() || !v.Type().HasAttribute(key) {
		return fmt.Errorf("terraform: %s: no local %s with %s", tf.dir, name, key)
	}
	if err := gocty.FromCtyValue(v.GetAttr(key), out); err != nil {
		return fmt.Errorf("terraform: local.%s.%s: %w", name, key, err)
	}
	return nil
}

func dotted(path []string) string {
	if len(path) == 0 {
		return ""
	}
	return "." + strings.Join(path, ".")
}

// findTerraform is the Terraform root module of the module the command
// runs in: terraform/ beside the go.mod found from the working directory
// up.
func findTerraform() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("terraform: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			tf := filepath.Join(dir, "terraform")
			if _, err := os.Stat(filepath.Join(tf, "variables.tf")); err != nil {
				return "", fmt.Errorf("terraform: no variables.tf beside %s: %w", filepath.Join(dir, "go.mod"), err)
			}
			return tf, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("terraform: no go.mod in the working directory or above it: name the module with -terraform")
		}
		dir = up
	}
}
