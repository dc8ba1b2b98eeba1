package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// repoRoot is the module root: the tests run in deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s has no go.mod: %v", root, err)
	}
	return root
}

// tfFile is one parsed .tf file.
type tfFile struct {
	rel  string // path from the repository root, slash-separated
	src  []byte
	body *hclsyntax.Body
}

// tfBlock is a block and the file it is in.
type tfBlock struct {
	file  *tfFile
	block *hclsyntax.Block
}

// addr is "type.name" for resources and data sources, the first label
// otherwise.
func (b tfBlock) addr() string { return strings.Join(b.block.Labels, ".") }

// where says where the block is, for messages.
func (b tfBlock) where() string {
	return strings.TrimSpace(fmt.Sprintf("%s:%d: %s %s", b.file.rel, b.block.DefRange().Start.Line, b.block.Type, b.addr()))
}

// text is the source text of an expression, with runs of white space
// collapsed, for checks on how an attribute is written.
func (b tfBlock) text(expr hclsyntax.Expression) string {
	r := expr.Range()
	return strings.Join(strings.Fields(string(b.file.src[r.Start.Byte:r.End.Byte])), " ")
}

// tfModules maps a module directory (slash-separated, from the repository
// root: "terraform", "terraform/modules/worker", ...) to its files.
type tfModules map[string][]*tfFile

var (
	loadOnce   sync.Once
	loadedMods tfModules
	loadErr    error
)

// loadTerraform parses every .tf file under terraform/ once per test binary.
func loadTerraform(t *testing.T) tfModules {
	t.Helper()
	root := repoRoot(t)
	loadOnce.Do(func() { loadedMods, loadErr = parseTerraform(root) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loadedMods
}

func parseTerraform(root string) (tfModules, error) {
	parser := hclparse.NewParser()
	mods := tfModules{}
	var diags hcl.Diagnostics
	err := filepath.WalkDir(filepath.Join(root, "terraform"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") { // .terraform, .build
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".tf" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, ds := parser.ParseHCL(src, path)
		diags = append(diags, ds...)
		if ds.HasErrors() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		mods[filepath.ToSlash(filepath.Dir(rel))] = append(mods[filepath.ToSlash(filepath.Dir(rel))],
			&tfFile{rel: rel, src: src, body: f.Body.(*hclsyntax.Body)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("parsing terraform/: %s", diags.Error())
	}
	if len(mods["terraform"]) == 0 {
		return nil, fmt.Errorf("no .tf files in terraform/")
	}
	return mods, nil
}

// dirs returns the module directories, sorted.
func (m tfModules) dirs() []string {
	out := make([]string, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// blocks returns the top-level blocks of type typ in module dir ("" for
// every module).
func (m tfModules) blocks(dir, typ string) []tfBlock {
	var out []tfBlock
	for _, d := range m.dirs() {
		if dir != "" && d != dir {
			continue
		}
		for _, f := range m[d] {
			for _, b := range f.body.Blocks {
				if b.Type == typ {
					out = append(out, tfBlock{f, b})
				}
			}
		}
	}
	return out
}

// resources returns the resource blocks of one resource type, in every
// module.
func (m tfModules) resources(typ string) []tfBlock {
	var out []tfBlock
	for _, b := range m.blocks("", "resource") {
		if b.block.Labels[0] == typ {
			out = append(out, b)
		}
	}
	return out
}

// local returns the expression of a local value of module dir.
func (m tfModules) local(t *testing.T, dir, name string) (tfBlock, hclsyntax.Expression) {
	t.Helper()
	for _, b := range m.blocks(dir, "locals") {
		if a, ok := b.block.Body.Attributes[name]; ok {
			return b, a.Expr
		}
	}
	t.Fatalf("%s: no local.%s", dir, name)
	return tfBlock{}, nil
}

// literal evaluates an expression that must not refer to anything (no
// variables, no functions): literals, templates without interpolations,
// tuples and objects of those.
func literal(expr hclsyntax.Expression) (cty.Value, error) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("not a literal: %s", diags.Error())
	}
	return v, nil
}

// attrLiteral returns a block attribute's literal value; ok is false when the
// attribute is absent.
func attrLiteral(b *hclsyntax.Block, name string) (v cty.Value, ok bool, err error) {
	a, ok := b.Body.Attributes[name]
	if !ok {
		return cty.NilVal, false, nil
	}
	v, err = literal(a.Expr)
	return v, true, err
}

// attrString returns a block attribute that must be a literal string.
func attrString(b *hclsyntax.Block, name string) (string, error) {
	v, ok, err := attrLiteral(b, name)
	switch {
	case !ok:
		return "", fmt.Errorf("no %s", name)
	case err != nil:
		return "", fmt.Errorf("%s: %w", name, err)
	case v.IsNull() || !v.Type().Equals(cty.String):
		return "", fmt.Errorf("%s is not a string", name)
	}
	return v.AsString(), nil
}

// objectItems returns an object constructor's items by literal key.
func objectItems(expr hclsyntax.Expression) (map[string]hclsyntax.Expression, error) {
	obj, ok := expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		return nil, fmt.Errorf("not an object constructor")
	}
	out := map[string]hclsyntax.Expression{}
	for _, item := range obj.Items {
		key := hcl.ExprAsKeyword(item.KeyExpr)
		if key == "" {
			k, err := literal(item.KeyExpr)
			if err != nil || !k.Type().Equals(cty.String) {
				return nil, fmt.Errorf("object key is not a literal")
			}
			key = k.AsString()
		}
		out[key] = item.ValueExpr
	}
	return out, nil
}

// stringsOf converts a literal list, set or tuple of strings.
func stringsOf(v cty.Value) ([]string, error) {
	if v.IsNull() || !(v.Type().IsListType() || v.Type().IsSetType() || v.Type().IsTupleType()) {
		return nil, fmt.Errorf("not a list")
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.Type().Equals(cty.String) || e.IsNull() {
			return nil, fmt.Errorf("list element is not a string")
		}
		out = append(out, e.AsString())
	}
	return out, nil
}

// keysOf returns the sorted keys of a map.
func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diffSets reports what is only in want and only in got.
func diffSets(want, got []string) (missing, extra []string) {
	w, g := map[string]int{}, map[string]int{}
	for _, s := range want {
		w[s]++
	}
	for _, s := range got {
		g[s]++
	}
	for s, n := range w {
		for i := g[s]; i < n; i++ {
			missing = append(missing, s)
		}
	}
	for s, n := range g {
		for i := w[s]; i < n; i++ {
			extra = append(extra, s)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}
