package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
)

// TestServoDevBinary runs what a newcomer runs: the built servo binary's
// dev command as a subprocess (it starts its own emulators), then the
// client commands against it, then Ctrl-C.
func TestServoDevBinary(t *testing.T) {
	bin := servoBinary(t)
	addr := freeAddr(t)

	dev := exec.Command(bin, "dev", "--addr", addr, "--no-demo", "--project", "servo-e2e", "--log", filepath.Join(t.TempDir(), "dev.log"))
	dev.Env = withoutEmulatorEnv(os.Environ())
	stdout, _ := dev.StdoutPipe()
	var stderr bytes.Buffer
	dev.Stderr = &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	stopped := false
	defer func() {
		if !stopped {
			dev.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				dev.Process.Kill()
			}
		}
	}()
	ready := make(chan string, 1)
	var exports []string
	var stray []string // stdout lines before the ready line: not Servo's
	go func() {
		sc := bufio.NewScanner(stdout)
		isReady := false
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "servo dev ready") {
				isReady = true
				ready <- line
			}
			if !isReady {
				stray = append(stray, line)
			}
			if strings.HasPrefix(line, "export ") {
				exports = append(exports, line)
			}
		}
		exited <- dev.Wait()
	}()
	select {
	case line := <-ready:
		if !strings.Contains(line, "http://"+addr) {
			t.Fatalf("ready line %q does not name the API", line)
		}
		if !strings.Contains(line, "dashboard http://"+addr+"/ui/") {
			t.Fatalf("ready line %q does not name the dashboard", line)
		}
		if len(stray) > 0 {
			t.Errorf("servo dev printed lines that are not its own: %q", stray)
		}
	case err := <-exited:
		t.Fatalf("servo dev exited before it was ready: %v\n%s", err, stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("servo dev not ready\n%s", stderr.String())
	}
	base := "http://" + addr
	res, err := http.Get(base + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", res, err)
	}
	res.Body.Close()

	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, append(args, "--api", base)...)
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("submit", "--json", "--tenant", "acme", "--workspace", "ws", "--key", "k1", "--worker", "example",
		"--payload", `{"partitions": 3, "partitionMs": 50}`, "--max-attempts", "2", "--retry-backoff", "1s", "--retry-max-backoff", "5s",
		"--retry-category", "CONFLICT:attempts=8,backoff=2s,coefficient=3", "--retry-category", "TIMEOUT:max-backoff=7s", "--max-total-attempts", "9", "--priority", "4")
	var sub api.SubmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.TaskID == "" {
		t.Fatalf("submit: exit %d, %s", code, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code = run("get", sub.TaskID, "--json")
		var v api.Task
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("get: exit %d, %s", code, out)
		}
		if v.State == api.Succeeded {
			if r := v.Retry; r.MaxAttempts != 2 || r.InitialBackoffMs != 1000 || r.MaxBackoffMs != 5000 || r.MaxTotalAttempts != 9 ||
				r.ByCategory[api.CategoryConflict] != (api.CategoryRetry{MaxAttempts: 8, InitialBackoffMs: 2000, BackoffCoefficient: 3, MaxBackoffMs: 60000}) ||
				r.ByCategory[api.CategoryTimeout] != (api.CategoryRetry{MaxAttempts: 2, InitialBackoffMs: 1000, BackoffCoefficient: 2, MaxBackoffMs: 7000}) {
				t.Fatalf("the retry flags were not sent: %+v", r)
			}
			if v.Priority != 4 {
				t.Fatalf("--priority 4 was not sent: priority %d", v.Priority)
			}
			if out, _ := run("get", sub.TaskID); !strings.Contains(out, "CONFLICT 8 attempts, 2s ×3 up to 1m0s; TIMEOUT 2 attempts, 1s ×2 up to 7s; at most 9 attempts in all") {
				t.Fatalf("servo get does not show the per-category policies:\n%s", out)
			}
			break
		}
		if v.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("task is %s (%s)", v.State, v.Reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A delayed start: QUEUED with its scheduledAt, cancelled before it.
	before := time.Now()
	out, code = run("submit", "--json", "--tenant", "acme", "--workspace", "ws", "--key", "later", "--worker", "example", "--start-in", "1h")
	var later api.SubmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &later) != nil || later.State != api.Queued {
		t.Fatalf("submit --start-in 1h: exit %d, %s", code, out)
	}
	out, code = run("get", later.TaskID, "--json")
	var lv api.Task
	if code != 0 || json.Unmarshal([]byte(out), &lv) != nil || lv.State != api.Queued || lv.ScheduledAt == nil ||
		lv.ScheduledAt.Before(before.Add(time.Hour-time.Second)) || lv.ScheduledAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("get of the delayed task: exit %d, %s", code, out)
	}
	if out, code := run("cancel", later.TaskID); code != 0 {
		t.Fatalf("cancel before the start: exit %d, %s", code, out)
	}
	if _, code := run("submit", "--tenant", "acme", "--workspace", "ws", "--key", "k", "--worker", "example", "--retry-category", "CONFLICT:tries=3"); code != exitUsage {
		t.Fatalf("--retry-category with an unknown part: exit %d", code)
	}
	if _, code := run("submit", "--tenant", "acme", "--workspace", "ws", "--key", "k", "--worker", "example", "--start-in", "1h", "--start-at", "2030-01-01T00:00:00Z"); code != exitUsage {
		t.Fatalf("both --start-in and --start-at: exit %d", code)
	}
	if _, code := run("get", "task_01HGW5N7XHJM4GX29KZRXQP6N9"); code != exitNotFound {
		t.Fatalf("get of an unknown task: exit %d, want %d", code, exitNotFound)
	}
	if _, code := run("cancel", sub.TaskID); code != exitConflict {
		t.Fatalf("cancel of a finished task: exit %d, want %d", code, exitConflict)
	}
	if out, code := run("watch", sub.TaskID); code != 0 || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("watch: exit %d, %s", code, out)
	}

	// The runbook's rehearsal of a frozen Firestore: servo dev freeze
	// stops the emulator servo dev started (the health read then fails
	// within its 5 s bound), servo dev thaw brings it back.
	health := func() int {
		c := http.Client{Timeout: 30 * time.Second}
		res, err := c.Get(base + "/v1/health")
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if out, code := run("dev", "freeze", "firestore"); code != 0 || !strings.Contains(out, "firestore emulator at ") || !strings.Contains(out, "frozen") {
		t.Fatalf("dev freeze firestore: exit %d, %s", code, out)
	}
	if got := health(); got != http.StatusServiceUnavailable {
		run("dev", "thaw", "firestore")
		t.Fatalf("health with Firestore frozen: %d, want 503", got)
	}
	if out, code := run("dev", "thaw", "firestore"); code != 0 || !strings.Contains(out, "thawed") {
		t.Fatalf("dev thaw firestore: exit %d, %s", code, out)
	}
	if got := health(); got != http.StatusOK {
		t.Fatalf("health after the thaw: %d, want 200", got)
	}

	// Ctrl-C stops everything, emulators included.
	stopped = true
	dev.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("servo dev exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		dev.Process.Kill()
		t.Fatal("servo dev did not stop on SIGINT")
	}
	if _, code := run("dev", "freeze", "firestore"); code == 0 {
		t.Fatal("dev freeze found the stopped servo dev's session")
	}
	for _, e := range exports {
		if host, ok := strings.CutPrefix(e, "export FIRESTORE_EMULATOR_HOST="); ok {
			if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
				c.Close()
				t.Fatalf("the Firestore emulator at %s still answers after Ctrl-C", host)
			}
		}
	}
}

