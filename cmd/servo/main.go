// Command servo runs Servo's local stack and talks to a Servo control API.
//
//	servo dev [--addr HOST:PORT] [--worker NAME=URL]... [--no-demo] [--sweep-every D] [--project ID]
//	servo submit [-f task.json | flags]      submit a task
//	servo get ID                             show a task and its attempts
//	servo list [--run RUN] [--state STATE] [--worker W] [--limit N]   list tasks
//	servo runs [--tenant T] [--limit N]      list runs with per-state counts
//	servo cancel ID [--reason R]             cancel a task
//	servo rerun ID                           submit a finished task's request again
//	servo watch ID | --run RUN               follow progress until terminal
//	servo events tail [--task ID] [--run ID] [--since D | --all]   print transitions
//	servo emulator cloudtasks [--host-port H:P]  run the Cloud Tasks emulator alone
//	servo version | completion SHELL | help [COMMAND]
//
// Client commands take --api URL (default $SERVO_API) and --json. Every
// command takes -h/--help.
//
// Exit codes: 0 success; 1 failure (network, API error); 2 usage; 3 not
// found; 4 conflict (e.g. cancelling a finished task); 5 the watched task
// ended in a state other than SUCCEEDED.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
	exitConflict = 4
	exitNotOK    = 5
)

// exitError carries an exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

func main() {
	stopProfile := startCPUProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	stopProfile()
	os.Exit(report(err))
}

// report prints err (if any) on stderr and returns the exit code.
func report(err error) int {
	return reportTo(os.Stderr, err)
}

func reportTo(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(w, "servo:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}

// run runs the command line args (without the program name) on the
// process's standard streams.
func run(ctx context.Context, args []string) error {
	return execute(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}

// execute runs args with the given streams.
func execute(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) error {
	root := newRoot()
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	return root.ExecuteContext(ctx)
}
