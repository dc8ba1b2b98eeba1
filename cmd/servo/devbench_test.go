package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator"

	"github.com/servo-dev/servo/internal/benchworker"
	"github.com/servo-dev/servo/internal/servotest"
)

// samples collects one figure per benchmark iteration and reports its
// median as a metric, and min–max in the log.
type samples map[string][]float64

func (s samples) add(name string, v float64) { s[name] = append(s[name], v) }

func (s samples) report(b *testing.B) {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v := slices.Clone(s[n])
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		b.ReportMetric(med, n)
		b.Logf("%-22s median %9.3f  min %9.3f  max %9.3f  (n=%d)", n, med, v[0], v[len(v)-1], len(v))
	}
}

// role names a process of servo dev's tree.
func role(p proc) string {
	switch {
	case strings.Contains(p.cmdline, "java") && strings.Contains(p.cmdline, "firestore"):
		return "firestore"
	case strings.Contains(p.cmdline, "java") && strings.Contains(p.cmdline, "pubsub"):
		return "pubsub"
	case strings.Contains(p.cmdline, "servo-emulator-watchdog"):
		return "watchdog"
	case strings.Contains(p.cmdline, "python") || strings.Contains(p.cmdline, "gcloud"):
		return "gcloud"
	}
	return "other"
}

