package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator"
)

// devRun is a `servo dev` subprocess that is ready.
type devRun struct {
	cmd     *exec.Cmd
	exited  chan error
	mu      sync.Mutex
	stderr  bytes.Buffer
	exports []string
	began   time.Time // when the process was started
	readyAt time.Time // when it printed its ready line
}

func (d *devRun) Write(b []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.Write(b)
}

func (d *devRun) errText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// export returns the value of an export line servo dev printed.
func (d *devRun) export(name string) string {
	for _, e := range d.exports {
		if v, ok := strings.CutPrefix(e, "export "+name+"="); ok {
			return v
		}
	}
	return ""
}

// startDev runs `servo dev --no-demo args...` with env and waits until it
// says it is running. The test's cleanup kills it if it still runs. Its
// API listens on a port the system picks (--addr 127.0.0.1:0; the address
// is in its SERVO_API export): a port chosen free beforehand could be
// taken, by an emulator servo dev starts or a parallel test, before servo
// dev binds it.
func startDev(t testing.TB, env []string, args ...string) *devRun {
	t.Helper()
	args = append([]string{"dev", "--addr", "127.0.0.1:0", "--no-demo", "--log", filepath.Join(t.TempDir(), "dev.log")}, args...)
	d := &devRun{cmd: exec.Command(servoBinary(t), args...), exited: make(chan error, 1)}
	d.cmd.Env = env
	stdout, _ := d.cmd.StdoutPipe()
	d.cmd.Stderr = d
	d.began = time.Now()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "servo dev ready") {
				d.readyAt = time.Now()
			}
			if strings.HasPrefix(line, "export ") {
				d.exports = append(d.exports, line)
			}
			if line == "servo dev: running; Ctrl-C to stop" {
				close(ready)
			}
		}
		d.exited <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.exited
		}
	})
	select {
	case <-ready:
	case err := <-d.exited:
		d.exited <- err
		t.Fatalf("servo dev exited: %v\n%s", err, d.errText())
	case <-time.After(3 * time.Minute):
		t.Fatalf("servo dev not ready\n%s", d.errText())
	}
	return d
}

// interrupt sends Ctrl-C (SIGINT) and waits for servo dev to exit cleanly.
func (d *devRun) interrupt(t testing.TB) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("servo dev exit: %v\n%s", err, d.errText())
		}
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		t.Fatalf("servo dev did not stop on SIGINT\n%s", d.errText())
	}
}

// proc is a process seen in /proc: pid and start time identify it even if
// the pid is reused.
type proc struct {
	pid, ppid int
	start     string
	cmdline   string
}

// processes returns every live (non-zombie) process of /proc.
func processes(t testing.TB) map[int]proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("no /proc to walk the process tree: %v", err)
	}
	ps := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			ps[pid] = p
		}
	}
	return ps
}

func readProc(pid int) (proc, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session tty tpgid flags ... starttime (19th)
	if len(f) < 20 || f[0] == "Z" {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return proc{pid: pid, ppid: ppid, start: f[19], cmdline: strings.ReplaceAll(string(cmdline), "\x00", " ")}, true
}

// descendants returns every process below root.
func descendants(t testing.TB, root int) []proc {
	t.Helper()
	all := processes(t)
	var out []proc
	below := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for pid, p := range all {
			if below[p.ppid] && !below[pid] {
				below[pid] = true
				out = append(out, p)
				changed = true
			}
		}
	}
	return out
}

// alive reports whether p still runs (the same process, not a reused pid).
func (p proc) alive() bool {
	q, ok := readProc(p.pid)
	return ok && q.start == p.start
}

// TestServoDevProcessTree: once servo dev is ready, its process tree holds
// the two emulators' Java processes and no gcloud (Python) wrapper, and
// Ctrl-C leaves none of its descendants alive.
func TestServoDevProcessTree(t *testing.T) {
	d := startDev(t, withoutEmulatorEnv(os.Environ()))
	tree := descendants(t, d.cmd.Process.Pid)
	javas := 0
	for _, p := range tree {
		if strings.Contains(p.cmdline, "python") || strings.Contains(p.cmdline, "gcloud") {
			t.Errorf("a gcloud process runs under servo dev after it is ready: %d %s", p.pid, p.cmdline)
		}
		if strings.Contains(p.cmdline, "java") {
			javas++
		}
	}
	if javas != 2 {
		t.Errorf("%d Java processes under servo dev, want 2 (the emulators): %+v", javas, tree)
	}
	d.interrupt(t)
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range tree {
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if p.alive() {
			t.Errorf("process %d (%s) outlived servo dev's Ctrl-C", p.pid, p.cmdline)
		}
	}
}

// TestServoDevKeep: with --keep the emulators outlive Ctrl-C, and the next
// servo dev --keep reuses them instead of starting new ones.
func TestServoDevKeep(t *testing.T) {
	cache := t.TempDir()
	env := append(withoutEmulatorEnv(os.Environ()), "XDG_CACHE_HOME="+cache)
	first := startDev(t, env, "--keep")
	fs, ps := first.export(emulator.Firestore.EnvVar()), first.export(emulator.PubSub.EnvVar())
	kept := descendants(t, first.cmd.Process.Pid)
	t.Cleanup(func() {
		for _, p := range kept {
			if p.alive() {
				syscall.Kill(-p.pid, syscall.SIGKILL)
			}
		}
	})
	first.interrupt(t)
	if !strings.Contains(first.errText(), "stop them with: kill --") {
		t.Errorf("servo dev --keep does not say how to stop the kept emulators:\n%s", first.errText())
	}
	for _, host := range []string{fs, ps} {
		if !emulator.Answers(t.Context(), host, 10*time.Second) {
			t.Fatalf("kept emulator at %s does not answer after Ctrl-C", host)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "servo", "dev-emulators.json")); err != nil {
		t.Fatalf("no state file: %v", err)
	}

	second := startDev(t, env, "--keep")
	if got := [2]string{second.export(emulator.Firestore.EnvVar()), second.export(emulator.PubSub.EnvVar())}; got != [2]string{fs, ps} {
		t.Errorf("second run uses emulators %v, want the kept %v", got, [2]string{fs, ps})
	}
	for _, k := range []emulator.Kind{emulator.Firestore, emulator.PubSub} {
		if !strings.Contains(second.errText(), "reusing the kept "+string(k)+" emulator") {
			t.Errorf("second run does not reuse the kept %s emulator:\n%s", k, second.errText())
		}
	}
	if tree := descendants(t, second.cmd.Process.Pid); len(tree) != 0 {
		t.Errorf("second run started processes: %+v", tree)
	}
	second.interrupt(t)
}