func withoutEmulatorEnv(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "FIRESTORE_EMULATOR_HOST=") && !strings.HasPrefix(e, "PUBSUB_EMULATOR_HOST=") {
			out = append(out, e)
		}
	}
	return out
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
	}{
		{nil, exitUsage},
		{[]string{"frobnicate"}, exitUsage},
		{[]string{"get"}, exitUsage},
		{[]string{"get", "a", "b", "--api", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"watch", "--api", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"list", "--state", "NOPE", "--api", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"get", "x"}, exitUsage}, // no API configured
		{[]string{"get", "x", "--api", "http://127.0.0.1:1"}, exitFailure},
		{[]string{"events"}, exitUsage},
	}
	t.Setenv(client.APIEnv, "")
	for _, c := range cases {
		if got := report(run(context.Background(), c.args)); got != c.code {
			t.Errorf("servo %v: exit %d, want %d", c.args, got, c.code)
		}
	}
}

func TestWatcherPlainOutput(t *testing.T) {
	var buf bytes.Buffer
	w := newWatcher(&buf, false, false)
	p := 40
	tk := api.Task{TaskID: "task_1", State: api.Running, Attempt: 1, Attempts: []api.Attempt{{Attempt: 1, ProgressPct: &p, Message: "partition 4"}}}
	w.render([]api.Task{tk})
	w.render([]api.Task{tk}) // unchanged: no new line
	tk.State = api.Succeeded
	w.render([]api.Task{tk})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " 40% partition 4") || !strings.Contains(lines[1], "SUCCEEDED") || !strings.Contains(lines[1], "100%") {
		t.Fatalf("output:\n%s", buf.String())
	}
}
