package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/auth"
)

// A restarted servo dev verifies the tokens the previous one signed when
// SERVO_TOKEN_KEYS (or SERVO_TOKEN_KEYS_FILE) names the key ring (the
// faults harness kills servo dev and starts it again; before, each start
// generated a new ring and every worker in flight got 401 invalid_token).
func TestDevKeysFromTheEnvironment(t *testing.T) {
	ring, js, err := auth.GenerateKeyRing("k-env")
	if err != nil {
		t.Fatal(err)
	}
	scope := auth.Scope{TenantID: "acme", WorkspaceID: "ws", RunID: "run_1", TaskID: "task_1", Attempt: 1}
	tok, _, err := ring.Sign(scope, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ring.json")
	if err := os.WriteFile(file, js, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, keys, file string }{
		{"SERVO_TOKEN_KEYS", string(js), ""},
		{"SERVO_TOKEN_KEYS_FILE", "", file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(auth.EnvKeys, tc.keys)
			t.Setenv(auth.EnvKeysFile, tc.file)
			got, err := devKeys()
			if err != nil || got == nil {
				t.Fatalf("devKeys: %v, %v", got, err)
			}
			if _, err := got.Verify(tok, time.Now()); err != nil {
				t.Fatalf("a token of the environment's ring is refused after a restart: %v", err)
			}
		})
	}
	t.Setenv(auth.EnvKeys, "")
	t.Setenv(auth.EnvKeysFile, "")
	if got, err := devKeys(); got != nil || err != nil {
		t.Fatalf("without SERVO_TOKEN_KEYS: %v, %v; want none (the stack generates one)", got, err)
	}
	t.Setenv(auth.EnvKeys, `{"broken":`)
	if _, err := devKeys(); err == nil {
		t.Fatal("a broken SERVO_TOKEN_KEYS: no error")
	}
}
