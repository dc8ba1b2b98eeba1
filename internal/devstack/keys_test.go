package devstack

import (
	"testing"

	"github.com/servo-dev/servo/internal/auth"
)

// The stack signs with the key ring it is given (servo dev passes the one
// of SERVO_TOKEN_KEYS, so that tokens survive a restart: see cmd/servo's
// TestDevKeysFromTheEnvironment), else with one of its own.
func TestKeyRing(t *testing.T) {
	given, _, err := auth.GenerateKeyRing("k-given")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := keyRing(given); err != nil || got != given {
		t.Fatalf("given a ring: %v, %v", got, err)
	}
	if fresh, err := keyRing(nil); err != nil || fresh.Active() != "local-1" {
		t.Fatalf("no ring: %v, %v; want a generated one", fresh, err)
	}
}
