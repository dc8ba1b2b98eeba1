package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// notServer are the SERVO_ variables that are not the server's
// configuration, and the folder (module-relative) whose code may read
// each: what Servo hands workers, the example worker's own settings, and
// the emulators'. Code under cmd/ (the CLI) is not checked.
var notServer = map[string]string{
	"SERVO_ENVELOPE":        "worker",          // a job execution's attempt (task.EnvelopeEnv), read by the worker SDK
	"SERVO_EMULATOR_LAUNCH": "emulator",        // how the emulators start (emulator.LaunchEnv)
	"SERVO_API":             "examples/worker", // the example worker's pull mode
	"SERVO_DEV_IDENTITY":    "examples/worker",
	"SERVO_OIDC_AUDIENCE":   "examples/worker",
	"SERVO_OIDC_SA":         "examples/worker",
	// The store's strict mode against the emulator (servo dev, tests);
	// production Firestore enforces its own rules.
	"SERVO_STORE_STRICT":     "internal/store",
	"SERVO_STORE_STRICT_LOG": "internal/store",
	// The dev benchmarks' workload (BenchmarkDevWorkload, BenchmarkDevRPCs).
	"SERVO_BENCH_HEARTBEATS": "internal/benchworker",
}

// TestOnlyConfigReadsServerVariables: outside package config (and the
// CLI, and tests), no Go file of the module reads a SERVO_ variable of the
// server (os.Getenv or os.LookupEnv of a string constant, directly or
// through a function of its own that passes a parameter on), nor hands
// os.Getenv or os.LookupEnv to another function, except to
// config.FromEnv.
func TestOnlyConfigReadsServerVariables(t *testing.T) {
	root, module := moduleRoot(t)
	reads, err := scanEnvReads(root, module, []string{"cmd", "internal/config"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reads {
		if r.name == "" {
			t.Errorf("%s: hands os.%s to another function; read the configuration with config.FromEnv", r.pos, r.fn)
			continue
		}
		if !strings.HasPrefix(r.name, "SERVO_") {
			continue
		}
		if dir, ok := notServer[r.name]; ok && (r.dir == dir || strings.HasPrefix(r.dir, dir+"/")) {
			continue
		}
		t.Errorf("%s: reads %s; the server's configuration is read by package config only (internal/config, docs/configuration.md)", r.pos, r.name)
	}
}

// TestScanEnvReads: the scan sees each way of reading a variable, and
// only those.
func TestScanEnvReads(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n",
		"names/names.go": `package names
const Keys = "SERVO_KEYS"
const Prefix = "SERVO_"
const Joined = Prefix + "JOINED"`,
		"a/a.go": `package a
import (
	"os"
	"example.com/m/names"
	"example.com/m/internal/config"
)
const local = "SERVO_LOCAL"
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
func F() {
	_ = os.Getenv("SERVO_LITERAL")
	_, _ = os.LookupEnv(local)
	_ = os.Getenv(names.Keys)
	_ = os.Getenv(names.Joined)
	_ = env("SERVO_WRAPPED", "x")
	_ = os.Getenv("HOME")
	load(os.Getenv)
	_, _ = config.FromEnv(os.Getenv)
}
func load(func(string) string) {}`,
		"a/a_test.go": `package a
import "os"
var _ = os.Getenv("SERVO_IN_TEST")`,
		"b/b.go": `package b
import "example.com/m/a"
var _ = a.Env("SERVO_OTHER_PACKAGE")`,
		"a/export.go": `package a
import "os"
func Env(name string) string { return os.Getenv(name) }`,
		"skipped/s.go": `package skipped
import "os"
var _ = os.Getenv("SERVO_SKIPPED")`,
		"nested/go.mod": "module example.com/nested\n",
		"nested/n.go": `package nested
import "os"
var _ = os.Getenv("SERVO_NESTED")`,
	}
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reads, err := scanEnvReads(root, "example.com/m", []string{"skipped"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reads {
		got = append(got, r.dir+":"+cmpOr(r.name, "value os."+r.fn))
	}
	slices.Sort(got)
	want := []string{
		"a:HOME",
		"a:SERVO_JOINED",
		"a:SERVO_KEYS",
		"a:SERVO_LITERAL",
		"a:SERVO_LOCAL",
		"a:SERVO_WRAPPED",
		"a:value os.Getenv", // load(os.Getenv); config.FromEnv(os.Getenv) is allowed
		"b:SERVO_OTHER_PACKAGE",
	}
	if !slices.Equal(got, want) {
		t.Errorf("reads:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// moduleRoot returns the module's root folder and path; the test runs in
// internal/config.
func moduleRoot(t *testing.T) (root, module string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return root, strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod: no module line")
	return "", ""
}

// envRead is one read of an environment variable found by scanEnvReads:
// name is the variable, "" when os.Getenv or os.LookupEnv (fn) is handed
// on as a value.
type envRead struct {
	pos, dir, name, fn string
}

// goFile is a parsed file and the package it belongs to.
type goFile struct {
	pkg     string // import path
	dir     string // module-relative folder
	f       *ast.File
	imports map[string]string // local name → import path
}

// scanEnvReads parses the non-test Go files of the module at root (not
// those under skip, module-relative folders, nor nested modules) and
// returns the environment reads it can name: os.Getenv and os.LookupEnv
// of a string constant (a literal, or a package's constant, "+" allowed),
// calls of a function that passes its parameter to one of those with a
// constant, and os.Getenv or os.LookupEnv handed to a function other than
// config.FromEnv.
func scanEnvReads(root, module string, skip []string) ([]envRead, error) {
	fset := token.NewFileSet()
	var files []goFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			base := d.Name()
			if strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata" || base == "vendor" || slices.Contains(skip, rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		pkg := module
		if dir != "." {
			pkg += "/" + dir
		}
		gf := goFile{pkg: pkg, dir: dir, f: f, imports: map[string]string{}}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			name := path.Base(ip)
			if im.Name != nil {
				name = im.Name.Name
			}
			gf.imports[name] = ip
		}
		files = append(files, gf)
		return nil
	})
	if err != nil {
		return nil, err
	}

	// The string constants, "pkg.Name" → value, resolved in rounds since
	// one may refer to another.
	consts := map[string]string{}
	for range 4 {
		for _, gf := range files {
			for _, decl := range gf.f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := constString(vs.Values[i], gf, consts); ok {
								consts[gf.pkg+"."+n.Name] = v
							}
						}
					}
				}
			}
		}
	}

	// Direct reads, and the functions that pass a parameter on to one:
	// "pkg.Func" → the parameter's index.
	var reads []envRead
	wrappers := map[string]int{}
	for _, gf := range files {
		var fn *ast.FuncDecl
		var stack []ast.Node
		ast.Inspect(gf.f, func(n ast.Node) bool {
			if n == nil {
				if stack[len(stack)-1] == fn {
					fn = nil
				}
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			if d, ok := n.(*ast.FuncDecl); ok {
				fn = d
			}
			name, ok := osEnvFunc(n, gf)
			if !ok {
				return true
			}
			parent := stack[len(stack)-2]
			call, isCall := parent.(*ast.CallExpr)
			if !isCall || call.Fun != n {
				// Handed on as a value.
				if !isCall || !isFromEnv(call.Fun, gf) {
					reads = append(reads, envRead{pos: fset.Position(n.Pos()).String(), dir: gf.dir, fn: name})
				}
				return true
			}
			if len(call.Args) == 0 {
				return true
			}
			if v, ok := constString(call.Args[0], gf, consts); ok {
				reads = append(reads, envRead{pos: fset.Position(call.Pos()).String(), dir: gf.dir, name: v, fn: name})
			} else if id, ok := call.Args[0].(*ast.Ident); ok && fn != nil && fn.Recv == nil {
				if i := paramIndex(fn, id.Name); i >= 0 {
					wrappers[gf.pkg+"."+fn.Name.Name] = i
				}
			}
			return true
		})
	}
	// Calls of those functions with a constant.
	for _, gf := range files {
		ast.Inspect(gf.f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var key string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				key = gf.pkg + "." + f.Name
			case *ast.SelectorExpr:
				if x, ok := f.X.(*ast.Ident); ok && gf.imports[x.Name] != "" {
					key = gf.imports[x.Name] + "." + f.Sel.Name
				}
			}
			i, ok := wrappers[key]
			if !ok || i >= len(call.Args) {
				return true
			}
			if v, ok := constString(call.Args[i], gf, consts); ok {
				reads = append(reads, envRead{pos: fset.Position(call.Pos()).String(), dir: gf.dir, name: v, fn: key})
			}
			return true
		})
	}
	return reads, nil
}

