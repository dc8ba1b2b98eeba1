package emulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestKindEnvVar(t *testing.T) {
	tests := []struct {
		kind Kind
		want string
	}{
		{Firestore, "FIRESTORE_EMULATOR_HOST"},
		{PubSub, "PUBSUB_EMULATOR_HOST"},
		{"bigtable", ""},
	}
	for _, tt := range tests {
		if got := tt.kind.EnvVar(); got != tt.want {
			t.Errorf("%s.EnvVar() = %q, want %q", tt.kind, got, tt.want)
		}
		if got := (&Process{Kind: tt.kind}).EnvVar(); got != tt.want {
			t.Errorf("Process{%s}.EnvVar() = %q, want %q", tt.kind, got, tt.want)
		}
	}
}

func TestStartUnknownKind(t *testing.T) {
	if _, err := Start(context.Background(), "bigtable"); err == nil {
		t.Fatal("Start(bigtable) succeeded")
	}
}

// writeScript writes an executable shell script named name into dir.
func writeScript(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestMissingTools(t *testing.T) {
	gcloudHint := []string{"gcloud not found on PATH", "Google Cloud SDK",
		"gcloud components install cloud-firestore-emulator pubsub-emulator beta",
		"apt-get install google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator"}
	javaHint := []string{"java not found on PATH", "Java 11+", "apt-get install default-jre-headless"}
	bashHint := []string{"bash not found on PATH"}
	tests := []struct {
		name     string
		present  []string // fake tools on PATH
		want     []string // texts the error must contain
		dontWant []string
	}{
		{name: "nothing", present: nil, want: append(append(gcloudHint, javaHint...), bashHint...)},
		{name: "no java", present: []string{"gcloud", "bash"}, want: javaHint, dontWant: []string{"gcloud not found", "bash not found"}},
		{name: "no gcloud", present: []string{"java", "bash"}, want: gcloudHint, dontWant: []string{"java not found", "bash not found"}},
		{name: "no bash", present: []string{"gcloud", "java"}, want: bashHint, dontWant: []string{"gcloud not found", "java not found"}},
		{name: "all there", present: []string{"gcloud", "java", "bash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, tool := range tt.present {
				writeScript(t, dir, tool, "exit 1")
			}
			t.Setenv("PATH", dir)
			_, _, _, err := lookTools()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("lookTools: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrMissingTool) {
				t.Fatalf("err = %v, want ErrMissingTool", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not contain %q:\n%v", s, err)
				}
			}
			for _, s := range tt.dontWant {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error contains %q:\n%v", s, err)
				}
			}
			// Start checks the tools before anything else.
			for _, k := range []Kind{Firestore, PubSub} {
				if _, err := Start(context.Background(), k); !errors.Is(err, ErrMissingTool) {
					t.Errorf("Start(%s) err = %v, want ErrMissingTool", k, err)
				}
			}
		})
	}
}

func TestStartReportsOutputTail(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, dir, "gcloud", `echo "fake gcloud: starting $*"; echo "fake gcloud: boom" >&2; exit 3`)
	writeScript(t, dir, "java", "exit 1")
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	p, err := Start(context.Background(), Firestore)
	if err == nil {
		p.Stop()
		t.Fatal("Start succeeded with a failing gcloud")
	}
	for _, s := range []string{"fake gcloud: boom", "emulators firestore start --host-port=127.0.0.1:", "exit status 3"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not contain %q:\n%v", s, err)
		}
	}
	if errors.Is(err, ErrMissingTool) {
		t.Errorf("error wraps ErrMissingTool: %v", err)
	}
	t.Logf("error:\n%v", err)
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Start took %v to notice the emulator exited", d)
	}
}

func TestWaitReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(host)
	tests := []struct {
		name    string
		script  string // the fake emulator; srv answers on its port
		kind    Kind
		wantErr error
		min     time.Duration
		max     time.Duration
	}{
		{name: "marker logged", kind: PubSub, script: "echo '[pubsub] INFO: Server started, listening on " + port + "'; exec sleep 300", max: 2 * time.Second},
		{name: "no marker, keeps running", kind: Firestore, script: "exec sleep 300", min: readySettle, max: readySettle + 2*time.Second},
		{name: "port taken, emulator exits", kind: Firestore, script: "sleep 1; echo 'java.net.BindException: Address already in use'; exit 1", wantErr: errPortInUse, max: 3 * time.Second},
		{name: "port taken, emulator keeps running", kind: PubSub, script: "sleep 1; echo 'Exception in thread \"main\" java.net.BindException: Address already in use'; exec sleep 300", wantErr: errPortInUse, max: 3 * time.Second},
		{name: "marker of another port", kind: PubSub, script: "echo 'listening on 1'; sleep 1; exit 1", wantErr: errExited, max: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := spawn(bashPath(t), []string{"bash", "-c", tt.script})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			p.Kind, p.Host = tt.kind, host
			start := time.Now()
			err = p.waitReady(context.Background())
			d := time.Since(start)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("waitReady = %v, want %v", err, tt.wantErr)
			}
			if d < tt.min || d > tt.max {
				t.Errorf("waitReady took %v, want %v..%v", d, tt.min, tt.max)
			}
		})
	}
}

