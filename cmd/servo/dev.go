package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/task"
	"github.com/servo-dev/servo/worker"
)

// workerFlags collects repeated --worker NAME=URL.
type workerFlags map[string]string

func (w workerFlags) String() string {
	if len(w) == 0 {
		return ""
	}
	return fmt.Sprint(map[string]string(w))
}

func (w workerFlags) Set(v string) error {
	name, u, ok := strings.Cut(v, "=")
	if !ok || name == "" || u == "" {
		return errors.New("want NAME=URL")
	}
	w[name] = u
	return nil
}

// Type names the flag's value in help.
func (w workerFlags) Type() string { return "NAME=URL" }

// rateFlags collects repeated --worker-rate NAME=RATE.
type rateFlags map[string]float64

func (r rateFlags) String() string {
	if len(r) == 0 {
		return ""
	}
	return fmt.Sprint(map[string]float64(r))
}

func (r rateFlags) Set(v string) error {
	name, n, ok := strings.Cut(v, "=")
	rate, err := strconv.ParseFloat(n, 64)
	if !ok || name == "" || err != nil || !(rate > 0) {
		return errors.New("want NAME=RATE, RATE dispatches a second above 0")
	}
	r[name] = rate
	return nil
}

// Type names the flag's value in help.
func (r rateFlags) Type() string { return "NAME=RATE" }

