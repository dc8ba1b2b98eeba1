// Package typescript_test runs the TypeScript worker SDK's unit tests
// (test/*.test.mjs, Node's own test runner) and its type-level tests
// (test/types.ts, tsc) from `go test`, so CI covers them with the Go suite,
// and checks the package as npm users get it: the committed dist/ is the
// build of src/, and `npm pack`'s tarball and the folder itself install
// offline and import with nothing but Node. The SDK itself is TypeScript
// (this folder); it is built first (package sdkbuild: npm ci when
// node_modules is absent, tsc).
package typescript_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/sdkbuild"
	"github.com/servo-dev/servo/internal/servotest"
)

// TestTypeScriptUnitTests: the protocol against a scripted callback server
// (every refusal of docs/contract.md §4.4 at started, retries and final
// answers, 410 and shouldCancel, token refresh, the fence counted from the
// sending, duplicate deliveries, Express-style bodies, bad deliveries,
// traceparent on every callback, outcomes, log levels), pull mode (claims,
// backoff, refusals, the grace period, a stop abandoning the open claim)
// and runJob's exit codes.
func TestTypeScriptUnitTests(t *testing.T) {
	servotest.TrackFiles(t, "test", ".mjs")
	node := sdkbuild.TypeScript(t)
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "test/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log(strings.Join(lines[max(len(lines)-8, 0):], "\n"))
}

// TestTypeScriptTypes: test/types.ts compiles against the published
// declarations (the package imported by its own name): typed handlers
// (Handler<Payload, Checkpoint, Output>) compile, untyped ones still do,
// and every `@ts-expect-error` line (a wrong payload, checkpoint or output
// type, a bad logLevel) is an error.
func TestTypeScriptTypes(t *testing.T) {
	servotest.TrackFiles(t, "test", ".ts")
	_, _ = os.Stat(filepath.Join("test", "tsconfig.json"))
	node := sdkbuild.TypeScript(t)
	cmd := exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", filepath.Join("test", "tsconfig.json"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p test/tsconfig.json (the type-level tests) failed: %v\n%s", err, out)
	}
}

// TestDistMatchesSources: dist/ (committed, so that `npm install
// <folder>` needs no build) is exactly what tsc makes of src/: in the work
// tree, and in HEAD when the sources are HEAD's. Run `npm run build` and
// commit dist/ when it fails.
func TestDistMatchesSources(t *testing.T) {
	node := sdkbuild.TypeScript(t)
	want := t.TempDir()
	cmd := exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json", "--outDir", want)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	built := listFiles(t, want)
	if len(built) == 0 {
		t.Fatal("tsc built nothing")
	}
	if got := listFiles(t, "dist"); !slices.Equal(got, built) {
		t.Errorf("dist/ holds %v; tsc builds %v from src/ (npm run build, and remove what src/ no longer has)", got, built)
	}
	for _, f := range built {
		w, _ := os.ReadFile(filepath.Join(want, f))
		g, err := os.ReadFile(filepath.Join("dist", f))
		if err == nil && !bytes.Equal(g, w) {
			t.Errorf("dist/%s is not tsc's build of src/: run npm run build", f)
		}
	}

	// The committed dist/, when the committed sources are the work tree's.
	git, err := exec.LookPath("git")
	if err != nil {
		t.Log("git not found: HEAD's dist/ not checked")
		return
	}
	status, err := exec.Command(git, "status", "--porcelain", "--", "src", "tsconfig.json", "package-lock.json").Output()
	if err != nil {
		t.Logf("git status: %v: HEAD's dist/ not checked", err)
		return
	}
	if len(bytes.TrimSpace(status)) > 0 {
		t.Log("the sources changed since HEAD: HEAD's dist/ not checked")
		return
	}
	for _, f := range built {
		g, err := exec.Command(git, "show", "HEAD:./dist/"+filepath.ToSlash(f)).Output()
		if err != nil {
			t.Errorf("dist/%s is not committed: run npm run build and commit dist/", f)
			continue
		}
		w, _ := os.ReadFile(filepath.Join(want, f))
		if !bytes.Equal(g, w) {
			t.Errorf("the committed dist/%s is not tsc's build of the committed src/: run npm run build and commit dist/", f)
		}
	}
}

// listFiles lists the files below dir, relative to it, sorted.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var fs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fs = append(fs, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fs)
	return fs
}