func TestRingBuffer(t *testing.T) {
	r := newRingBuffer(10)
	for i := range 100 {
		fmt.Fprintf(r, "line %d\n", i)
	}
	if got := string(r.bytes()); got != "8\nline 99\n" {
		t.Errorf("bytes() = %q", got)
	}
	r = newRingBuffer(1000)
	for i := range 100 {
		fmt.Fprintf(r, "line %d\n", i)
	}
	if got, want := r.tail(3, 1000), "line 97\nline 98\nline 99"; got != want {
		t.Errorf("tail(3) = %q, want %q", got, want)
	}
	if got, want := r.tail(3, 10), "\nline 99"; !strings.HasSuffix(got, "line 99") || len(got) > 10 {
		t.Errorf("tail(3, 10) = %q, want at most 10 bytes like %q", got, want)
	}
	if got := newRingBuffer(10).tail(3, 10); got != "(no output)" {
		t.Errorf("empty tail = %q", got)
	}
}

// member is a live (non-zombie) process of a process group.
type member struct {
	pid  int
	cmd  string
	stat string
}

// groupMembers lists the live processes of process group pgid from /proc.
func groupMembers(t *testing.T, pgid int) []member {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("no /proc to inspect process groups: %v", err)
	}
	var ms []member
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state ppid pgrp ...
		if len(f) < 3 || f[0] == "Z" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		ms = append(ms, member{pid: pid, cmd: strings.ReplaceAll(string(cmdline), "\x00", " "), stat: f[0]})
	}
	return ms
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// waitGone waits up to d for process group pgid to have no live member.
func waitGone(t *testing.T, pgid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ms := groupMembers(t, pgid)
		if len(ms) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has %d processes after %v: %+v", pgid, len(ms), d, ms)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// answers reports whether something accepts TCP connections on host.
func answers(host string) bool {
	c, err := net.DialTimeout("tcp", host, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func waitSilent(t *testing.T, host string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for answers(host) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers %v later", host, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stubbornTree is a fake "gcloud" whose children ignore SIGTERM, like a
// JVM that will not shut down.
const stubbornTree = `trap '' TERM; (trap '' TERM; exec sleep 301) & sleep 300 & wait`

func bashPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStopKillsStubbornGroup(t *testing.T) {
	p, err := spawn(bashPath(t), []string{"bash", "-c", stubbornTree})
	if err != nil {
		t.Fatal(err)
	}
	p.Kind, p.Host = "fake", "none"
	waitMembers(t, p.pgid, 3) // bash, two sleeps
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > StopTimeout+3*time.Second {
		t.Errorf("Stop took %v", d)
	}
	waitGone(t, p.pgid, 0)
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// waitMembers waits until process group pgid has at least n live members.
func waitMembers(t *testing.T, pgid, n int) []member {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms := groupMembers(t, pgid)
		if len(ms) >= n {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d has %d processes, want %d: %+v", pgid, len(ms), n, ms)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The helper process: when SERVO_EMULATOR_HELPER is set, TestHelperProcess
// starts what it names, prints "READY <pgid> <host>" and blocks until it is
// killed.
const helperEnv = "SERVO_EMULATOR_HELPER"

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // not a helper run
	}
	var p *Process
	var err error
	switch mode {
	case "fake", "fake-polling-only":
		if mode == "fake-polling-only" {
			pdeathsig = false
		}
		p, err = spawn(bashPath(t), []string{"bash", "-c", stubbornTree})
		if err == nil {
			p.Host = "none"
		}
	case "firestore":
		p, err = Start(context.Background(), Firestore)
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Printf("READY %d %s\n", p.pgid, p.Host)
	select {}
}

// runHelper starts the helper process in mode, waits for its READY line
// and returns the helper and the pgid and host it reported.
func runHelper(t *testing.T, mode string) (*exec.Cmd, int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // our own helper, by pid
		cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	timeout := time.After(StartTimeout + 10*time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("helper %s exited before it was ready", mode)
			}
			if rest, ok := strings.CutPrefix(line, "READY "); ok {
				var pgid int
				var host string
				if _, err := fmt.Sscan(rest, &pgid, &host); err != nil {
					t.Fatalf("bad READY line %q: %v", line, err)
				}
				go func() {
					for range lines { // drain
					}
				}()
				return cmd, pgid, host
			}
			if strings.HasPrefix(line, "ERROR") {
				t.Fatalf("helper %s: %s", mode, line)
			}
		case <-timeout:
			t.Fatalf("helper %s not ready in time", mode)
		}
	}
}

func TestWatchdogKillsGroupWhenParentDies(t *testing.T) {
	for _, mode := range []string{"fake", "fake-polling-only"} {
		t.Run(mode, func(t *testing.T) {
			helper, pgid, _ := runHelper(t, mode)
			ms := waitMembers(t, pgid, 3)
			if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			waitGone(t, pgid, 15*time.Second)
			t.Logf("group of %d processes gone %v after the parent was killed", len(ms), time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestEmulatorDiesWithKilledParent(t *testing.T) {
	helper, pgid, host := runHelper(t, "firestore")
	if !answers(host) {
		t.Fatalf("emulator on %s does not answer", host)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitSilent(t, host, 15*time.Second)
	waitGone(t, pgid, 15*time.Second-time.Since(start))
	t.Logf("emulator gone %v after the parent was killed", time.Since(start).Round(time.Millisecond))
}

// TestStartStop starts and stops each emulator both ways: its jar run
// directly by java (the default: no gcloud or Python process stays) and
// through gcloud (the fallback).
func TestStartStop(t *testing.T) {
	for _, tt := range []struct {
		k      Kind
		launch string
	}{{Firestore, "java"}, {PubSub, "java"}, {Firestore, "gcloud"}, {PubSub, "gcloud"}} {
		k := tt.k
		t.Run(string(k)+"/"+tt.launch, func(t *testing.T) {
			t.Setenv(LaunchEnv, tt.launch)
			direct := tt.launch == "java"
			ctx := context.Background()
			start := time.Now()
			p, err := Start(ctx, k)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer p.Stop()
			t.Logf("started in %v", time.Since(start).Round(time.Millisecond))
			if p.Kind != k || !strings.HasPrefix(p.Host, "127.0.0.1:") {
				t.Errorf("Process = {Kind: %q, Host: %q}", p.Kind, p.Host)
			}
			if p.EnvVar() != k.EnvVar() {
				t.Errorf("EnvVar() = %q", p.EnvVar())
			}
			resp, err := http.Get("http://" + p.Host + "/")
			if err != nil {
				t.Fatalf("GET /: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET / = %s", resp.Status)
			}
			ms := groupMembers(t, p.pgid)
			var java, python bool
			for _, m := range ms {
				java = java || strings.Contains(m.cmd, "java")
				python = python || strings.Contains(m.cmd, "python") || strings.Contains(m.cmd, "gcloud")
			}
			if !java {
				t.Errorf("no java process in the emulator's group: %+v", ms)
			}
			if direct && (python || len(ms) != 1) {
				t.Errorf("direct launch: group %d has %d processes, want java alone: %+v", p.pgid, len(ms), ms)
			}
			if !direct && !python {
				t.Errorf("gcloud launch: no gcloud process in group %d: %+v", p.pgid, ms)
			}
			if !strings.Contains(p.Output(), p.readyMarker()) {
				t.Errorf("output lacks the ready marker %q, so every Start waits %v:\n%s", p.readyMarker(), readySettle, p.Output())
			}
			if k == PubSub && !direct && p.dataDir == "" {
				t.Errorf("pubsub emulator started by gcloud has no private data dir")
			}

			start = time.Now()
			if err := p.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
			if answers(p.Host) {
				t.Errorf("%s still answers after Stop", p.Host)
			}
			waitGone(t, p.pgid, 0)
			for _, m := range ms {
				if alive(m.pid) {
					t.Errorf("process %d (%s) survived Stop", m.pid, m.cmd)
				}
			}
			if p.dataDir != "" {
				if _, err := os.Stat(p.dataDir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("data dir %s not removed: %v", p.dataDir, err)
				}
			}
			if err := p.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			if p.archive != "" {
				// The first direct start writes the class-data sharing
				// archive on exit; Stop moves it into place.
				if _, err := os.Stat(p.archive); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("temporary archive %s left behind: %v", p.archive, err)
				}
				if _, err := os.Stat(p.archive[:strings.LastIndex(p.archive, ".tmp-")]); err != nil {
					t.Errorf("archive not kept: %v", err)
				}
			}
		})
	}
}

// TestStartRetriesTakenPort gives each emulator a port that another
// process holds, as happens when a port is taken between freePort and the
// emulator's bind: Start must notice at once and try another port. The
// Pub/Sub emulator's JVM keeps running after its failed bind, so only its
// output tells.
func TestStartRetriesTakenPort(t *testing.T) {
	for _, k := range []Kind{Firestore, PubSub} {
		t.Run(string(k), func(t *testing.T) {
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			var picks []int
			old := pickPort
			pickPort = func() (int, error) {
				if len(picks) == 0 {
					picks = append(picks, held.Addr().(*net.TCPAddr).Port)
					return picks[0], nil
				}
				port, err := freePort()
				picks = append(picks, port)
				return port, err
			}
			t.Cleanup(func() { pickPort = old })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := Start(ctx, k)
			if err != nil {
				t.Fatalf("Start with the first port taken: %v", err)
			}
			defer p.Stop()
			if len(picks) != 2 {
				t.Errorf("Start chose %d ports (%v), want 2: the taken one, then a free one", len(picks), picks)
			}
			if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(picks[len(picks)-1])); p.Host != want {
				t.Errorf("Host = %s, want %s (the second port)", p.Host, want)
			}
			if !answers(p.Host) {
				t.Errorf("%s does not answer", p.Host)
			}
		})
	}
}

// TestClassDataSharing checks that the first direct start writes an
// archive and the next one uses it.
func TestClassDataSharing(t *testing.T) {
	dir := t.TempDir()
	old := cdsDir
	cdsDir = func() string { return dir }
	t.Cleanup(func() { cdsDir = old })
	t.Setenv(LaunchEnv, "java")
	// A start without an archive writes one on exit; the JVM may fail to
	// on a heavily loaded machine, so up to three starts may try. The
	// start after the archive appeared must use it.
	for i, dumped := 1, false; ; i++ {
		want := "-XX:ArchiveClassesAtExit="
		if dumped {
			want = "-XX:SharedArchiveFile="
		}
		p, err := Start(context.Background(), PubSub)
		if err != nil {
			t.Fatal(err)
		}
		ms := groupMembers(t, p.pgid)
		if len(ms) != 1 || !strings.Contains(ms[0].cmd, want+dir) {
			t.Errorf("start %d: want java with %s%s..., got %+v", i, want, dir, ms)
		}
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		if dumped {
			return
		}
		archives, _ := filepath.Glob(filepath.Join(dir, "*"))
		switch {
		case len(archives) == 1 && strings.HasSuffix(archives[0], ".jsa"):
			dumped = true
		case len(archives) != 0:
			t.Fatalf("after start %d: files %v, want one .jsa archive or none", i, archives)
		case i == 3:
			t.Fatalf("no archive after %d starts; last output:\n%s", i, p.Output())
		default:
			t.Logf("start %d wrote no archive; output:\n%s", i, p.outputTail(10, 2048))
		}
	}
}

func TestResetFirestore(t *testing.T) {
	ctx := context.Background()
	p, err := Start(ctx, Firestore)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer p.Stop()
	t.Setenv(p.EnvVar(), p.Host)

	const project, other = "reset-test", "reset-other"
	clients := map[string]*firestore.Client{}
	for _, proj := range []string{project, other} {
		c, err := firestore.NewClient(ctx, proj)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[proj] = c
		if _, err := c.Collection("tasks").Doc("task_1").Set(ctx, map[string]any{"state": "QUEUED"}); err != nil {
			t.Fatalf("create doc in %s: %v", proj, err)
		}
		if _, err := c.Collection("tasks").Doc("task_1").Get(ctx); err != nil {
			t.Fatalf("read doc in %s: %v", proj, err)
		}
	}

	if err := ResetFirestore(ctx, p.Host, project); err != nil {
		t.Fatalf("ResetFirestore: %v", err)
	}
	_, err = clients[project].Collection("tasks").Doc("task_1").Get(ctx)
	if status.Code(err) != codes.NotFound {
		t.Errorf("after reset, Get = %v, want NotFound", err)
	}
	if _, err := clients[other].Collection("tasks").Doc("task_1").Get(ctx); err != nil {
		t.Errorf("reset of %s touched %s: %v", project, other, err)
	}

	if err := ResetFirestore(ctx, "127.0.0.1:1", project); err == nil {
		t.Errorf("ResetFirestore on a closed port succeeded")
	}
}
