package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator/emulatortest"
)

// TestDevFunction: servo dev function serves a deployed entry point built
// from the environment, as the runbook's "A configuration or secret
// error" rehearses: with a key secret it cannot read, every request is
// answered 503 secret_unavailable; an unknown name is a usage error.
func TestDevFunction(t *testing.T) {
	bin := servoBinary(t)
	if out, err := exec.Command(bin, "dev", "function", "ServoNope").CombinedOutput(); err == nil || !strings.Contains(string(out), "name one of ServoAPI") {
		t.Fatalf("an unknown function: %v %s", err, out)
	}
	addr := freeAddr(t)
	fn := exec.Command(bin, "dev", "function", "ServoAPI", "--addr", addr)
	fn.Env = append(withoutEmulatorEnv(os.Environ()), "SERVO_PROJECT="+emulatortest.ProjectID(t), "SERVO_CALLBACK_BASE_URL=http://127.0.0.1:1",
		"SERVO_TOKEN_KEYS=", "SERVO_TOKEN_KEYS_FILE=", "SERVO_TOKEN_KEYS_SECRET=projects/servo-test/secrets/servo-token-keys",
		"GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/servo-test-credentials.json")
	if err := fn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fn.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- fn.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			fn.Process.Kill()
			t.Error("servo dev function did not stop on SIGINT")
		}
	})
	var res *http.Response
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if res, err = http.Get("http://" + addr + "/v1/health"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("servo dev function never answered: %v", err)
	}
	defer res.Body.Close()
	var body api.Error
	if res.StatusCode != http.StatusServiceUnavailable || json.NewDecoder(res.Body).Decode(&body) != nil || body.Code != api.CodeSecretUnavailable {
		t.Fatalf("GET /v1/health: %d %+v, want 503 %s", res.StatusCode, body, api.CodeSecretUnavailable)
	}
}