func newDevCmd() *cobra.Command {
	var addr, project, firestoreHost, pubsubHost, logFile string
	var noDemo, open, noSweeper, strict bool
	var sweepEvery, startTimeout, storeTimeout time.Duration
	workers := workerFlags{}
	rates := rateFlags{}
	var keep bool
	pools := pullPoolFlags{}
	jobWorkers := jobWorkerFlags{}
	devAccess := &devAccessFlags{}
	cmd := &cobra.Command{
		Use:   "dev [flags]",
		Short: "Run the whole local stack (and a demo run) until Ctrl-C",
		Long: `Start, in one process: the Firestore and Pub/Sub emulators (or use running
ones: --firestore, --pubsub), Servo's Cloud Tasks emulator, the control API,
the callbacks and the sweeper on one address, and the example worker
(registered as worker "example"). Prints a line starting "servo dev ready",
the export lines a second shell needs, then submits a small demo run and
shows it progressing. The ready line names the web dashboard (ADDR/ui/);
--open opens it in the default browser. Ctrl-C stops everything servo dev
started.

Locally, timers down to 100ms are accepted (production minimum: 1s).`,
		Example: `  go run ./cmd/servo dev
  servo dev --addr 127.0.0.1:9090 --no-demo
  servo dev --worker mine=http://127.0.0.1:7000/work
  servo dev --firestore 127.0.0.1:8686 --pubsub 127.0.0.1:8685
  servo dev --pull-pool gpu   # then: SERVO_API=... go run ./examples/worker -pull gpu
  servo dev --job-worker render="go run ./examples/worker -job"
  servo dev --open
  servo dev --no-sweeper --no-demo   # rehearse "the sweeper is not running"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if sweepEvery < task.MinTimerLocal {
				return usageErr("--sweep-every must be at least %v", task.MinTimerLocal)
			}
			dueShards, err := devDueShards()
			if err != nil {
				return err
			}
			keys, err := devKeys()
			if err != nil {
				return err
			}
			// A ring file is re-read while servo dev runs, so that `servo
			// keys add|activate|retire --file` rotate the running stack.
			keysFile := os.Getenv(auth.EnvKeysFile)
			if keysFile != "" {
				keys = nil
			}
			// The fault harness's crashes (test only; docs/configuration.md).
			if err := config.ArmFailpoints(os.Getenv); err != nil {
				return err
			}
			if logFile == "" {
				logFile = filepath.Join(os.TempDir(), "servo-dev.log")
			}
			lf, err := os.Create(logFile)
			if err != nil {
				return fmt.Errorf("open log file: %w", err)
			}
			defer lf.Close()

			if keep {
				if firestoreHost, pubsubHost, err = keepEmulators(ctx, errOut, firestoreHost, pubsubHost); err != nil {
					return err
				}
				defer func() { fmt.Fprintln(errOut, keptStopHint()) }()
			}
			tel, traces, err := devTelemetry(ctx, project)
			if err != nil {
				return err
			}
			defer shutdownTelemetry(tel)
			fmt.Fprintln(errOut, "servo dev: starting "+startingWhat(firestoreHost, pubsubHost)+"...")
			stack, err := devstack.Start(ctx, devstack.Options{Addr: addr, Project: project, Workers: workers, SweepEvery: sweepEvery, Log: io.MultiWriter(lf, &deliveryEcho{out: errOut}),
				WorkerFuncs:   map[string]worker.Func{devstack.ExampleWorker: partitions.Process},
				FirestoreHost: firestoreHost, PubSubHost: pubsubHost, StartTimeout: startTimeout, StoreTimeout: storeTimeout,
				Metrics: tel.MetricsHandler(), Traces: traces, PullPools: pools, JobWorkers: jobWorkers, WorkerRates: rates,
				Access: devAccess.policy, Quotas: devAccess.quotas, DueShards: dueShards, Keys: keys, KeysFile: keysFile, NoSweeper: noSweeper, LaxStore: !strict})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(errOut, "servo dev: stopping...")
				stack.Close()
				fmt.Fprintln(errOut, "servo dev: stopped")
			}()
			hosts := map[emulator.Kind]string{emulator.Firestore: stack.FirestoreHost, emulator.PubSub: stack.PubSubHost}
			groups := stack.EmulatorGroups()
			if keep {
				groups = keptGroups(hosts)
			}
			if removeSession, err := recordDevSession(stack.URL, groups, hosts); err != nil {
				fmt.Fprintln(errOut, "servo dev: servo dev freeze will not find this stack:", err)
			} else {
				defer removeSession()
			}
			fmt.Fprintf(out, "servo dev ready: API %s (workers: %s; logs: %s); dashboard %s\n", stack.URL, strings.Join(stack.Workers.Names(), ", "), logFile, stack.URL+dashboard.Prefix)
			if noSweeper {
				fmt.Fprintln(errOut, "servo dev: --no-sweeper: the sweeper does not run (no zombies, timeouts, retries or outbox re-drive; servo doctor's sweeper row fails)")
			}
			if open {
				openBrowser(stack.URL+dashboard.Prefix, errOut)
			}
			fmt.Fprintln(out, "# in a second shell:")
			for _, e := range stack.Exports() {
				fmt.Fprintln(out, e)
			}
			switch {
			case noDemo:
			case !devAccess.policy.IsOpen():
				// The demo submits without an identity, which a real policy refuses.
				fmt.Fprintln(errOut, "servo dev: no demo under --access (it has no identity); submit with servo --as EMAIL")
			default:
				if err := demo(ctx, stack.URL, out); err != nil && ctx.Err() == nil {
					fmt.Fprintln(errOut, "servo dev: demo:", err)
				}
			}
			if ctx.Err() == nil {
				fmt.Fprintln(out, "servo dev: running; Ctrl-C to stop")
			}
			<-ctx.Done()
			return nil
		},
	}
	cmd.AddCommand(newDevSignalCmd(true), newDevSignalCmd(false), newDevFunctionCmd())
	f := cmd.Flags()
	f.StringVar(&addr, "addr", devstack.DefaultAddr, "address of the API, callbacks, sweeper and example worker")
	f.Var(workers, "worker", "external worker NAME=URL, with its own queue (repeatable)")
	f.Var(rates, "worker-rate", "declared peak dispatch rate NAME=RATE of a worker: above 500/s it gets ceil(RATE/500) queues (repeatable)")
	f.BoolVar(&noDemo, "no-demo", false, "do not submit the demo run")
	f.DurationVar(&sweepEvery, "sweep-every", devstack.DefaultSweepEvery, "sweeper cadence while anything is due (idle, it sleeps until the next due time or a write)")
	f.StringVar(&project, "project", devstack.DefaultProject, "project id used with the emulators")
	f.StringVar(&firestoreHost, "firestore", "", "HOST:PORT of a running Firestore emulator to use instead of starting one")
	f.StringVar(&pubsubHost, "pubsub", "", "HOST:PORT of a running Pub/Sub emulator to use instead of starting one")
	f.StringVar(&logFile, "log", "", "where the components' JSON logs go (default $TMPDIR/servo-dev.log)")
	f.BoolVar(&keep, "keep", false, "keep the emulators running after servo dev stops, and reuse them next time (faster restarts)")
	f.DurationVar(&startTimeout, "start-timeout", 0, "default start timeout of new tasks, after which a stuck dispatch is re-driven (default 10m)")
	f.DurationVar(&storeTimeout, "store-timeout", 0, "bound on the store work of one callback or API request, then 503 (default 20s callbacks, 50s API)")
	f.Var(pools, "pull-pool", "pull pool NAME (workers claim at /v1/pools/NAME/claim), optionally =SA,... allowed to claim (repeatable)")
	f.Var(jobWorkers, "job-worker", "job worker NAME=COMMAND: each attempt runs COMMAND as a subprocess with $SERVO_ENVELOPE, like a Cloud Run Job execution (repeatable)")
	f.BoolVar(&open, "open", false, "open the dashboard in the default browser once ready")
	f.BoolVar(&noSweeper, "no-sweeper", false, "run without the sweeper (its scheduler ticker), to rehearse a stopped sweeper")
	f.BoolVar(&strict, "strict", true, "the store refuses, as production Firestore does, queries no declared index serves and writes over Firestore's limits (the emulator takes them); --strict=false sends them on")
	devAccess.register(f)
	return cmd
}

