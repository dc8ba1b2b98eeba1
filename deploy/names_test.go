package deploy

import (
	"path"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// nameAttrs are the arguments that name a resource in the project (the
// ones two environments in one project would collide on).
var nameAttrs = []string{"name", "account_id", "secret_id", "repository_id", "role_id"}

// fixedNames are the resource names not derived from name_prefix, and why.
// Everything else must be: two environments (two prefixes) in one project
// must not share a resource.
var fixedNames = map[string]string{
	// The database is the operator's choice ("(default)" for the first
	// environment, a named one for the next; README.md).
	"terraform/modules/firestore/main.tf: google_firestore_database.this name": "var.firestore_database",
	// An object inside the environment's own (prefixed) bucket.
	"terraform/main.tf: google_storage_bucket_object.function_source name": "inside a prefixed bucket",
}

// nameResolver decides whether an expression's value is derived from
// var.name_prefix, following locals, for_each (each.key, each.value) and
// module variables to the module calls that set them.
type nameResolver struct {
	mods tfModules
	seen map[string]bool // dir + expression range, against cycles
}

func (r *nameResolver) derived(dir string, b tfBlock, expr hclsyntax.Expression) bool {
	key := dir + " " + expr.Range().String()
	if r.seen[key] {
		return false
	}
	r.seen[key] = true
	defer delete(r.seen, key)
	for _, tr := range expr.Variables() {
		if r.traversalDerived(dir, b, tr) {
			return true
		}
	}
	return false
}

func attrName(tr hcl.Traversal, i int) string {
	if len(tr) <= i {
		return ""
	}
	if a, ok := tr[i].(hcl.TraverseAttr); ok {
		return a.Name
	}
	return ""
}

func (r *nameResolver) traversalDerived(dir string, b tfBlock, tr hcl.Traversal) bool {
	switch root := tr.RootName(); root {
	case "var":
		name := attrName(tr, 1)
		if name == "name_prefix" {
			return true
		}
		if dir == "terraform" {
			return false
		}
		// A child module's variable: every call must pass a derived value.
		calls := 0
		for _, m := range r.mods.blocks("terraform", "module") {
			src, err := attrString(m.block, "source")
			if err != nil || path.Clean("terraform/"+src) != dir {
				continue
			}
			calls++
			a, ok := m.block.Body.Attributes[name]
			if !ok || !r.derived("terraform", m, a.Expr) {
				return false
			}
		}
		return calls > 0
	case "local":
		name := attrName(tr, 1)
		for _, lb := range r.mods.blocks(dir, "locals") {
			if a, ok := lb.block.Body.Attributes[name]; ok {
				return r.derived(dir, lb, a.Expr)
			}
		}
		return false
	case "each":
		if b.block == nil {
			return false
		}
		fe, ok := b.block.Body.Attributes["for_each"]
		return ok && r.derived(dir, b, fe.Expr)
	case "count", "path", "terraform", "self":
		return false
	default:
		// module.X or a managed resource's attribute: a name that resource
		// (checked on its own) carries. Data sources name nothing.
		return root != "data"
	}
}

// TestTerraformNamesFromPrefix: every resource's name argument is derived
// from name_prefix (or listed in fixedNames with the reason), so that two
// environments fit in one project.
func TestTerraformNamesFromPrefix(t *testing.T) {
	mods := loadTerraform(t)
	r := &nameResolver{mods: mods, seen: map[string]bool{}}
	checked, fixed := 0, map[string]bool{}
	for _, dir := range mods.dirs() {
		for _, b := range mods.blocks(dir, "resource") {
			for _, attr := range nameAttrs {
				a, ok := b.block.Body.Attributes[attr]
				if !ok {
					continue
				}
				id := b.file.rel + ": " + b.addr() + " " + attr
				if _, ok := fixedNames[id]; ok {
					fixed[id] = true
					continue
				}
				checked++
				if !r.derived(dir, b, a.Expr) {
					t.Errorf("%s: %s = %s is not derived from var.name_prefix: a second environment in the project would collide on it", b.where(), attr, b.text(a.Expr))
				}
			}
		}
	}
	for id := range fixedNames {
		if !fixed[id] {
			t.Errorf("fixedNames: %s is no resource name any more; drop it", id)
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d resource names: the walk is broken", checked)
	}
}

// TestNameResolver: the resolver tells derived names from fixed ones.
func TestNameResolver(t *testing.T) {
	src := `
locals {
  direct  = "${var.name_prefix}-x"
  via     = local.direct
  fixed   = "servo-x"
  objects = { a = { name = "${var.name_prefix}-a" } }
}
resource "t" "prefixed" { name = "${var.name_prefix}-y" }
resource "t" "local" { name = local.via }
resource "t" "fixed" { name = local.fixed }
resource "t" "each" {
  for_each = local.objects
  name     = each.value.name
}
resource "t" "each_fixed" {
  for_each = var.pools
  name     = "servo-pool-${each.key}"
}
resource "t" "ref" { name = t.prefixed.name }
module "m" {
  source = "./modules/m"
  name   = local.direct
}
module "n" {
  source = "./modules/n"
  name   = var.other
}
`
	mods := tfModules{}
	for dir, text := range map[string]string{
		"terraform":           src,
		"terraform/modules/m": `resource "t" "m" { name = var.name }`,
		"terraform/modules/n": `resource "t" "n" { name = var.name }`,
	} {
		f, diags := hclsyntax.ParseConfig([]byte(text), dir+"/main.tf", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		mods[dir] = []*tfFile{{rel: dir + "/main.tf", src: []byte(text), body: f.Body.(*hclsyntax.Body)}}
	}
	want := map[string]bool{
		"terraform t.prefixed": true, "terraform t.local": true, "terraform t.fixed": false,
		"terraform t.each": true, "terraform t.each_fixed": false, "terraform t.ref": true,
		"terraform/modules/m t.m": true, "terraform/modules/n t.n": false,
	}
	r := &nameResolver{mods: mods, seen: map[string]bool{}}
	for _, dir := range mods.dirs() {
		for _, b := range mods.blocks(dir, "resource") {
			k := dir + " " + b.addr()
			if got := r.derived(dir, b, b.block.Body.Attributes["name"].Expr); got != want[k] {
				t.Errorf("%s: derived = %v, want %v", k, got, want[k])
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("not checked: %v", want)
	}
}
