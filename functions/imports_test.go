package functions

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductionImportsNoEmulator: what the buildpack builds (the root
// package and this one) links no emulator; the local stack (package
// devstack) and the tests bring their own.
func TestProductionImportsNoEmulator(t *testing.T) {
	const emulator = "github.com/servo-dev/servo/emulator"
	for _, pkg := range []string{"github.com/servo-dev/servo", "github.com/servo-dev/servo/functions"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s: %d packages", pkg, len(deps))
		}
		for _, d := range deps {
			if d == emulator || strings.HasPrefix(d, emulator+"/") {
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
}
