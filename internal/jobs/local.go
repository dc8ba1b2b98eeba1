package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/task"
)

// Local is the Runner of the local stack (`servo dev --job-worker
// NAME=COMMAND`): each execution is one subprocess running the job's
// command with the same environment contract as a Cloud Run Job execution
// (api.EnvelopeEnv, task.ExecutionLabelsEnv, CLOUD_RUN_JOB,
// CLOUD_RUN_EXECUTION, CLOUD_RUN_TASK_INDEX, CLOUD_RUN_TASK_ATTEMPT).
// Cancel kills the execution's process group (SIGKILL): Cloud Run sends
// SIGTERM and kills after a grace period; Servo's own grace period has
// already passed when it cancels.
type Local struct {
	mu    sync.Mutex
	cmds  map[string][]string // job name → argv
	execs map[string]*localExec
	order []string       // execution names, oldest first
	n     map[string]int // executions started, by job: each job numbers its own
	out   io.Writer
	log   *slog.Logger
	env   []string
}

type localExec struct {
	name   string
	job    string
	labels string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
}

// NewLocal returns a Local runner. commands maps a job's full name to its
// command line (split on spaces; no shell). out receives the executions'
// stdout and stderr (nil: discarded); env is added to each execution's
// environment, after the current process's.
func NewLocal(commands map[string]string, out io.Writer, log *slog.Logger, env ...string) *Local {
	if out == nil {
		out = io.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Local{cmds: map[string][]string{}, execs: map[string]*localExec{}, n: map[string]int{}, out: out, log: log, env: env}
	for job, c := range commands {
		l.cmds[job] = strings.Fields(c)
	}
	return l
}

// Run implements Runner: it starts the job's command.
func (l *Local) Run(_ context.Context, job string, envelope []byte, labels map[string]string) (Execution, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	argv, ok := l.cmds[job]
	if !ok || len(argv) == 0 {
		return Execution{}, fmt.Errorf("jobs: %w %s (no --job-worker command for it)", ErrUnknownJob, job)
	}
	l.n[job]++
	short := fmt.Sprintf("%s-%05d", path.Base(job), l.n[job])
	name := job + "/executions/" + short
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), l.env...)
	cmd.Env = append(cmd.Env,
		api.EnvelopeEnv+"="+string(envelope),
		task.ExecutionLabelsEnv+"="+EncodeLabels(labels),
		"CLOUD_RUN_JOB="+path.Base(job),
		"CLOUD_RUN_EXECUTION="+short,
		"CLOUD_RUN_TASK_INDEX=0",
		"CLOUD_RUN_TASK_ATTEMPT=0",
		"CLOUD_RUN_TASK_COUNT=1",
	)
	cmd.Stdout, cmd.Stderr = l.out, l.out
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return Execution{}, fmt.Errorf("jobs: start %s: %w", name, err)
	}
	e := &localExec{name: name, job: job, labels: EncodeLabels(labels), cmd: cmd, done: make(chan struct{})}
	l.execs[name] = e
	l.order = append(l.order, name)
	l.log.Info("job execution started", "execution", name, "pid", cmd.Process.Pid, "labels", e.labels)
	go func() {
		e.err = cmd.Wait()
		close(e.done)
		l.log.Info("job execution finished", "execution", name, "exit", exitCode(e.err))
	}()
	return Execution{Name: name}, nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// Find implements Runner.
func (l *Local) Find(_ context.Context, job string, labels map[string]string) (Execution, bool, error) {
	want := EncodeLabels(labels)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.order) - 1; i >= 0; i-- {
		e := l.execs[l.order[i]]
		if e.job == job && e.labels == want {
			return Execution{Name: e.name, Done: isDone(e)}, true, nil
		}
	}
	return Execution{}, false, nil
}

func isDone(e *localExec) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Cancel implements Runner: it kills the execution's process group.
func (l *Local) Cancel(_ context.Context, execution string) error {
	l.mu.Lock()
	e := l.execs[execution]
	l.mu.Unlock()
	if e == nil || isDone(e) {
		return nil
	}
	l.log.Info("job execution cancelled: killing it", "execution", execution)
	return kill(e.cmd)
}

// Executions lists the executions started so far, oldest first.
func (l *Local) Executions() []Execution {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Execution, 0, len(l.order))
	for _, n := range l.order {
		out = append(out, Execution{Name: n, Done: isDone(l.execs[n])})
	}
	return out
}

// Process returns the process of a running execution (tests kill it to
// simulate a crash), or nil.
func (l *Local) Process(execution string) *os.Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.execs[execution]; e != nil && !isDone(e) {
		return e.cmd.Process
	}
	return nil
}

// Wait waits until execution has finished and returns its exit code.
func (l *Local) Wait(ctx context.Context, execution string) (int, error) {
	l.mu.Lock()
	e := l.execs[execution]
	l.mu.Unlock()
	if e == nil {
		return 0, fmt.Errorf("jobs: no execution %s", execution)
	}
	select {
	case <-e.done:
		return exitCode(e.err), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close kills every running execution and waits for them (a few seconds
// at most).
func (l *Local) Close() error {
	l.mu.Lock()
	execs := make([]*localExec, 0, len(l.execs))
	for _, e := range l.execs {
		execs = append(execs, e)
	}
	l.mu.Unlock()
	for _, e := range execs {
		if !isDone(e) {
			_ = kill(e.cmd)
		}
	}
	for _, e := range execs {
		select {
		case <-e.done:
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}

// ParseJobWorker parses a --job-worker value, NAME=COMMAND.
func ParseJobWorker(v string) (name, command string, err error) {
	name, command, ok := strings.Cut(v, "=")
	name, command = strings.TrimSpace(name), strings.TrimSpace(command)
	if !ok || name == "" || command == "" {
		return "", "", fmt.Errorf("job worker %q: want NAME=COMMAND", v)
	}
	return name, command, nil
}