// osEnvFunc reports whether n is os.Getenv or os.LookupEnv, and which.
func osEnvFunc(n ast.Node, gf goFile) (string, bool) {
	sel, ok := n.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok || gf.imports[x.Name] != "os" || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
		return "", false
	}
	return sel.Sel.Name, true
}

// isFromEnv reports whether fun is this package's FromEnv.
func isFromEnv(fun ast.Expr, gf goFile) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && strings.HasSuffix(gf.imports[x.Name], "/internal/config") && sel.Sel.Name == "FromEnv"
}

// paramIndex is the index of fn's parameter name, -1 when it has none.
func paramIndex(fn *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fn.Type.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return -1
}

// constString evaluates e as a string constant: a literal, a constant of
// consts ("pkg.Name"), or a sum of those.
func constString(e ast.Expr, gf goFile, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.ParenExpr:
		return constString(e.X, gf, consts)
	case *ast.Ident:
		v, ok := consts[gf.pkg+"."+e.Name]
		return v, ok
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok || gf.imports[x.Name] == "" {
			return "", false
		}
		v, ok := consts[gf.imports[x.Name]+"."+e.Sel.Name]
		return v, ok
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := constString(e.X, gf, consts)
		b, ok2 := constString(e.Y, gf, consts)
		return a + b, ok1 && ok2
	}
	return "", false
}
