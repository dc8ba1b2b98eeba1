package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Build builds the servo command into dir and returns the binary's path.
// moduleDir is the root of Servo's module.
func Build(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "servo")
	// -trimpath: the copies of the module the mutation check builds share
	// the build cache with the original.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/servo")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("faults: build servo: %w\n%s", err, out)
	}
	return bin, nil
}

// ErrExitedAtStart is returned by Start when servo dev exited before it was
// ready (a failpoint armed may crash it then).
var ErrExitedAtStart = errors.New("faults: servo dev exited at start")

// ServoConfig is how to run `servo dev` against running emulators.
type ServoConfig struct {
	Binary, Addr, Project string
	FirestoreHost, PubSub string
	Workers               map[string]string
	SweepEvery            time.Duration
	StartTimeout          time.Duration
	StoreTimeout          time.Duration
	// KeysJSON is the token key ring, the same for every start, so that
	// tokens survive a restart as they do in production.
	KeysJSON []byte
	// LogDir receives one log file per start.
	LogDir string
	// QuotasFile, when set, is servo dev's --quotas file (per-tenant and
	// per-worker limits).
	QuotasFile string
}

// Servo is `servo dev` run as a child process that can be killed and
// started again against the same emulators.
type Servo struct {
	cfg    ServoConfig
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	logs   []string
}

// NewServo returns a Servo not yet started.
func NewServo(cfg ServoConfig) *Servo { return &Servo{cfg: cfg} }

// URL is the base URL of the API and callbacks.
func (s *Servo) URL() string { return "http://" + s.cfg.Addr }

// Start starts servo dev and waits until GET /healthz answers 200.
func (s *Servo) Start(ctx context.Context) error { return s.StartEnv(ctx) }

// StartEnv starts servo dev with env added to its environment (the
// failpoints to arm, SERVO_FAILPOINTS) and waits until GET /healthz
// answers 200.
func (s *Servo) StartEnv(ctx context.Context, env ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.done: // it exited on its own (a failpoint's crash)
			s.cmd = nil
		default:
			return errors.New("faults: servo is running")
		}
	}
	s.starts++
	logFile := filepath.Join(s.cfg.LogDir, fmt.Sprintf("servo-%d.log", s.starts))
	s.logs = append(s.logs, logFile)
	args := []string{"dev", "--no-demo", "--addr", s.cfg.Addr, "--project", s.cfg.Project,
		"--firestore", s.cfg.FirestoreHost, "--pubsub", s.cfg.PubSub,
		"--sweep-every", s.cfg.SweepEvery.String(), "--start-timeout", s.cfg.StartTimeout.String(),
		"--store-timeout", s.cfg.StoreTimeout.String(), "--log", logFile}
	for name, u := range s.cfg.Workers {
		args = append(args, "--worker", name+"="+u)
	}
	if s.cfg.QuotasFile != "" {
		args = append(args, "--quotas", s.cfg.QuotasFile)
	}
	cmd := exec.Command(s.cfg.Binary, args...)
	cmd.Env = append(append(os.Environ(), "SERVO_TOKEN_KEYS="+string(s.cfg.KeysJSON)), env...)
	out, err := os.Create(logFile + ".out")
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("faults: start servo: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(logFile + ".out")
			s.cmd = nil
			return fmt.Errorf("%w:\n%s", ErrExitedAtStart, b)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if res, err := hc.Get(s.URL() + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("faults: servo dev did not become ready in 90s")
		}
	}
}

// Exited is closed when the servo dev last started exits, on its own or
// not; nil if it was not started.
func (s *Servo) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Kill kills servo dev with SIGKILL (its whole process group) and waits
// for it to be gone: a crash, nothing flushed.
func (s *Servo) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Stop stops servo dev as Ctrl-C does (SIGINT), then kills it after 10 s.
func (s *Servo) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
		s.mu.Lock()
		s.cmd = nil
		s.mu.Unlock()
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Logs returns everything servo dev wrote: its JSON logs and its output,
// over every start.
func (s *Servo) Logs() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []byte
	for _, f := range s.logs {
		for _, name := range []string{f, f + ".out"} {
			b, _ := os.ReadFile(name)
			all = append(all, b...)
		}
	}
	return all
}
