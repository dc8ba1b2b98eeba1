package main

import (
	"fmt"

	"github.com/servo-dev/servo/internal/jobs"
)

// jobWorkerFlags collects repeated --job-worker NAME=COMMAND: job workers
// whose attempts run as local subprocesses (jobs.Local).
type jobWorkerFlags map[string]string

func (w jobWorkerFlags) String() string {
	if len(w) == 0 {
		return ""
	}
	return fmt.Sprint(map[string]string(w))
}

func (w jobWorkerFlags) Set(v string) error {
	name, command, err := jobs.ParseJobWorker(v)
	if err != nil {
		return err
	}
	w[name] = command
	return nil
}

// Type names the flag's value in help.
func (w jobWorkerFlags) Type() string { return "NAME=COMMAND" }
