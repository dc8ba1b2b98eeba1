package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildOut  []byte
)

// servoBinary builds the servo command once per test binary.
func servoBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "servo-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "servo")
		buildOut, buildErr = exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, buildOut)
	}
	return builtBin
}

// TestServoDevUsesRunningEmulators starts the official emulators itself,
// runs `servo dev --firestore --pubsub` against them, runs a task through,
// finds it in that Firestore, and checks that Ctrl-C leaves the emulators
// running (they are the user's, not servo dev's).
func TestServoDevUsesRunningEmulators(t *testing.T) {
	ctx := context.Background()
	fs, err := emulator.Start(ctx, emulator.Firestore)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Stop()
	ps, err := emulator.Start(ctx, emulator.PubSub)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Stop()

	bin := servoBinary(t)
	addr := freeAddr(t)
	const project = "servo-reuse"
	dev := exec.Command(bin, "dev", "--addr", addr, "--no-demo", "--project", project,
		"--firestore", fs.Host, "--pubsub", ps.Host, "--log", filepath.Join(t.TempDir(), "dev.log"))
	dev.Env = withoutEmulatorEnv(os.Environ())
	stdout, _ := dev.StdoutPipe()
	var stderr bytes.Buffer
	dev.Stderr = &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	ready, exited := make(chan struct{}), make(chan error, 1)
	var exports []string
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "export ") {
				exports = append(exports, line)
			}
			if line == "servo dev: running; Ctrl-C to stop" {
				close(ready)
			}
		}
		exited <- dev.Wait()
	}()
	stopped := false
	defer func() {
		if !stopped {
			dev.Process.Kill()
			<-exited
		}
	}()
	select {
	case <-ready:
	case err := <-exited:
		stopped = true
		t.Fatalf("servo dev exited: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("servo dev not ready\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "starting the Firestore") || strings.Contains(stderr.String(), "Pub/Sub emulator,") {
		t.Fatalf("servo dev says it starts emulators it was given:\n%s", stderr.String())
	}
	for _, want := range []string{"export FIRESTORE_EMULATOR_HOST=" + fs.Host, "export PUBSUB_EMULATOR_HOST=" + ps.Host} {
		if !containsLine(exports, want) {
			t.Fatalf("exports %q lack %q", exports, want)
		}
	}

	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	sub, _, err := c.Submit(ctx, []byte(`{"tenantId":"acme","workspaceId":"ws","taskKey":"k","worker":"example","payload":{"partitions":2,"partitionMs":20}}`))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, _, err := c.Get(ctx, sub.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.Succeeded {
			break
		}
		if got.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("task %s is %s (%s)", sub.TaskID, got.State, got.Reason)
		}
		time.Sleep(100 * time.Millisecond)
	}

	stopped = true
	dev.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("servo dev exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		dev.Process.Kill()
		t.Fatal("servo dev did not stop on SIGINT")
	}
	// The emulators outlive servo dev, and the task is in the given Firestore.
	for _, p := range []*emulator.Process{fs, ps} {
		conn, err := net.DialTimeout("tcp", p.Host, 2*time.Second)
		if err != nil {
			t.Fatalf("the %s emulator at %s stopped with servo dev: %v", p.Kind, p.Host, err)
		}
		conn.Close()
	}
	t.Setenv(store.EmulatorHostEnv, fs.Host)
	st, err := store.New(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.GetTask(ctx, sub.TaskID)
	if err != nil || got.State != api.Succeeded {
		t.Fatalf("task in the given Firestore: %+v, %v", got.State, err)
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// TestServoDevEmulatorFlagErrors: an address where no emulator answers, or
// that is not HOST:PORT, stops servo dev at once with the flag's address.
func TestServoDevEmulatorFlagErrors(t *testing.T) {
	bin := servoBinary(t)
	dead := freeAddr(t)
	for _, c := range []struct{ flag, value, want string }{
		{"--firestore", dead, "no firestore emulator answers at " + dead},
		{"--pubsub", "localhost", `the pubsub emulator address "localhost" is not HOST:PORT`},
	} {
		// The other emulator is given too (a dead address), so the command
		// starts none and fails fast.
		args := []string{"dev", "--addr", "127.0.0.1:0", "--no-demo", "--log", filepath.Join(t.TempDir(), "dev.log"), c.flag, c.value}
		if c.flag == "--firestore" {
			args = append(args, "--pubsub", dead)
		} else {
			args = append(args, "--firestore", dead)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = withoutEmulatorEnv(os.Environ())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("servo %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Fatalf("servo %v said:\n%s\nwant it to contain %q", args, out, c.want)
		}
	}
}

// startServoDev runs the servo binary's `dev` with args against the test
// binary's emulators and returns its base URL once it is running; it is
// stopped (SIGINT) when the test ends, and the test fails if it does not
// stop within a minute.
func startServoDev(t *testing.T, args ...string) string {
	t.Helper()
	return startServoDevEnv(t, nil, args...)
}

// startServoDevEnv is startServoDev with env added to its environment.
func startServoDevEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	args = append([]string{"dev", "--addr", addr, "--no-demo", "--project", emulatortest.ProjectID(t),
		"--firestore", emulatortest.FirestoreHost(t), "--pubsub", emulatortest.PubSubHost(t),
		"--log", filepath.Join(t.TempDir(), "dev.log")}, args...)
	dev := exec.Command(servoBinary(t), args...)
	dev.Env = append(withoutEmulatorEnv(os.Environ()), env...)
	stdout, _ := dev.StdoutPipe()
	var stderr bytes.Buffer
	dev.Stderr = &stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	ready, exited := make(chan struct{}), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "servo dev: running; Ctrl-C to stop" {
				close(ready)
			}
		}
		exited <- dev.Wait()
	}()
	t.Cleanup(func() {
		dev.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			dev.Process.Kill()
			<-exited
			t.Error("servo dev did not stop on SIGINT")
		}
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("servo dev exited: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("servo dev not ready\n%s", stderr.String())
	}
	return "http://" + addr
}
