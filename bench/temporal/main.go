// Command temporal-bench runs BenchmarkDevWorkload's workload (see
// cmd/servo/devbench_test.go) against the Temporal CLI's dev server, for
// the comparison in docs/performance.md: 300 no-op tasks (a workflow that
// runs one activity) that each send -heartbeats heartbeats (default 1,
// as benchworker.Beats) 100 ms apart, submitted
// by 8 goroutines, run by a worker with 8 activity slots.
//
// Each iteration starts `temporal server start-dev --headless` itself and
// prints one line: the server's ready time, its RSS and CPU time per second
// while it idles (-idle, after -settle), the workload's throughput and
// submit time, and the CPU time per task of the server and of this process
// (worker and submitters).
//
// With -servo PATH (a built servo binary) each iteration also starts
// `servo dev --no-demo` and measures it the same way, right after the
// Temporal server has stopped: the time until its ready line, the CPU time
// per second of its whole process tree while it idles (the emulators'
// JVMs, their watchdogs, and what any of them started and reaped meanwhile),
// and the tree's RSS. -workload=false skips the Temporal workload, and
// -temporal "" Temporal altogether (servo dev alone); -demo lets servo dev
// run its demo first (-settle then counts from the demo's end).
//
//	go run . -temporal /path/to/temporal -n 3
//	go run . -temporal /path/to/temporal -servo /path/to/servo -workload=false -n 5
//
// It is a module of its own so that Servo's go.mod never requires
// Temporal's SDK.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const (
	tasks      = 300
	submitters = 8
	slots      = 8
	queue      = "bench"
)

var heartbeats atomic.Int64

// beats is how many heartbeats Noop sends (-heartbeats).
var beats = flag.Int("heartbeats", 1, "heartbeats a task sends, 100 ms apart (BenchmarkDevWorkload: SERVO_BENCH_HEARTBEATS)")

// Noop records *beats heartbeats, each followed by 100 ms of work, and
// returns.
func Noop(ctx context.Context) error {
	for range *beats {
		activity.RecordHeartbeat(ctx) // the first is sent at once, the others throttled to 50 ms
		heartbeats.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Task runs Noop once.
func Task(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	return workflow.ExecuteActivity(ctx, Noop).Get(ctx, nil)
}

var (
	settle  = flag.Duration("settle", 5*time.Second, "idle time before the idle CPU is measured")
	idleFor = flag.Duration("idle", 30*time.Second, "how long the idle CPU is measured")
)

func main() {
	bin := flag.String("temporal", "temporal", "the Temporal CLI (\"\": do not run Temporal)")
	servo := flag.String("servo", "", "a servo binary: also measure servo dev's ready time, idle CPU and RSS")
	workload := flag.Bool("workload", true, "run the workload against Temporal after its idle measurement")
	demo := flag.Bool("demo", false, "servo dev runs its demo; -settle counts from the demo's end")
	n := flag.Int("n", 3, "iterations")
	port := flag.Int("port", 18570, "the dev server's gRPC port (the UI is off)")
	flag.Parse()
	for i := range *n {
		if *bin != "" {
			if err := iteration(*bin, *port+i%10, *workload); err != nil {
				log.Fatal(err)
			}
		}
		if *servo != "" {
			if err := servoIteration(*servo, *port+60+i%10, *demo); err != nil {
				log.Fatal(err)
			}
		}
	}
}

func iteration(bin string, port int, workload bool) error {
	db, err := os.MkdirTemp("", "temporal-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(db)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := exec.Command(bin, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--http-port", strconv.Itoa(port+20), "--metrics-port", strconv.Itoa(port+40), "--log-level", "error")
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
		srv.Wait()
	}()
	// Ready: the namespace answers.
	var c client.Client
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			if c, err = client.Dial(client.Options{HostPort: addr, Logger: quiet{}}); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
				cancel()
				if err == nil {
					break
				}
				c.Close()
			}
		}
		if time.Since(began) > 2*time.Minute {
			return fmt.Errorf("temporal dev server not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	ready := time.Since(began)
	// Idle: -settle, then the CPU time of -idle and the memory.
	time.Sleep(*settle)
	idle0 := treeCPU(srv.Process.Pid)
	time.Sleep(*idleFor)
	idleCPU := idle0.delta(treeCPU(srv.Process.Pid)).total() * 1000 / idleFor.Seconds()
	rss := treeRSS(srv.Process.Pid)
	if !workload {
		fmt.Printf("temporal ready-s %.3f idle-rss-MiB %.1f idle-cpu-tree-ms/s %.1f\n", ready.Seconds(), rss, idleCPU)
		return nil
	}

	w := worker.New(c, queue, worker.Options{MaxConcurrentActivityExecutionSize: slots, MaxHeartbeatThrottleInterval: 50 * time.Millisecond})
	w.RegisterWorkflow(Task)
	w.RegisterActivity(Noop)
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()

	srvCPU0, selfCPU0, hb0 := procCPU(srv.Process.Pid), procCPU(os.Getpid()), heartbeats.Load()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	runs := make([]client.WorkflowRun, tasks)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= tasks; i = next.Add(1) {
				r, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: run + "-" + strconv.FormatInt(i, 10), TaskQueue: queue}, Task)
				if err != nil {
					failed.Store(err)
					return
				}
				runs[i-1] = r
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	submitted := time.Since(start)
	for _, r := range runs {
		if err := r.Get(context.Background(), nil); err != nil {
			return fmt.Errorf("workflow %s: %w", r.GetID(), err)
		}
	}
	elapsed := time.Since(start)
	srvCPU, selfCPU := procCPU(srv.Process.Pid)-srvCPU0, procCPU(os.Getpid())-selfCPU0
	fmt.Printf("temporal ready-s %.3f idle-rss-MiB %.1f idle-cpu-tree-ms/s %.1f tasks/s %.2f submit-s %.3f heartbeats/task %.2f cpu-server-ms/task %.2f cpu-bench-ms/task %.2f cpu-total-s %.2f\n",
		ready.Seconds(), rss, idleCPU, tasks/elapsed.Seconds(), submitted.Seconds(), float64(heartbeats.Load()-hb0)/tasks,
		srvCPU*1000/tasks, selfCPU*1000/tasks, srvCPU+selfCPU)
	return nil
}

// procRSS returns a process's resident memory in MiB.
func procRSS(pid int) float64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// procCPU returns a process's CPU time (user + system), in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// quiet drops the SDK's logs.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
