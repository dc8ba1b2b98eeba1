// Package typescript_test runs the TypeScript worker SDK's unit tests
// (test/*.test.mjs, Node's own test runner) from `go test`, so CI covers
// them with the Go suite. The SDK itself is TypeScript (this folder); it is
// built first (package sdkbuild: npm ci when node_modules is absent, tsc).
package typescript_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/servo-dev/servo/internal/sdkbuild"
	"github.com/servo-dev/servo/internal/servotest"
)

// TestTypeScriptUnitTests: the protocol against a scripted callback server
// (every refusal of docs/contract.md §4.4 at started, retries and final
// answers, 410 and shouldCancel, token refresh, the fence counted from the
// sending, duplicate deliveries, Express-style bodies, bad deliveries,
// traceparent on every callback, outcomes).
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
