package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// StartKept starts the emulator k like Start, but to outlive this process,
// for `servo dev --keep`: it has no watchdog and no parent-death signal,
// leads its own session (so Ctrl-C in the terminal does not reach it), and
// writes its output to logFile. Process.Stop still stops it; otherwise it
// runs until its process group (Process.PID) is killed.
func StartKept(ctx context.Context, k Kind, logFile string) (*Process, error) {
	if logFile == "" {
		return nil, errors.New("emulator: StartKept needs a log file")
	}
	return startWith(ctx, k, logFile)
}

// PID returns the id of the emulator's process group, which is also the
// pid of its leader (Java, or gcloud when it runs through gcloud):
// `kill -- -PID` stops it.
func (p *Process) PID() int { return p.pgid }

// spawnKept starts argv as the leader of a new session, its output
// appended to logFile.
func spawnKept(argv []string, logFile string) (*Process, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CLOUDSDK_CORE_DISABLE_PROMPTS=1")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulator: start %s: %w", argv[0], err)
	}
	p := &Process{pgid: cmd.Process.Pid, out: newRingBuffer(0), done: make(chan struct{}),
		watchdogDone: make(chan struct{}), logPath: logFile}
	close(p.watchdogDone)
	go func() {
		p.waitErr = cmd.Wait()
		p.checkGone()
		close(p.done)
	}()
	return p, nil
}

// logTail returns at most the last max bytes of the file.
func logTail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return string(b)
}

// outputTail returns at most the last n lines and maxBytes bytes of the
// output.
func (p *Process) outputTail(n, maxBytes int) string {
	if p.logPath == "" {
		return p.out.tail(n, maxBytes)
	}
	r := newRingBuffer(64 << 10)
	_, _ = r.Write([]byte(p.Output()))
	return r.tail(n, maxBytes)
}

// Answers reports whether an emulator answers HTTP GET / with 200 at
// host (HOST:PORT), within timeout.
func Answers(ctx context.Context, host string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return (&Process{Host: host}).ping(ctx)
}
