package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/servo-dev/servo"

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	Standard   bool
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// list runs `go list -json` (with -deps when deps) on patterns.
func list(t *testing.T, deps bool, patterns ...string) []pkg {
	t.Helper()
	args := []string{"list", "-json"}
	if deps {
		args = append(args, "-deps")
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var ps []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return ps
		} else if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

func internal(path string) bool {
	r := rel(path)
	return r == "internal" || strings.HasPrefix(r, "internal/") || strings.Contains(r, "/internal/") || strings.HasSuffix(r, "/internal")
}

// publicPackages are the importable packages a user may depend on, and
// the most exported identifiers they may have together.
var publicPackages = []string{
	"api", "client", "worker", "worker/googleauth", // what users import
	"emulator", "emulator/cloudtasks", "emulator/emulatortest", // the local emulators, embeddable
	"functions", "dispatcher", "callbacks", "zombie", // the design card's folders
	"examples/worker/partitions", // the example worker's function
	"",                           // the Cloud Functions source root
}

const maxExported = 350

// exported counts a package's exported identifiers: top-level funcs,
// types, vars and consts, and the exported methods of exported types, in
// its non-test files.
func exported(t *testing.T, p pkg) (n int, names []string) {
	t.Helper()
	fset := token.NewFileSet()
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					switch r := recv.(type) {
					case *ast.IndexExpr:
						recv = r.X
					case *ast.IndexListExpr:
						recv = r.X
					}
					if id, ok := recv.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
					names = append(names, id(recv)+"."+d.Name.Name)
					continue
				}
				names = append(names, d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, nm := range s.Names {
							if nm.IsExported() {
								names = append(names, nm.Name)
							}
						}
					}
				}
			}
		}
	}
	return len(names), names
}

func id(e ast.Expr) string {
	if i, ok := e.(*ast.Ident); ok {
		return i.Name
	}
	return "?"
}

// Only the packages users are meant to import are importable, and
// together they export at most maxExported identifiers: anything public is
// an API someone may come to depend on.
func TestPublicSurface(t *testing.T) {
	total := 0
	var rows []string
	for _, p := range list(t, false, "./...") {
		if internal(p.ImportPath) || p.Name == "main" || len(p.GoFiles) == 0 {
			continue
		}
		n, _ := exported(t, p)
		if n > 0 && !slices.Contains(publicPackages, rel(p.ImportPath)) {
			t.Errorf("%s exports %d identifiers: move it under internal/, or add it to publicPackages if users are meant to import it", p.ImportPath, n)
		}
		total += n
		rows = append(rows, fmt.Sprintf("%4d %s", n, p.ImportPath))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(rows)))
	t.Logf("exported identifiers outside internal/: %d\n%s", total, strings.Join(rows, "\n"))
	if total > maxExported {
		t.Errorf("%d exported identifiers outside internal/, more than %d", total, maxExported)
	}
	if total == 0 {
		t.Fatal("counted nothing")
	}
}

// heavy are the dependencies a worker or an API client must never pull
// in: Google's service clients and transports, gRPC, and OpenTelemetry's
// SDK and exporters (the application brings its own providers).
var heavy = []string{
	"cloud.google.com/go/firestore",
	"cloud.google.com/go/pubsub",
	"cloud.google.com/go/cloudtasks",
	"cloud.google.com/go/monitoring",
	"cloud.google.com/go/trace",
	"cloud.google.com/go/secretmanager",
	"cloud.google.com/go/run",
	"google.golang.org/api",
	"google.golang.org/grpc",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"github.com/GoogleCloudPlatform/opentelemetry-operations-go",
	"github.com/prometheus",
}

