package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/worker"
)

// servo --as EMAIL acts as that principal against servo dev under a real
// policy; servo usage shows a tenant's counts and limits.
func TestAsAndUsage(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(`{"principals": {"alice@example.com": {"acme": "submitter"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := devstack.Start(context.Background(), devstack.Options{
		Addr: "127.0.0.1:0", Project: emulatortest.ProjectID(t), ReuseEmulators: true, SweepEvery: 100 * time.Millisecond,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Access:      p, Quotas: &quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 3, MaxQueued: 50}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	t.Setenv(auth.DevKeyEnv, base64.RawURLEncoding.EncodeToString(s.IdentityKey))
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append(args, "--api", s.URL)...)
	}

	if _, errOut, code := cli("usage", "acme"); code == 0 || !strings.Contains(errOut, "401") {
		t.Fatalf("usage without --as: exit %d, %s", code, errOut)
	}
	out, errOut, code := cli("--as", "alice@example.com", "usage", "acme")
	if code != 0 || !strings.Contains(out, "Running:  0 (max 3)") || !strings.Contains(out, "Queued:   0 (max 50)") {
		t.Fatalf("usage as alice: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = cli("--as", "alice@example.com", "usage", "acme", "--json")
	var u api.UsageResponse
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Limits.MaxRunning != 3 || u.Source != "counters" {
		t.Fatalf("usage --json: exit %d %s", code, out)
	}
	if _, errOut, code := cli("--as", "alice@example.com", "usage", "other"); code == 0 || !strings.Contains(errOut, "permission_denied") {
		t.Fatalf("usage of another tenant: exit %d, %s", code, errOut)
	}
	t.Setenv(auth.DevKeyEnv, base64.RawURLEncoding.EncodeToString(auth.NewDevKey()))
	if _, errOut, code := cli("--as", "alice@example.com", "usage", "acme"); code == 0 || !strings.Contains(errOut, "401") {
		t.Fatalf("usage with another run's key: exit %d, %s", code, errOut)
	}
}
