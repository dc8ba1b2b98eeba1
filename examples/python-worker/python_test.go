// Package pythonworker_test drives the Python example worker (worker.py,
// on the Python SDK in sdk/python) through the real local stack: the
// Firestore and Pub/Sub emulators, Servo's Cloud Tasks emulator, the API,
// callbacks and sweeper (package devstack), and the worker as a separate
// python3 process serving with the standard library.
package pythonworker_test

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/servotest"
	"github.com/servo-dev/servo/internal/servotest/stacktest"
)

func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore, emulator.PubSub) }

// python3 returns the interpreter, failing (never skipping) when it is
// missing or older than 3.10.
func python3(t *testing.T) string {
	t.Helper()
	// The worker and the SDK are inputs of these tests: go test reruns
	// them, rather than answer from its cache, when one changes.
	servotest.TrackFiles(t, ".", ".py")
	servotest.TrackFiles(t, "../../sdk/python/servo_worker", ".py")
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not installed: the Python example worker needs it; install the Debian package python3 (apt-get install python3), Python >= 3.10")
	}
	if out, err := exec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 10))").CombinedOutput(); err != nil {
		t.Fatalf("%s is older than 3.10 (%v %s): install the Debian package python3 from a release that ships Python >= 3.10", p, err, out)
	}
	return p
}

// pyWorker is the example worker running as a python3 process.
type pyWorker struct {
	cmd  *exec.Cmd
	port string
	logs *servotest.Buffer
	done chan struct{}
}

// startWorker starts worker.py on port ("0": a free one) and waits for it
// to say where it listens.
func startWorker(t *testing.T, py, port string, logs *servotest.Buffer) *pyWorker {
	t.Helper()
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "worker.py")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk, "PORT="+port, "HOST=127.0.0.1", "PYTHONUNBUFFERED=1", "K_SERVICE=", "LOG_LEVEL=DEBUG")
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &pyWorker{cmd: cmd, logs: logs, done: make(chan struct{})}
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
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() { w.stop(syscall.SIGTERM) })
	select {
	case line := <-lines:
		u := strings.TrimPrefix(line, "listening on ")
		w.port = strings.TrimSuffix(u[strings.LastIndex(u, ":")+1:], "/")
	case <-w.done:
		t.Fatalf("worker.py exited at start:\n%s", logs)
	// A timeout, not a figure: a loaded machine has been seen to take
	// tens of seconds to start any Python process.
	case <-time.After(90 * time.Second):
		t.Fatalf("worker.py did not start:\n%s", logs)
	}
	return w
}

