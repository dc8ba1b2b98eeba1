// Package python_test runs the Python worker SDK's unit tests and its
// per-delivery benchmark from `go test`, so CI covers them with the Go
// suite. The SDK itself is Python (package servo_worker, this folder).
package python_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/servotest"
)

// python3 returns the interpreter, failing (never skipping) when it is
// missing or older than 3.10.
func python3(tb testing.TB) string {
	tb.Helper()
	// The Python sources are inputs of these tests: go test reruns them,
	// rather than answer from its cache, when one changes.
	servotest.TrackFiles(tb, ".", ".py")
	p, err := exec.LookPath("python3")
	if err != nil {
		tb.Fatal("python3 is not installed: the Python worker SDK's tests need it; install the Debian package python3 (apt-get install python3), Python >= 3.10")
	}
	if out, err := exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 10))").CombinedOutput(); err != nil {
		tb.Fatalf("%s is older than 3.10 (%v %s): install the Debian package python3 from a release that ships Python >= 3.10", p, err, out)
	}
	return p
}

// TestPythonUnitTests runs `python3 -m unittest discover` on tests/: the
// protocol against a scripted callback server (every row of
// docs/contract.md §4.4, retry rules, throttling, exactly-once completion,
// cancellation, fencing, token refresh, no token in logs).
func TestPythonUnitTests(t *testing.T) {
	py := python3(t)
	cmd := exec.Command(py, "-W", "error::ResourceWarning", "-m", "unittest", "discover", "-s", "tests", "-t", "tests")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log(strings.Join(lines[max(len(lines)-3, 0):], "\n"))
}

// BenchmarkPythonDelivery reports the Python SDK's per-delivery overhead
// (ms/delivery, callbacks/delivery) measured inside Python, with the
// scripted server and no-op handler of the Go SDK's BenchmarkDelivery
// (`go test -run '^$' -bench . ./worker/`). ns/op includes starting
// Python; read ms/delivery.
func BenchmarkPythonDelivery(b *testing.B) {
	py := python3(b)
	n := max(b.N, 300)
	out, err := exec.Command(py, "bench/bench_delivery.py", strconv.Itoa(n)).Output()
	if err != nil {
		b.Fatalf("bench_delivery.py: %v %s", err, out)
	}
	var r struct {
		MsPerDelivery        float64 `json:"msPerDelivery"`
		CallbacksPerDelivery float64 `json:"callbacksPerDelivery"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("bench_delivery.py printed %q: %v", out, err)
	}
	b.ReportMetric(r.MsPerDelivery, "ms/delivery")
	b.ReportMetric(r.CallbacksPerDelivery, "callbacks/delivery")
}

// TestPipInstall: `pip install ./sdk/python` works without a package index
// (the build backend is the standard library's), into a fresh virtual
// environment, and installs the typed package.
func TestPipInstall(t *testing.T) {
	py := python3(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv (install the Debian package python3-venv): %v\n%s", err, out)
	}
	vpy := filepath.Join(venv, "bin", "python")
	src, _ := filepath.Abs(".")
	cmd := exec.Command(vpy, "-m", "pip", "install", "--no-index", "--no-cache-dir", src)
	cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./sdk/python --no-index: %v\n%s", err, out)
	}
	check := exec.Command(vpy, "-c", `import os, servo_worker as s
d = os.path.dirname(s.__file__)
assert "site-packages" in d, d
assert os.path.exists(os.path.join(d, "py.typed"))
print(s.__version__, callable(s.pull), callable(s.run_job), callable(s.App))`)
	check.Dir = t.TempDir() // not this folder: the installed package must be found
	out, err := check.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0.2.0 True True True" {
		t.Fatalf("the installed package: %v %s", err, out)
	}
}
