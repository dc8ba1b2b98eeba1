// Package typescriptworker_test drives the TypeScript example worker
// (worker.mjs, on the TypeScript SDK in sdk/typescript) through the real
// local stack (package devstack), the worker a separate node process.
package typescriptworker_test

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/sdkbuild"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// startWorker runs worker.mjs in push mode on a free port.
func startWorker(t *testing.T, node string, logs *servotest.Buffer) string {
	t.Helper()
	cmd := exec.Command(node, "worker.mjs")
	cmd.Env = append(os.Environ(), "PORT=0", "HOST=127.0.0.1")
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		return strings.TrimSuffix(strings.TrimPrefix(line, "listening on "), "/") + "/"
	case <-done:
		t.Fatalf("worker.mjs exited at start:\n%s", logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("worker.mjs did not start:\n%s", logs)
	}
	return ""
}

// TestTypeScriptWorkerEndToEnd: the example succeeds, fails once and
// resumes from its checkpoint, is cancelled while running, and fails
// DATA_QUALITY without a retry.
func TestTypeScriptWorkerEndToEnd(t *testing.T) {
	servotest.TrackFiles(t, ".", ".mjs")
	node := sdkbuild.TypeScript(t)
	logs := &servotest.Buffer{}
	url := startWorker(t, node, logs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker.mjs logs:\n%s", logs)
		}
	})
	s := stacktest.Start(t, devstack.Options{
		SweepEvery: 100 * time.Millisecond, Workers: map[string]string{"ts": url},
	})
	do := func(t *testing.T, method, path string, body any) (int, []byte) {
		return stacktest.NewAPI(t, s).Do(method, path, body)
	}
	submit := func(t *testing.T, key string, payload map[string]any) string {
		return stacktest.NewAPI(t, s).Submit(map[string]any{
			"tenantId": "acme", "workspaceId": "ws", "taskKey": key, "worker": "ts", "payload": payload,
			"heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 2500, "cancelGracePeriodMs": 3000,
			"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
		}).TaskID
	}
	waitFor := func(t *testing.T, id string, ok func(api.Task) bool) api.Task {
		return stacktest.NewAPI(t, s).WaitFor(id, "the subtest's condition", ok)
	}
	state := func(s api.State) func(api.Task) bool { return func(v api.Task) bool { return v.State == s } }
	type output struct {
		Partitions, Processed, ResumedFrom, Attempt int
		Digest                                      string
	}
	outputOf := func(t *testing.T, a api.Attempt) output { return stacktest.AttemptOutput[output](t, a) }

	t.Run("succeeds", func(t *testing.T) {
		t.Parallel()
		v := waitFor(t, submit(t, "ok", map[string]any{"partitions": 4, "partitionMs": 20}), state(api.Succeeded))
		if o := outputOf(t, v.Attempts[0]); len(v.Attempts) != 1 || o.Processed != 4 || o.Attempt != 1 || len(o.Digest) != 16 {
			t.Fatalf("attempts %d, output %+v", len(v.Attempts), o)
		}
	})
	t.Run("fails once and resumes from its checkpoint", func(t *testing.T) {
		t.Parallel()
		v := waitFor(t, submit(t, "retry", map[string]any{"partitions": 6, "partitionMs": 20, "failAttempts": 1}), state(api.Succeeded))
		if len(v.Attempts) != 2 || v.Attempts[0].Error == nil || v.Attempts[0].Error.Category != api.CategoryInfrastructure ||
			string(v.Attempts[0].Checkpoint) != `{"nextPartition":3}` {
			t.Fatalf("attempts %+v", v.Attempts)
		}
		if o := outputOf(t, v.Attempts[1]); o.Attempt != 2 || o.ResumedFrom != 3 || o.Processed != 3 {
			t.Fatalf("attempt 2 output %+v", o)
		}
	})
	t.Run("cancelled while running", func(t *testing.T) {
		t.Parallel()
		id := submit(t, "cancel", map[string]any{"partitions": 300, "partitionMs": 100})
		waitFor(t, id, func(v api.Task) bool {
			return v.State == api.Running && len(v.Attempts) > 0 && len(v.Attempts[len(v.Attempts)-1].Checkpoint) > 0
		})
		if status, out := do(t, "POST", "/v1/tasks/"+id+"/cancel", map[string]any{"reason": "user_requested"}); status != http.StatusOK {
			t.Fatalf("cancel: %d %s", status, out)
		}
		v := waitFor(t, id, state(api.Cancelled))
		a := v.Attempts[len(v.Attempts)-1]
		if a.Outcome != api.OutcomeCancelled || a.CancelledDuringPhase != "processing" || !bytes.Contains(a.PartialProgress, []byte("nextPartition")) {
			t.Fatalf("attempt %+v", a)
		}
	})
	t.Run("DATA_QUALITY is not retried", func(t *testing.T) {
		t.Parallel()
		v := waitFor(t, submit(t, "invalid", map[string]any{"invalid": true}), state(api.Failed))
		if len(v.Attempts) != 1 || v.Attempts[0].Error == nil || v.Attempts[0].Error.Category != api.CategoryDataQuality {
			t.Fatalf("reason %s attempts %+v", v.Reason, v.Attempts)
		}
	})
}