// startPlainJava starts the emulator's jar with java as the Cloud SDK's
// own launcher script does (no JVM options), and returns how long it took
// to answer GET / with 200, and a function that stops it.
func startPlainJava(b *testing.B, k emulator.Kind, port int) (time.Duration, func()) {
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		b.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(gcloud)
	platform := filepath.Join(filepath.Dir(filepath.Dir(real)), "platform")
	host := "127.0.0.1:" + strconv.Itoa(port)
	var args []string
	switch k {
	case emulator.Firestore:
		args = []string{"-Duser.language=en", "-cp", filepath.Join(platform, "cloud-firestore-emulator", "cloud-firestore-emulator.jar"),
			"com.google.cloud.datastore.emulator.firestore.CloudFirestore", "start", "--host=127.0.0.1", "--port=" + strconv.Itoa(port), "--database-mode=firestore-native"}
	default:
		jars, _ := filepath.Glob(filepath.Join(platform, "pubsub-emulator", "lib", "cloud-pubsub-emulator-*-all.jar"))
		if len(jars) == 0 {
			b.Fatal("no pubsub emulator jar")
		}
		args = []string{"-jar", jars[0], "--host=127.0.0.1", "--port=" + strconv.Itoa(port)}
	}
	cmd := exec.Command("java", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	for !emulator.Answers(context.Background(), host, time.Second) {
		if time.Since(began) > 2*time.Minute {
			stop()
			b.Fatalf("%s emulator started by java does not answer", k)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(began), stop
}

func freePortB(b *testing.B) int {
	_, port, _ := strings.Cut(freeAddr(b), ":")
	n, _ := strconv.Atoi(port)
	return n
}

// BenchmarkDevStart measures, in each iteration and in turn: how long
// servo dev takes to print its ready line; the resident memory of its
// whole process tree after 5 s idle; its ready time when --keep reuses
// running emulators; and how long the slower of the two emulators takes to
// answer when started directly by java as the Cloud SDK's launchers do
// (both at once, as servo dev starts them). Run it with -benchtime=5x.
func BenchmarkDevStart(b *testing.B) {
	env := withoutEmulatorEnv(os.Environ())
	s := samples{}
	for i := 0; i < b.N; i++ {
		d := startDev(b, env)
		ready := d.readyAt.Sub(d.began)
		s.add("dev-ready-s", ready.Seconds())
		time.Sleep(5 * time.Second)
		byRole := map[string]float64{"servo": servotest.RSSMiB(d.cmd.Process.Pid)}
		total := byRole["servo"]
		for _, p := range descendants(b, d.cmd.Process.Pid) {
			r := servotest.RSSMiB(p.pid)
			byRole[role(p)] += r
			total += r
		}
		s.add("idle-rss-MiB", total)
		for r, v := range byRole {
			s.add("rss-"+r+"-MiB", v)
		}
		d.interrupt(b)

		// --keep: the second start reuses the first one's emulators.
		cache := b.TempDir()
		kenv := append(slices.Clone(env), "XDG_CACHE_HOME="+cache)
		k1 := startDev(b, kenv, "--keep")
		kept := descendants(b, k1.cmd.Process.Pid)
		k1.interrupt(b)
		k2 := startDev(b, kenv, "--keep")
		s.add("keep-ready-s", k2.readyAt.Sub(k2.began).Seconds())
		k2.interrupt(b)
		for _, p := range kept {
			syscall.Kill(-p.pid, syscall.SIGKILL)
		}

		var wg sync.WaitGroup
		var fs, ps time.Duration
		var stops [2]func()
		fsPort, psPort := freePortB(b), freePortB(b)
		wg.Add(2)
		go func() { defer wg.Done(); fs, stops[0] = startPlainJava(b, emulator.Firestore, fsPort) }()
		go func() { defer wg.Done(); ps, stops[1] = startPlainJava(b, emulator.PubSub, psPort) }()
		wg.Wait()
		stops[0]()
		stops[1]()
		slower := max(fs, ps)
		s.add("java-firestore-s", fs.Seconds())
		s.add("java-pubsub-s", ps.Seconds())
		s.add("java-slower-s", slower.Seconds())
		s.add("dev/java-slower", ready.Seconds()/slower.Seconds())
	}
	s.report(b)
}

// Workload of BenchmarkDevWorkload (and of bench/temporal, its Temporal
// counterpart).
const (
	workloadTasks      = 300
	workloadSubmitters = 8
	workloadWorkers    = 8 // tasks a worker runs at once
)

// BenchmarkDevWorkload runs 300 no-op tasks that each send
// benchworker.Beats heartbeats (SERVO_BENCH_HEARTBEATS, default 1; 100 ms
// apart, each with new progress; a task ends once its last is
// acknowledged), submitted by 8 goroutines, through servo dev to an
// external worker that runs 8 at a time, and reports throughput and the
// CPU time of each process per task: servo dev, each emulator, and this
// process (the worker and the submitters). Before the workload it measures
// the ready time, and the CPU time per second of each process and the
// memory of the whole tree while servo dev idles for 10 s (after 2 s of
// settling). With SERVO_CPUPROFILE=FILE in
// the environment servo dev writes a CPU profile of its own share. Run it
// with -benchtime=3x.
func BenchmarkDevWorkload(b *testing.B) {
	w := benchworker.Start(b, workloadWorkers)
	env := withoutEmulatorEnv(os.Environ())
	s := samples{}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		d := startDev(b, env, "--worker", benchworker.Name+"="+w.URL, "--project", fmt.Sprintf("bench-%d-%d", time.Now().Unix(), i))
		pids := map[string]int{"servo": d.cmd.Process.Pid}
		for _, p := range descendants(b, d.cmd.Process.Pid) {
			if r := role(p); r == "firestore" || r == "pubsub" {
				pids[r] = p.pid
			}
		}
		c, err := client.New(d.export("SERVO_API"))
		if err != nil {
			b.Fatal(err)
		}
		// Idle: what servo dev and the emulators burn with nothing to do
		// (the sweeper's passes, the scheduler ticks), after the start-up
		// settled.
		time.Sleep(2 * time.Second)
		cpu0 := map[string]float64{}
		for r, pid := range pids {
			cpu0[r] = servotest.CPUSeconds(pid)
		}
		const idle = 10 * time.Second
		time.Sleep(idle)
		for r, pid := range pids {
			s.add("idle-cpu-"+r+"-ms/s", (servotest.CPUSeconds(pid)-cpu0[r])*1000/idle.Seconds())
			cpu0[r] = servotest.CPUSeconds(pid)
		}
		// The ready time and the idle tree's memory, as BenchmarkDevStart
		// measures them, for the Temporal comparison.
		s.add("dev-ready-s", d.readyAt.Sub(d.began).Seconds())
		rss := servotest.RSSMiB(d.cmd.Process.Pid)
		for _, p := range descendants(b, d.cmd.Process.Pid) {
			rss += servotest.RSSMiB(p.pid)
		}
		s.add("idle-rss-MiB", rss)
		cpu0["bench"] = servotest.CPUSeconds(os.Getpid())
		hb0 := w.Heartbeats.Load()
		// A loaded machine can make the emulator answer late: retry as the
		// API says (the same request is idempotent).
		run, submitted, elapsed := w.Run(b, func(body []byte) error {
			for try := 1; ; try++ {
				_, _, err := c.Submit(ctx, body)
				if err == nil || try == 10 {
					return err
				}
				time.Sleep(time.Duration(try) * 100 * time.Millisecond)
			}
		}, workloadTasks, workloadSubmitters, 10*time.Minute)
		cpu := map[string]float64{}
		total := 0.0
		for r, pid := range pids {
			cpu[r] = servotest.CPUSeconds(pid) - cpu0[r]
		}
		cpu["bench"] = servotest.CPUSeconds(os.Getpid()) - cpu0["bench"]
		for _, v := range cpu {
			total += v
		}
		tasks, err := c.ListAll(ctx, map[string][]string{"runId": {run}})
		if err != nil {
			b.Fatal(err)
		}
		ok := 0
		for _, t := range tasks {
			if t.State == api.Succeeded {
				ok++
			}
		}
		if ok != workloadTasks {
			b.Fatalf("%d of %d tasks SUCCEEDED", ok, workloadTasks)
		}
		d.interrupt(b)
		s.add("tasks/s", workloadTasks/elapsed.Seconds())
		s.add("submit-s", submitted.Seconds())
		s.add("heartbeats/task", float64(w.Heartbeats.Load()-hb0)/workloadTasks)
		s.add("cpu-total-s", total)
		for r, v := range cpu {
			s.add("cpu-"+r+"-ms/task", v*1000/workloadTasks)
		}
	}
	s.report(b)
}
