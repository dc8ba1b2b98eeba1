package emulatortest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/emulator"
)

// Helper runs of this test binary: helperEnv names what TestHelper does,
// kindsEnv which emulators TestMain starts.
const (
	helperEnv = "SERVO_EMULATORTEST_HELPER"
	kindsEnv  = "SERVO_EMULATORTEST_KINDS"
)

func TestMain(m *testing.M) {
	kinds := []emulator.Kind{emulator.Firestore, emulator.PubSub}
	if s := os.Getenv(kindsEnv); s != "" {
		kinds = nil
		for _, k := range strings.Split(s, ",") {
			kinds = append(kinds, emulator.Kind(k))
		}
	}
	Main(m, kinds...)
}

func TestHostsAndEnv(t *testing.T) {
	tests := []struct {
		kind emulator.Kind
		host func(testing.TB) string
		env  string
	}{
		{emulator.Firestore, FirestoreHost, "FIRESTORE_EMULATOR_HOST"},
		{emulator.PubSub, PubSubHost, "PUBSUB_EMULATOR_HOST"},
	}
	for _, tt := range tests {
		host := tt.host(t)
		if got := os.Getenv(tt.env); got != host {
			t.Errorf("%s = %q, want %q", tt.env, got, host)
		}
		resp, err := http.Get("http://" + host + "/")
		if err != nil {
			t.Errorf("%s emulator: %v", tt.kind, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s emulator: GET / = %s", tt.kind, resp.Status)
		}
	}
}

// fakeTB records Fatalf instead of failing the real test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestHostFailsWithoutEmulator(t *testing.T) {
	running.mu.Lock()
	saved := running.procs
	running.procs = nil
	running.mu.Unlock()
	defer func() {
		running.mu.Lock()
		running.procs = saved
		running.mu.Unlock()
	}()

	for name, host := range map[string]func(testing.TB) string{"firestore": FirestoreHost, "pubsub": PubSubHost} {
		f := &fakeTB{TB: t}
		done := make(chan string)
		go func() {
			defer close(done)
			done <- host(f)
		}()
		if got := <-done; got != "" || !strings.Contains(f.fatal, name) || !strings.Contains(f.fatal, "emulatortest.Main") {
			t.Errorf("%s: host = %q, Fatalf(%q); want a failure naming the emulator and Main", name, got, f.fatal)
		}
	}
}

var projectIDShape = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

func TestProjectID(t *testing.T) {
	seen := map[string]bool{}
	names := []string{"short", strings.Repeat("a_long_test_name_", 6), "Ünïcode and spaces", "same", "same"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for range 100 {
				id := ProjectID(t)
				if !projectIDShape.MatchString(id) || len(id) > 30 {
					t.Fatalf("ProjectID = %q, not a valid project id", id)
				}
				if seen[id] {
					t.Fatalf("ProjectID %q returned twice", id)
				}
				seen[id] = true
			}
		})
	}
}

func TestFirestoreIsolation(t *testing.T) {
	ctx := context.Background()
	p1, p2 := ProjectID(t), ProjectID(t)
	c1, err := firestore.NewClient(ctx, p1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := firestore.NewClient(ctx, p2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	doc := "tasks/task_1"
	if _, err := c1.Doc(doc).Set(ctx, map[string]any{"state": "RUNNING"}); err != nil {
		t.Fatalf("write in %s: %v", p1, err)
	}
	if _, err := c1.Doc(doc).Get(ctx); err != nil {
		t.Errorf("read back in %s: %v", p1, err)
	}
	if _, err := c2.Doc(doc).Get(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("read in %s = %v, want NotFound", p2, err)
	}
	if err := emulator.ResetFirestore(ctx, FirestoreHost(t), p1); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Doc(doc).Get(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("after reset, read in %s = %v, want NotFound", p1, err)
	}
}

func TestPubSubClient(t *testing.T) {
	ctx := context.Background()
	project := ProjectID(t)
	c, err := pubsub.NewClient(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := "projects/" + project + "/topics/events"
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if _, err := c.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: name}); err != nil {
		t.Errorf("GetTopic: %v", err)
	}
}

// TestHelper is what a helper run of this binary does once Main has
// started its emulators: report their hosts, then behave as helperEnv says
// (fail and panic only once the parent has seen the emulators answer and
// says go on standard input).
func TestHelper(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // not a helper run
	}
	running.mu.Lock()
	var hosts []string
	for _, p := range running.procs {
		hosts = append(hosts, p.Host)
	}
	running.mu.Unlock()
	fmt.Printf("READY %s\n", strings.Join(hosts, " "))
	if mode != "block" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			t.Fatalf("helper: waiting for go: %v", err)
		}
	}
	switch mode {
	case "fail":
		t.Error("failing on purpose")
	case "panic":
		panic("panicking on purpose")
	case "block":
		select {}
	}
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // a line on it lets a fail or panic helper go on
	stderr *bytes.Buffer
	hosts  []string
	exited chan error
}

