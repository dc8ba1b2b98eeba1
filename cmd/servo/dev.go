package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/devstack"
	"github.com/servo-dev/servo/task"
)

// workerFlags collects repeated --worker NAME=URL.
type workerFlags map[string]string

func (w workerFlags) String() string { return fmt.Sprint(map[string]string(w)) }
func (w workerFlags) Set(v string) error {
	name, u, ok := strings.Cut(v, "=")
	if !ok || name == "" || u == "" {
		return errors.New("want NAME=URL")
	}
	w[name] = u
	return nil
}

func cmdDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	addr := fs.String("addr", devstack.DefaultAddr, "address of the API, callbacks, sweeper and example worker")
	workers := workerFlags{}
	fs.Var(workers, "worker", "external worker NAME=URL (repeatable)")
	noDemo := fs.Bool("no-demo", false, "do not submit the demo run")
	sweepEvery := fs.Duration("sweep-every", devstack.DefaultSweepEvery, "sweeper cadence")
	project := fs.String("project", devstack.DefaultProject, "project id used with the emulators")
	firestoreHost := fs.String("firestore", "", "HOST:PORT of a running Firestore emulator to use instead of starting one")
	pubsubHost := fs.String("pubsub", "", "HOST:PORT of a running Pub/Sub emulator to use instead of starting one")
	logFile := fs.String("log", filepath.Join(os.TempDir(), "servo-dev.log"), "where the components' JSON logs go")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *sweepEvery < task.MinTimerLocal {
		return usageErr("--sweep-every must be at least %v", task.MinTimerLocal)
	}
	lf, err := os.Create(*logFile)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	defer lf.Close()

	fmt.Fprintln(os.Stderr, "servo dev: starting "+startingWhat(*firestoreHost, *pubsubHost)+"...")
	stack, err := devstack.Start(ctx, devstack.Options{Addr: *addr, Project: *project, Workers: workers, SweepEvery: *sweepEvery, Log: lf,
		FirestoreHost: *firestoreHost, PubSubHost: *pubsubHost})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "servo dev: stopping...")
		stack.Close()
		fmt.Fprintln(os.Stderr, "servo dev: stopped")
	}()
	fmt.Printf("servo dev ready: API %s (workers: %s; logs: %s)\n", stack.URL, strings.Join(stack.Workers.Names(), ", "), *logFile)
	fmt.Println("# in a second shell:")
	for _, e := range stack.Exports() {
		fmt.Println(e)
	}
	if !*noDemo {
		if err := demo(ctx, stack.URL); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "servo dev: demo:", err)
		}
	}
	if ctx.Err() == nil {
		fmt.Println("servo dev: running; Ctrl-C to stop")
	}
	<-ctx.Done()
	return nil
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

// demo submits a small run to the example worker and shows it progressing.
func demo(ctx context.Context, api string) error {
	c, err := client.New(ctx, api)
	if err != nil {
		return err
	}
	run := task.NewRunID(time.Now())
	tasks := []struct{ key, payload string }{
		{"partitions-small", `{"partitions": 8, "partitionMs": 250}`},
		{"partitions-large", `{"partitions": 20, "partitionMs": 200}`},
		{"flaky-then-resumes", `{"partitions": 12, "partitionMs": 250, "failAttempts": 1}`},
	}
	fmt.Printf("\nDemo run %s: three tasks on worker %q (one fails once, is retried and resumes from its checkpoint)\n\n", run, devstack.ExampleWorker)
	for _, t := range tasks {
		body := fmt.Sprintf(`{"tenantId":"demo","workspaceId":"local","runId":%q,"taskKey":%q,"worker":%q,"payload":%s,
			"heartbeatIntervalMs":500,"heartbeatTimeoutMs":2000,"retry":{"maxAttempts":3,"initialBackoffMs":500}}`,
			run, t.key, devstack.ExampleWorker, t.payload)
		if _, _, err := c.Submit(ctx, []byte(body)); err != nil {
			return err
		}
	}
	w := newWatcher(os.Stdout, isTerminal(os.Stdout), false)
	final, err := Watch(ctx, func() ([]client.Task, error) { return runTasks(ctx, c, run) }, w, 250*time.Millisecond)
	if err != nil {
		return err
	}
	fmt.Printf("\nDemo finished: %d tasks. Try: servo get %s   or   servo events tail --run %s\n", len(final), final[0].TaskID, run)
	return nil
}