// The worker SDK and the API client stay light: no heavy dependency, none
// of Servo's server, and a bounded number of packages outside the
// standard library.
func TestSDKDependencies(t *testing.T) {
	for _, c := range []struct {
		pkg            string
		maxNonStandard int
		maxTotal       int
		allowInternal  []string
	}{
		// The standard library's net/http alone is about 185 packages, so
		// the totals are bounded by what HTTP costs; the non-standard
		// counts are what the SDK adds.
		{"api", 0, 200, nil},
		{"client", 150, 200, nil},
		{"worker", 250, 250, []string{"internal/logs", "internal/spanattr"}},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			deps := list(t, true, "./"+c.pkg)
			nonStd := 0
			for _, d := range deps {
				if d.Standard {
					continue
				}
				if d.ImportPath != module+"/"+c.pkg {
					nonStd++
				}
				for _, h := range heavy {
					if d.ImportPath == h || strings.HasPrefix(d.ImportPath, h+"/") {
						t.Errorf("%s depends on %s", c.pkg, d.ImportPath)
					}
				}
				if strings.HasPrefix(d.ImportPath, module+"/") && internal(d.ImportPath) && !slices.Contains(c.allowInternal, rel(d.ImportPath)) {
					t.Errorf("%s depends on Servo's %s", c.pkg, rel(d.ImportPath))
				}
			}
			t.Logf("go list -deps ./%s: %d packages, %d outside the standard library", c.pkg, len(deps), nonStd)
			if nonStd > c.maxNonStandard {
				t.Errorf("%s: %d packages outside the standard library, more than %d", c.pkg, nonStd, c.maxNonStandard)
			}
			if len(deps) > c.maxTotal {
				t.Errorf("%s: %d packages in all, more than %d", c.pkg, len(deps), c.maxTotal)
			}
		})
	}
}

// layers ranks every package of the module, bottom first. A package may
// import only packages of a lower layer: packages depend downward, and the
// packages of one layer (the design card's dispatcher, callbacks and
// zombie among them) do not import each other. A new package must be
// placed here.
var layers = [][]string{
	// Nothing of Servo's: the wire types, the identity rules, the log
	// shape, the emulators, test helpers and test-only packages.
	{"api", "internal/auth", "internal/logs", "internal/spanattr", "internal/layout", "internal/failpoint",
		"emulator", "emulator/cloudtasks", "internal/callbacks/functionstest",
		"deploy", "deploy/buildpack", "sdk/python", "examples/python-worker", "sdk/typescript", "internal/sdkcontract",
		"examples/typescript-worker", "internal/scale", "internal/cost", "internal/openapi",
		"internal/docpages"},
	// The state machine; the SDK and the client; key storage; the
	// services' shared construction (clock, logger, missing dependency).
	{"internal/task", "internal/schedule", "client", "worker", "internal/auth/keysecret", "emulator/emulatortest", "internal/servotest",
		"internal/service"},
	{"internal/telemetry", "internal/quota", "worker/googleauth", "examples/worker/partitions", "internal/benchworker", "internal/sdkbuild",
		"internal/sdkcontract/workers/goworker"},
	{"internal/store"},
	{"internal/store/storetest"}, // the store's conformance suite (its tests call it)
	{"internal/enqueue", "internal/events"},
	// The control plane's handlers: the design card's dispatcher,
	// callbacks and zombie, and their siblings.
	{"internal/dispatcher", "internal/callbacks", "internal/zombie", "internal/jobs", "internal/pull", "internal/dashboard"},
	// The configuration (its defaults are the handlers'), then the one
	// constructor that wires the handlers from it.
	{"internal/config", "internal/faults", "examples/worker"},
	{"internal/server"},
	// Production's entry points, the design card's public dispatcher,
	// callbacks and zombie (each built from the environment) and the
	// local stack only call it.
	{"functions", "dispatcher", "callbacks", "zombie", "internal/devstack"},
	{"", "cmd/servo", "bench/scale", "bench/cost"},
	// A local stack for tests, and its API's client (tests import it).
	{"internal/servotest/stacktest"},
}