// startHelper runs this test binary with env added, and waits for its
// READY line.
func startHelper(t *testing.T, env ...string) *helper {
	t.Helper()
	h := &helper{stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestHelper$", "-test.timeout=5m")
	h.cmd.Env = append(os.Environ(), env...)
	h.cmd.Stderr = h.stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan []string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if rest, ok := strings.CutPrefix(s.Text(), "READY "); ok {
				ready <- strings.Fields(rest)
			}
		}
		h.exited <- h.cmd.Wait()
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill() // our own helper, by pid
	})
	select {
	case h.hosts = <-ready:
		return h
	case err := <-h.exited:
		t.Fatalf("helper exited before it was ready (%v); stderr:\n%s", err, h.stderr)
	case <-time.After(emulator.StartTimeout + 30*time.Second):
		t.Fatalf("helper not ready in time; stderr:\n%s", h.stderr)
	}
	return nil
}

func (h *helper) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-h.exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("helper: %v, want a non-zero exit", err)
		}
		return ee.ExitCode()
	case <-time.After(30 * time.Second):
		t.Fatalf("helper did not exit; stderr:\n%s", h.stderr)
	}
	return 0
}

func answers(host string) bool {
	c, err := net.DialTimeout("tcp", host, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func waitSilent(t *testing.T, hosts []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, host := range hosts {
		for answers(host) {
			if time.Now().After(deadline) {
				t.Fatalf("emulator on %s still answers %v after the helper exited", host, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestMainStopsEmulators runs helper binaries that end in different ways
// and checks their emulators are gone. Where Main's own clean-up runs
// (failure, signals) they must be gone by the time the binary has exited;
// after a panic in a test, which ends the binary without running Main's
// clean-up, the watchdogs must remove them within seconds.
func TestMainStopsEmulators(t *testing.T) {
	tests := []struct {
		name     string
		mode     string
		kinds    string
		signal   syscall.Signal // sent once the helper is ready
		wantCode int
		wantErr  string
		grace    time.Duration
	}{
		{name: "test fails", mode: "fail", kinds: "firestore", wantCode: 1, grace: time.Second},
		{name: "SIGINT", mode: "block", kinds: "firestore,pubsub", signal: syscall.SIGINT, wantCode: 130, wantErr: "interrupt: stopping emulators", grace: time.Second},
		{name: "SIGTERM", mode: "block", kinds: "pubsub", signal: syscall.SIGTERM, wantCode: 143, wantErr: "terminated: stopping emulators", grace: time.Second},
		{name: "test panics", mode: "panic", kinds: "firestore", wantCode: 2, wantErr: "panicking on purpose", grace: 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := startHelper(t, helperEnv+"="+tt.mode, kindsEnv+"="+tt.kinds)
			if want := len(strings.Split(tt.kinds, ",")); len(h.hosts) != want {
				t.Fatalf("helper reports %d emulators %v, want %d", len(h.hosts), h.hosts, want)
			}
			for _, host := range h.hosts {
				if !answers(host) {
					t.Fatalf("emulator on %s does not answer", host)
				}
			}
			if tt.signal != 0 {
				if err := h.cmd.Process.Signal(tt.signal); err != nil {
					t.Fatal(err)
				}
			} else if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			if code := h.wait(t); code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.wantCode, h.stderr)
			}
			if !strings.Contains(h.stderr.String(), tt.wantErr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantErr, h.stderr)
			}
			waitSilent(t, h.hosts, tt.grace)
		})
	}
}

func TestMainFailsWithoutTools(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
	}
	for _, want := range []string{
		"emulatortest: start",
		"gcloud not found on PATH", "gcloud components install cloud-firestore-emulator pubsub-emulator beta",
		"java not found on PATH", "apt-get install default-jre-headless",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not contain %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "SKIP") || strings.Contains(string(out), "PASS") {
		t.Errorf("tests ran or skipped without emulators:\n%s", out)
	}
}
