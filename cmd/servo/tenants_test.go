package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/quota"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
	"github.com/servo-dev/servo/worker"
)

// servo --as EMAIL acts as that principal against servo dev under a real
// policy; servo usage shows a tenant's counts and limits.
func TestAsAndUsage(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(`{"principals": {"alice@example.com": {"acme": "submitter"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := stacktest.Start(t, devstack.Options{
		SweepEvery:  100 * time.Millisecond,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
		Access:      p, Quotas: &quota.Policy{Tenants: map[string]quota.Limits{"acme": {MaxRunning: 3, MaxQueued: 50}}},
	})
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

// servo events tail --as EMAIL prints only the events of the tenants
// EMAIL views (the API's event stream), even while another tenant's
// tasks run; with no identity it is refused.
func TestEventsTailAs(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(`{"principals": {"alice@example.com": {"acme": "viewer"}, "admin@example.com": {"*": "operator"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := stacktest.Start(t, devstack.Options{
		SweepEvery:  100 * time.Millisecond,
		WorkerFuncs: map[string]worker.Func{devstack.ExampleWorker: partitions.Process}, Access: p,
	})
	t.Setenv(auth.DevKeyEnv, base64.RawURLEncoding.EncodeToString(s.IdentityKey))

	if _, errOut, code := runCLI(t, "events", "tail", "--api", s.URL); code == 0 || !strings.Contains(errOut, "401") {
		t.Fatalf("tail without --as: exit %d, %s", code, errOut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out servotest.Buffer
	var errOut strings.Builder
	exited := make(chan error, 1)
	go func() {
		exited <- execute(ctx, []string{"--as", "alice@example.com", "events", "tail", "--json", "--api", s.URL}, nil, &out, &errOut)
	}()
	// The stream is open once the tail prints nothing and has not exited;
	// submit both tenants' tasks until acme's show up (the subscription
	// may not exist for the first ones).
	admin, err := auth.SignDev(s.IdentityKey, "admin@example.com", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.SetBearer(admin)
	deadline := time.Now().Add(60 * time.Second)
	var acme, globex []string
	for {
		for _, tenant := range []string{"globex", "acme"} {
			r, _, err := c.Submit(ctx, []byte(`{"tenantId":"`+tenant+`","workspaceId":"ws","taskKey":"k","worker":"`+devstack.ExampleWorker+`","payload":{"partitions":1,"partitionMs":10}}`))
			if err != nil {
				t.Fatal(err)
			}
			if tenant == "acme" {
				acme = append(acme, r.TaskID)
			} else {
				globex = append(globex, r.TaskID)
			}
		}
		// Each acme task ends SUCCEEDED: its last event.
		got := tailEvents(t, out.String())
		done := 0
		for _, e := range got {
			if e.TenantID != "acme" {
				t.Fatalf("alice's tail printed %s's event %+v", e.TenantID, e)
			}
			if e.To == api.Succeeded {
				done++
			}
		}
		if done >= 2 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("tail exited: %v %s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's tail printed %d events, %d SUCCEEDED, want 2", len(got), done)
		}
		time.Sleep(time.Second)
	}
	// None of the globex tasks' events was printed.
	for _, id := range globex {
		if strings.Contains(out.String(), id) {
			t.Fatalf("alice's tail printed globex task %s", id)
		}
	}
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("tail: %v %s", err, errOut.String())
	}
}
