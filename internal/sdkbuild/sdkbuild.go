// Package sdkbuild builds the TypeScript worker SDK (sdk/typescript) for the
// tests that drive it, so that `go test ./...` needs no step beyond it on a
// fresh clone: `npm ci` when node_modules is absent (it is gitignored), then
// tsc. Test binaries run in parallel; a file lock serialises the builds.
package sdkbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/servotest"
)

// Dir is sdk/typescript, absolute.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "sdk", "typescript")
}

// TypeScript builds the SDK into sdk/typescript/dist and returns the node
// executable. It fails tb, naming what to install, when node (>= 20.3) or
// npm is missing, and with the tools' output when the build fails.
func TypeScript(tb testing.TB) (node string) {
	tb.Helper()
	dir := Dir()
	// The sources are inputs of the calling tests: go test reruns them,
	// rather than answer from its cache, when one changes.
	servotest.TrackFiles(tb, filepath.Join(dir, "src"), ".ts")
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json"} {
		_, _ = os.Stat(filepath.Join(dir, f))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatal("node is not installed: the TypeScript worker SDK's tests need Node.js >= 20.3 with npm; install the Debian packages nodejs and npm (apt-get install nodejs npm)")
	}
	if out, err := exec.Command(node, "-e", "process.exit(typeof AbortSignal.any === 'function' && Number(process.versions.node.split('.')[0]) >= 20 ? 0 : 1)").CombinedOutput(); err != nil {
		tb.Fatalf("%s is older than Node.js 20.3 (%v %s): install Node.js >= 20.3", node, err, out)
	}
	unlock, err := lock(filepath.Join(dir, ".build.lock"))
	if err != nil {
		tb.Fatalf("lock the TypeScript SDK's build: %v", err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			tb.Fatal("npm is not installed: building the TypeScript worker SDK needs it; install the Debian package npm (apt-get install npm)")
		}
		cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("npm ci in sdk/typescript (its dev dependencies, typescript and @types/node, from the npm registry) failed: %v\n%s", err, out)
		}
	}
	if upToDate(dir) {
		// Another test binary built it: rewriting dist/ under a worker
		// that another test is running could hand it a half-written file.
		return node
	}
	cmd := exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("tsc in sdk/typescript failed: %v\n%s", err, out)
	}
	return node
}

// upToDate reports whether every dist/*.js is newer than every source
// (src/*.ts, tsconfig.json, package-lock.json) and there is one per source.
func upToDate(dir string) bool {
	var newest time.Time
	srcs, _ := filepath.Glob(filepath.Join(dir, "src", "*.ts"))
	for _, f := range append(srcs, filepath.Join(dir, "tsconfig.json"), filepath.Join(dir, "package-lock.json")) {
		fi, err := os.Stat(f)
		if err != nil {
			return false
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	for _, src := range srcs {
		base := strings.TrimSuffix(filepath.Base(src), ".ts")
		fi, err := os.Stat(filepath.Join(dir, "dist", base+".js"))
		if err != nil || !fi.ModTime().After(newest) {
			return false
		}
	}
	return len(srcs) > 0
}