// devDueShards is SERVO_DUE_SHARDS when set (production's variable), else
// 0: the local stack's default (devstack.DefaultDueShards).
func devDueShards() (int, error) {
	v := os.Getenv("SERVO_DUE_SHARDS")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("SERVO_DUE_SHARDS must be a whole number ≥ 1 (got %q)", v)
	}
	return n, nil
}

// devKeys is the key ring of SERVO_TOKEN_KEYS or SERVO_TOKEN_KEYS_FILE
// (production's variables) when one is set, so that the tokens of a
// restarted servo dev stay valid (the faults harness restarts it); else
// nil: the stack generates one. (A file is then re-read by the stack
// itself, devstack.Options.KeysFile; reading it here checks it first.)
func devKeys() (*auth.KeyRing, error) {
	r, err := auth.LoadKeyRing(auth.KeyConfig{JSON: []byte(os.Getenv(auth.EnvKeys)), File: os.Getenv(auth.EnvKeysFile)})
	if errors.Is(err, auth.ErrNoKeys) {
		return nil, nil
	}
	return r, err
}

// startingWhat names what servo dev starts itself.
func startingWhat(firestoreHost, pubsubHost string) string {
	switch {
	case firestoreHost == "" && pubsubHost == "":
		return "the Firestore and Pub/Sub emulators, the Cloud Tasks emulator and Servo"
	case firestoreHost == "":
		return "the Firestore emulator, the Cloud Tasks emulator and Servo (Pub/Sub emulator at " + pubsubHost + ")"
	case pubsubHost == "":
		return "the Pub/Sub emulator, the Cloud Tasks emulator and Servo (Firestore emulator at " + firestoreHost + ")"
	}
	return "the Cloud Tasks emulator and Servo (Firestore emulator at " + firestoreHost + ", Pub/Sub emulator at " + pubsubHost + ")"
}

// servoCommand is how to run servo from a shell: "servo" when it is on
// the PATH, "go run ./cmd/servo" (from a checkout) otherwise.
func servoCommand() string {
	if _, err := exec.LookPath("servo"); err == nil {
		return "servo"
	}
	return "go run ./cmd/servo"
}

// demo submits a small run to the example worker and shows it progressing.
func demo(ctx context.Context, base string, out io.Writer) error {
	c, err := newClient(ctx, base)
	if err != nil {
		return err
	}
	run := task.NewRunID(time.Now())
	tasks := []struct{ key, payload string }{
		{"partitions-small", `{"partitions": 8, "partitionMs": 250}`},
		{"partitions-large", `{"partitions": 20, "partitionMs": 200}`},
		{"flaky-then-resumes", `{"partitions": 12, "partitionMs": 250, "failAttempts": 1}`},
	}
	fmt.Fprintf(out, "\nDemo run %s: three tasks on worker %q (one fails once, is retried and resumes from its checkpoint)\n\n", run, devstack.ExampleWorker)
	for _, t := range tasks {
		body := fmt.Sprintf(`{"tenantId":"demo","workspaceId":"local","runId":%q,"taskKey":%q,"worker":%q,"payload":%s,
			"heartbeatIntervalMs":500,"heartbeatTimeoutMs":2000,"retry":{"maxAttempts":3,"initialBackoffMs":500}}`,
			run, t.key, devstack.ExampleWorker, t.payload)
		if _, _, err := c.Submit(ctx, []byte(body)); err != nil {
			return err
		}
	}
	w := newWatcher(out, false, false).withTerm(termOf(out))
	final, err := Watch(ctx, func() ([]api.Task, error) { return w.runTasks(ctx, c, run) }, w, 250*time.Millisecond)
	if err != nil {
		return err
	}
	servo := servoCommand()
	fmt.Fprintf(out, "\nDemo finished: %d tasks. Try, in a second shell with the exports above:\n  %s get %s\n  %s events tail --run %s --all\n",
		len(final), servo, final[0].TaskID, servo, run)
	return nil
}
