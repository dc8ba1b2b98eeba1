package devstack_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoExample: the local stack links no example; servo dev
// passes the example worker in (Options.WorkerFuncs). Its tests may.
func TestImportsNoExample(t *testing.T) {
	const examples = "github.com/servo-dev/servo/examples"
	out, err := exec.Command("go", "list", "-deps", "github.com/servo-dev/servo/internal/devstack").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps: %d packages", len(deps))
	}
	for _, d := range deps {
		if d == examples || strings.HasPrefix(d, examples+"/") {
			t.Errorf("internal/devstack imports %s", d)
		}
	}
}
