// Command servo runs Servo's local stack and talks to a Servo control API.
//
//	servo dev [--addr HOST:PORT] [--worker NAME=URL]... [--no-demo] [--sweep-every D] [--project ID]
//	servo submit [-f task.json | flags]      submit a task
//	servo get ID                             show a task and its attempts
//	servo list [--run RUN] [--state STATE]   list tasks
//	servo cancel ID [--reason R]             cancel a task
//	servo watch ID | --run RUN               follow progress until terminal
//	servo events tail [--task ID] [--run ID] print transition events as they happen
//	servo emulator cloudtasks [--host-port H:P]  run the Cloud Tasks emulator alone
//
// Client commands take --api URL (default $SERVO_API) and --json.
//
// Exit codes: 0 success; 1 failure (network, API error); 2 usage; 3 not
// found; 4 conflict (e.g. cancelling a finished task); 5 the watched task
// ended in a state other than SUCCEEDED.
package main

import (
	"context"
	"errors"
	"fmt"
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

const usage = `servo: Servo's local stack and control API client.

Usage:
  servo dev [--addr HOST:PORT] [--worker NAME=URL]... [--no-demo] [--sweep-every D] [--project ID]
  servo submit [-f task.json] [--tenant T --workspace W --key K --worker NAME --payload JSON ...]
  servo get ID
  servo list [--run RUN] [--state STATE] [--tenant T]
  servo cancel ID [--reason R]
  servo watch ID | --run RUN
  servo events tail [--task ID] [--run ID]
  servo emulator cloudtasks [--host-port HOST:PORT]

Client commands take --api URL (default $SERVO_API) and --json.
Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict, 5 task did not succeed.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	os.Exit(report(err))
}

func report(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "servo:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return &exitError{exitUsage, errors.New("no command")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return cmdDev(ctx, rest)
	case "submit":
		return cmdSubmit(ctx, rest)
	case "get":
		return cmdGet(ctx, rest)
	case "list":
		return cmdList(ctx, rest)
	case "cancel":
		return cmdCancel(ctx, rest)
	case "watch":
		return cmdWatch(ctx, rest)
	case "events":
		if len(rest) == 0 || rest[0] != "tail" {
			return usageErr("usage: servo events tail [--task ID] [--run ID]")
		}
		return cmdEventsTail(ctx, rest[1:])
	case "emulator":
		if len(rest) == 0 || rest[0] != "cloudtasks" {
			return usageErr("usage: servo emulator cloudtasks [--host-port HOST:PORT]")
		}
		return cmdEmulatorCloudTasks(ctx, rest[1:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return usageErr("unknown command %q", cmd)
}