func (w *pyWorker) stop(sig syscall.Signal) {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(sig)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// env is a test's client of the stack's API.
type env struct{ stacktest.API }

func newEnv(t *testing.T, s *devstack.Stack) *env { return &env{stacktest.NewAPI(t, s)} }

// submit posts a task for the Python worker with fast timers.
func (e *env) submit(key string, payload map[string]any) string {
	e.T.Helper()
	return e.Submit(map[string]any{
		"tenantId": "acme", "workspaceId": "ws", "taskKey": key, "worker": "py", "payload": payload,
		"heartbeatIntervalMs": 200, "heartbeatTimeoutMs": 2500, "cancelGracePeriodMs": 3000,
		"retry": map[string]any{"maxAttempts": 3, "initialBackoffMs": 100, "maxBackoffMs": 200},
	}).TaskID
}

// checkpointed: the running attempt has stored a checkpoint.
func checkpointed(v api.Task) bool {
	if v.State != api.Running || len(v.Attempts) == 0 {
		return false
	}
	return len(v.Attempts[len(v.Attempts)-1].Checkpoint) > 0
}

type output struct {
	Partitions  int    `json:"partitions"`
	Processed   int    `json:"processed"`
	ResumedFrom int    `json:"resumedFrom"`
	Attempt     int    `json:"attempt"`
	Digest      string `json:"digest"`
}

func outputOf(t *testing.T, a api.Attempt) output {
	t.Helper()
	return stacktest.AttemptOutput[output](t, a)
}

// TestPythonWorkerEndToEnd runs the Python example worker against the real
// stack: success, a failure retried from its checkpoint, a cancel, a
// DATA_QUALITY failure not retried, and a worker killed mid-task whose
// attempt Servo retries.
func TestPythonWorkerEndToEnd(t *testing.T) {
	py := python3(t)
	logs := &servotest.Buffer{}
	w := startWorker(t, py, "0", logs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker.py logs:\n%s", logs)
		}
	})
	s := stacktest.Start(t, devstack.Options{
		SweepEvery: 100 * time.Millisecond, Workers: map[string]string{"py": "http://127.0.0.1:" + w.port + "/"},
	})
	e := newEnv(t, s)

	t.Run("group", func(t *testing.T) {
		t.Run("succeeds", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s)
			id := e.submit("ok", map[string]any{"partitions": 4, "partitionMs": 20})
			v := e.WaitState(id, api.Succeeded)
			if len(v.Attempts) != 1 || v.Attempts[0].Outcome != api.OutcomeSucceeded {
				t.Fatalf("attempts %s", stacktest.Attempts(v))
			}
			o := outputOf(t, v.Attempts[0])
			if o != (output{Partitions: 4, Processed: 4, ResumedFrom: 0, Attempt: 1, Digest: o.Digest}) || len(o.Digest) != 16 {
				t.Fatalf("output %+v", o)
			}
		})
		t.Run("fails once and resumes from its checkpoint", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s)
			id := e.submit("retry", map[string]any{"partitions": 6, "partitionMs": 20, "failAttempts": 1})
			v := e.WaitState(id, api.Succeeded)
			if len(v.Attempts) != 2 {
				t.Fatalf("want 2 attempts, got %s", stacktest.Attempts(v))
			}
			a1, a2 := v.Attempts[0], v.Attempts[1]
			if a1.Outcome != api.OutcomeFailed || a1.Error == nil || a1.Error.Category != api.CategoryInfrastructure {
				t.Fatalf("attempt 1: %s", stacktest.Attempts(v))
			}
			if string(a1.Checkpoint) != `{"nextPartition":3}` {
				t.Fatalf("attempt 1 checkpoint %s, want {\"nextPartition\":3} (stored before completed)", a1.Checkpoint)
			}
			// Attempt 2 got resumeFrom and started at partition 3.
			if o := outputOf(t, a2); a2.Outcome != api.OutcomeSucceeded || o.Attempt != 2 || o.ResumedFrom != 3 || o.Processed != 3 {
				t.Fatalf("attempt 2: %s output %+v", stacktest.Attempts(v), o)
			}
		})
		t.Run("cancelled while running", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s)
			id := e.submit("cancel", map[string]any{"partitions": 200, "partitionMs": 100})
			e.WaitFor(id, "a stored checkpoint", checkpointed)
			if status, out := e.Do("POST", "/v1/tasks/"+id+"/cancel", map[string]any{"reason": "user_requested"}); status != http.StatusOK {
				t.Fatalf("cancel: %d %s", status, out)
			}
			v := e.WaitState(id, api.Cancelled)
			a := v.Attempts[len(v.Attempts)-1]
			if len(v.Attempts) != 1 || a.Outcome != api.OutcomeCancelled || a.CancelledDuringPhase != "processing" || !bytes.Contains(a.PartialProgress, []byte("nextPartition")) {
				t.Fatalf("attempts %s phase %q partial %s", stacktest.Attempts(v), a.CancelledDuringPhase, a.PartialProgress)
			}
		})
		t.Run("DATA_QUALITY is not retried", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s)
			id := e.submit("invalid", map[string]any{"partitions": 3, "invalid": true})
			v := e.WaitState(id, api.Failed)
			if v.Reason != "NON_RETRYABLE" || len(v.Attempts) != 1 || v.Attempts[0].Error == nil || v.Attempts[0].Error.Category != api.CategoryDataQuality {
				t.Fatalf("reason %s, attempts %s", v.Reason, stacktest.Attempts(v))
			}
		})
	})
	if t.Failed() {
		return
	}

	t.Run("worker killed mid-task is retried", func(t *testing.T) {
		id := e.submit("killed", map[string]any{"partitions": 30, "partitionMs": 100})
		e.WaitFor(id, "a stored checkpoint", checkpointed)
		w.stop(syscall.SIGKILL)
		// A new process on the same address: Servo's sweeper finds the
		// attempt's lease expired and the retry reaches it.
		startWorker(t, py, w.port, logs)
		v := e.WaitState(id, api.Succeeded)
		if len(v.Attempts) != 2 || v.Attempts[0].Outcome != api.OutcomeZombie || v.Attempts[1].Outcome != api.OutcomeSucceeded {
			t.Fatalf("attempts %s", stacktest.Attempts(v))
		}
		if v.Attempts[0].WorkerID == v.Attempts[1].WorkerID {
			t.Fatalf("attempt 2 ran in the killed process? %s", stacktest.Attempts(v))
		}
		if o := outputOf(t, v.Attempts[1]); o.Attempt != 2 || o.ResumedFrom == 0 || o.ResumedFrom+o.Processed != 30 {
			t.Fatalf("attempt 2 did not resume from the killed attempt's checkpoint: %+v", o)
		}
	})
}
