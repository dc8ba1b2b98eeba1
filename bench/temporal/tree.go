package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// servoIteration starts `servo dev --no-demo` (its own emulators, a fresh
// project; with -demo, its demo run, and -settle counts from the demo's
// end) and prints one line: the time until its ready line, the CPU time
// per second of its whole process tree while it idles (-idle, after
// -settle) with each role's share, and the tree's RSS.
func servoIteration(bin string, port int, demo bool) error {
	dir, err := os.MkdirTemp("", "servo-idle-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args := []string{"dev", "--addr", "127.0.0.1:" + strconv.Itoa(port),
		"--project", "idle-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36), "--log", filepath.Join(dir, "dev.log")}
	if !demo {
		args = append(args, "--no-demo")
	}
	cmd := exec.Command(bin, args...)
	// Its own emulators: none named by the environment.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "FIRESTORE_EMULATOR_HOST=") && !strings.HasPrefix(e, "PUBSUB_EMULATOR_HOST=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}()
	readyc, runningc := make(chan time.Time, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "servo dev ready"):
				readyc <- time.Now()
			case line == "servo dev: running; Ctrl-C to stop":
				close(runningc)
			}
		}
	}()
	var readyAt time.Time
	select {
	case readyAt = <-readyc:
	case <-time.After(3 * time.Minute):
		return fmt.Errorf("servo dev not ready")
	}
	<-runningc
	ready := readyAt.Sub(began)
	time.Sleep(*settle)
	idle0 := treeCPU(cmd.Process.Pid)
	time.Sleep(*idleFor)
	d := idle0.delta(treeCPU(cmd.Process.Pid))
	perSec := func(s float64) float64 { return s * 1000 / idleFor.Seconds() }
	roles := map[string]float64{}
	for _, p := range d {
		roles[p.role] += p.cpu
	}
	var parts []string
	for r, v := range roles {
		parts = append(parts, fmt.Sprintf("%s %.1f", r, perSec(v)))
	}
	sort.Strings(parts)
	rss := map[string]float64{}
	total := 0.0
	for _, pid := range below(cmd.Process.Pid) {
		r := procRSS(pid)
		rss[roleOf(pid)] += r
		total += r
	}
	var rparts []string
	for r, v := range rss {
		rparts = append(rparts, fmt.Sprintf("%s %.0f", r, v))
	}
	sort.Strings(rparts)
	what := "servo"
	if demo {
		what = "servo-after-demo"
	}
	fmt.Printf("%s ready-s %.3f idle-rss-MiB %.1f (%s) idle-cpu-tree-ms/s %.1f (%s)\n",
		what, ready.Seconds(), total, strings.Join(rparts, ", "), perSec(d.total()), strings.Join(parts, ", "))
	return nil
}

// proc is one process of a tree: its start time (with the pid, it names
// the process even if the pid is reused), its CPU time and that of its
// reaped children, in seconds, and what it is.
type proc struct {
	start string
	cpu   float64
	role  string
}

// tree is a process tree's processes by pid.
type tree map[int]proc

// total sums the CPU time of every process.
func (t tree) total() float64 {
	s := 0.0
	for _, p := range t {
		s += p.cpu
	}
	return s
}

// delta returns, for each process of later, the CPU time it used since t
// was taken (all of it for a process not in t). The children a process
// reaped meanwhile (a watchdog's sleep) count in its own.
func (t tree) delta(later tree) tree {
	out := tree{}
	for pid, p := range later {
		if q, ok := t[pid]; ok && q.start == p.start {
			p.cpu -= q.cpu
		}
		out[pid] = p
	}
	return out
}

// treeCPU reads the CPU time (user + system, with the reaped children's)
// of root and every process below it.
func treeCPU(root int) tree {
	t := tree{}
	for _, pid := range below(root) {
		f := statFields(pid)
		if f == nil {
			continue
		}
		var cpu float64
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseFloat(f[i], 64)
			cpu += v / 100
		}
		t[pid] = proc{start: f[19], cpu: cpu, role: roleOf(pid)}
	}
	return t
}

// treeRSS returns the resident memory of root and every process below it,
// in MiB.
func treeRSS(root int) float64 {
	s := 0.0
	for _, pid := range below(root) {
		s += procRSS(pid)
	}
	return s
}

// statFields returns the fields of /proc/PID/stat after the command name
// (state is field 0), or nil.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil
	}
	return f
}

// below returns root and the pids of every live process below it.
func below(root int) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); f != nil && f[0] != "Z" {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	in := map[int]bool{root: true}
	out := []int{root}
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if in[pp] && !in[pid] {
				in[pid] = true
				out = append(out, pid)
				changed = true
			}
		}
	}
	return out
}

// roleOf names a process of servo dev's tree (or Temporal's).
func roleOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	c := strings.ReplaceAll(string(b), "\x00", " ")
	switch {
	case strings.Contains(c, "java") && strings.Contains(c, "firestore"):
		return "firestore"
	case strings.Contains(c, "java") && strings.Contains(c, "pubsub"):
		return "pubsub"
	case strings.Contains(c, "servo-emulator-watchdog"):
		return "watchdogs"
	case strings.Contains(c, "temporal"):
		return "temporal"
	}
	return "servo"
}