// TestNpmInstall: the SDK installs as npm users install it, with nothing
// but Node and npm, offline (an empty npm cache: no registry fetch), from
// the tarball of `npm pack` and from the folder itself (no build step runs
// at install); and it imports, ESM only, from an ES module and from
// CommonJS by a dynamic import.
func TestNpmInstall(t *testing.T) {
	node := sdkbuild.TypeScript(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not installed: install the Debian package npm (apt-get install npm)")
	}
	servotest.TrackFiles(t, "dist", ".js")
	for _, f := range []string{"package.json", "README.md"} {
		_, _ = os.Stat(f)
	}
	// No build (or any script) at install: a consumer has no TypeScript,
	// and npm links a folder as it is. npm ≥ 11 only warns (allowScripts)
	// where older ones ran prepare and failed (tsc: not found).
	var pkg struct {
		Scripts map[string]string `json:"scripts"`
	}
	if b, err := os.ReadFile("package.json"); err != nil || json.Unmarshal(b, &pkg) != nil {
		t.Fatalf("package.json: %v", err)
	}
	for _, s := range []string{"preinstall", "install", "postinstall", "prepare"} {
		if pkg.Scripts[s] != "" {
			t.Errorf("package.json has a %q script (%s): it runs at npm install <folder> (and git installs), where TypeScript is not installed; ship dist/ instead", s, pkg.Scripts[s])
		}
	}
	sdk, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	env := append(os.Environ(),
		"npm_config_cache="+filepath.Join(tmp, "npm-cache"),
		"npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false",
		"npm_config_userconfig="+filepath.Join(tmp, "npmrc"))
	run := func(dir, name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s (in %s): %v\n%s%s", filepath.Base(name), strings.Join(args, " "), dir, err, out, stderr.Bytes())
		}
		if strings.Contains(stderr.String(), "npm warn") || strings.Contains(stderr.String(), "npm WARN") {
			t.Errorf("%s %s warns:\n%s", filepath.Base(name), strings.Join(args, " "), stderr.Bytes())
		}
		return out
	}

	// npm pack: the built SDK, its README, and nothing else.
	packDir := filepath.Join(tmp, "pack")
	if err := os.Mkdir(packDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var packed []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal(run(sdk, npm, "pack", "--json", "--pack-destination", packDir), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v %+v", err, packed)
	}
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	for _, f := range []string{"package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/run.js"} {
		if !slices.Contains(files, f) {
			t.Errorf("the tarball lacks %s: %v", f, files)
		}
	}
	for _, f := range files {
		if !strings.HasPrefix(f, "dist/") && f != "package.json" && f != "README.md" && f != "LICENSE" {
			t.Errorf("the tarball holds %s (only dist/, README.md and package.json belong in it)", f)
		}
	}
	tarball := filepath.Join(packDir, packed[0].Filename)

	// ESM: a static import; CommonJS: the dynamic import the README shows.
	const check = `m => { for (const k of ["pushHandler", "pull", "runJob", "mainJob", "parseEnvelope", "InfrastructureError"]) if (!m[k]) throw new Error("no export " + k); console.log("ok " + typeof m.pushHandler(() => 1, { logger: () => {} })); }`
	for _, from := range []string{tarball, sdk} {
		consumer := t.TempDir()
		if err := os.WriteFile(filepath.Join(consumer, "package.json"), []byte(`{"name": "consumer", "version": "1.0.0", "private": true}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		run(consumer, npm, "install", "--offline", "--no-audit", "--no-fund", from)
		if err := os.WriteFile(filepath.Join(consumer, "esm.mjs"), []byte(`import * as m from "@servo-dev/worker";`+"\n("+check+")(m);\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(consumer, "cjs.cjs"), []byte(`import("@servo-dev/worker").then(`+check+`).catch(e => { console.error(e); process.exit(1); });`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, script := range []string{"esm.mjs", "cjs.cjs"} {
			if out := strings.TrimSpace(string(run(consumer, node, script))); out != "ok function" {
				t.Errorf("node %s after npm install %s: %q", script, from, out)
			}
		}
		out := run(consumer, node, "-e", `import("@servo-dev/worker").then(`+check+`)`)
		if strings.TrimSpace(string(out)) != "ok function" {
			t.Errorf("node -e import(...) after npm install %s: %q", from, out)
		}
	}
}
