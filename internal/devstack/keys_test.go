package devstack

import (
	"os"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/auth"
)

// A restarted local stack verifies the tokens the previous one signed when
// SERVO_TOKEN_KEYS names the key ring (the faults harness kills servo dev
// and starts it again; before, each start generated a new ring and every
// worker in flight got 401 invalid_token).
func TestKeyRingFromTheEnvironment(t *testing.T) {
	ring, js, err := auth.GenerateKeyRing("k-env")
	if err != nil {
		t.Fatal(err)
	}
	scope := auth.Scope{TenantID: "acme", WorkspaceID: "ws", RunID: "run_1", TaskID: "task_1", Attempt: 1}
	tok, _, err := ring.Sign(scope, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvKeys, string(js))
	got, err := keyRing(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := got.Verify(tok, time.Now()); err != nil {
		t.Fatalf("a token of the environment's ring is refused after a restart: %v", err)
	}
	os.Unsetenv(auth.EnvKeys) // t.Setenv restores it after the test
	if fresh, err := keyRing(nil); err != nil || fresh.Active() != "local-1" {
		t.Fatalf("without SERVO_TOKEN_KEYS: %v, %v; want a generated ring", fresh, err)
	}
}