func TestLayering(t *testing.T) {
	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			if _, dup := rank[p]; dup {
				t.Errorf("%q is in two layers", p)
			}
			rank[p] = i
		}
	}
	seen := map[string]bool{}
	for _, p := range list(t, false, "./...") {
		from := rel(p.ImportPath)
		seen[from] = true
		r, ok := rank[from]
		if !ok {
			t.Errorf("package %q is in no layer: place it in layers", from)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") && imp != module {
				continue
			}
			to := rel(imp)
			if strings.HasPrefix(from, "examples/") && internal(imp) {
				t.Errorf("%s imports %s: the examples are what users copy, and users cannot import internal packages", from, to)
			}
			if rt, ok := rank[to]; ok && rt >= r {
				t.Errorf("%s (layer %d) imports %s (layer %d): packages depend downward only", from, r, to, rt)
			}
		}
	}
	for p := range rank {
		if !seen[p] {
			t.Errorf("layers names %q, which is not a package", p)
		}
	}
}

// No exported identifier of a public package names a type of an internal
// package (in a signature, an exported field, an interface method, a
// declared type or value): a user cannot import it, so such an API could
// not be used, only depended on by accident.
func TestNoInternalTypeInPublicSignatures(t *testing.T) {
	checked := 0
	for _, p := range list(t, false, "./...") {
		if !slices.Contains(publicPackages, rel(p.ImportPath)) {
			continue
		}
		for _, v := range internalInSignatures(t, p) {
			t.Errorf("%s: %s", p.ImportPath, v)
		}
		checked++
	}
	if checked != len(publicPackages) {
		t.Errorf("checked %d of the %d public packages", checked, len(publicPackages))
	}
}

// internalInSignatures lists, in p's non-test files, every use of an
// internal package's identifier in what p exports.
func internalInSignatures(t *testing.T, p pkg) []string {
	t.Helper()
	fset := token.NewFileSet()
	var out []string
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		internals := map[string]string{} // local name → import path
		var inspect func(where string, n ast.Node)
		for _, im := range f.Imports {
			path := strings.Trim(im.Path.Value, `"`)
			if !strings.HasPrefix(path, module+"/") || !internal(path) {
				continue
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if im.Name != nil {
				local = im.Name.Name
			}
			internals[local] = path
		}
		check := func(where string, ns ...ast.Node) {
			for _, n := range ns {
				if n == nil || reflect.ValueOf(n).IsNil() || len(internals) == 0 {
					continue
				}
				inspect(where, n)
			}
		}
		inspect = func(where string, n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					return false // a body, not a signature
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok {
						if path, ok := internals[x.Name]; ok {
							out = append(out, fmt.Sprintf("%s (%s) uses %s.%s of %s", where, fset.Position(n.Pos()), x.Name, n.Sel.Name, rel(path)))
						}
					}
				}
				return true
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if id, ok := recv.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
				}
				check(d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							check(s.Name.Name, exportedPart(s.Type)...)
						}
					case *ast.ValueSpec:
						for _, nm := range s.Names {
							if nm.IsExported() {
								check(nm.Name, s.Type)
								for _, v := range s.Values {
									check(nm.Name, v)
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// exportedPart is a type expression without its unexported struct fields
// and interface methods (which users never see).
func exportedPart(e ast.Expr) []ast.Node {
	switch e := e.(type) {
	case *ast.StructType:
		var keep []ast.Node
		for _, f := range e.Fields.List {
			exp := len(f.Names) == 0 // embedded: exported if its type is
			for _, n := range f.Names {
				exp = exp || n.IsExported()
			}
			if len(f.Names) == 0 {
				typ := f.Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				switch x := typ.(type) {
				case *ast.Ident:
					exp = x.IsExported()
				case *ast.SelectorExpr:
					exp = x.Sel.IsExported()
				}
			}
			if exp {
				keep = append(keep, f.Type)
			}
		}
		return keep
	case *ast.InterfaceType:
		var keep []ast.Node
		for _, f := range e.Methods.List {
			if len(f.Names) == 0 || f.Names[0].IsExported() {
				keep = append(keep, f.Type)
			}
		}
		return keep
	}
	return []ast.Node{e}
}
