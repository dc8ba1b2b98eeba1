package faults_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator"
	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/faults"
)

var (
	long     = flag.Bool("faults.long", false, "run the long mode: random fault schedules for -faults.duration, then the steady load")
	duration = flag.Duration("faults.duration", 5*time.Minute, "long mode: how long faults are injected while tasks are submitted")
	rate     = flag.Float64("faults.rate", 6, "long mode: tasks submitted per second")
	seed     = flag.Uint64("faults.seed", 0, "the seed of the task mix and the schedule (0: from the clock; printed)")
	steady   = flag.Duration("faults.steady", 5*time.Minute, "long mode: how long the steady load is held, with no fault")
	steadyCB = flag.Float64("faults.steady-rate", 50, "long mode: callbacks per second of the steady load")
)

// servoBin is the servo command TestMain built.
var servoBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "servo-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	servoBin, err = faults.Build(ctx, "../..", dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := emulatortest.Run(m, emulator.Firestore, emulator.PubSub)
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestFaults runs the real stack (servo dev as a child process against this
// binary's emulators, the simulated workers over HTTP) through every fault
// kind and checks the history against the invariants. With -faults.long it
// runs random schedules for -faults.duration, then the steady load.
func TestFaults(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	cfg := faults.Config{
		Firestore: emulatortest.Emulator(t, emulator.Firestore), PubSub: emulatortest.Emulator(t, emulator.PubSub),
		Binary: servoBin, Addr: freeAddr(t), Project: emulatortest.ProjectID(t), LogDir: logDir(t),
		Seed: s, Tasks: 135, Rate: 3, Schedule: faults.ShortSchedule, Priority: true, Progress: testWriter{t},
	}
	if *long {
		cfg.Tasks, cfg.Rate, cfg.Duration, cfg.Schedule = 0, *rate, *duration, nil
		cfg.Steady, cfg.SteadyRate = *steady, *steadyCB
		cfg.Modes = faults.AllModes
		cfg.Drain = 5 * time.Minute
	}
	t.Logf("seed %d", s)
	res, err := faults.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	if len(res.Violations) > 0 {
		t.Errorf("%d invariant violations:\n%s", len(res.Violations), faults.Report(res.History, res.Violations))
	}
	if got := len(res.Faults); got < len(cfg.Schedule) {
		t.Errorf("%d faults injected, want %d", got, len(cfg.Schedule))
	}
	for _, m := range res.Modes {
		if m != faults.ModeOK && res.Worker[m] == 0 {
			t.Errorf("no task met the worker fault %s", m)
		}
	}
	for _, f := range res.Faults {
		if strings.HasPrefix(f.Kind, "crash-") && f.Crashes == 0 {
			t.Errorf("fault %s crashed servo dev 0 times: its failpoint was never hit", f.Kind)
		}
	}
	if res.Stats.PriorityWaited == 0 {
		t.Errorf("no priority-1 task of %s was seen waiting for a run slot: the priority workload did not saturate the worker", faults.PriorityWorker)
	}
	if res.Stats.Answers503 == 0 {
		t.Errorf("no 503 answer: the Firestore freeze did not reach the callbacks")
	}
}

// logDir is where Servo's logs go: kept, and named, when the test fails.
func logDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "servo-faults-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Servo's logs are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestFaultsSlowBody: a heartbeat whose body trickles in over
// faults.SlowBody extends the lease from the time it was received in full
// (ADR-023 §4, docs/contract.md: the server uses receipt time), so the next
// heartbeat, on time by that rule but late by the slow one's first byte,
// is accepted and the attempt is never declared a zombie (the lease
// invariant).
func TestFaultsSlowBody(t *testing.T) {
	cfg := faults.Config{
		Firestore: emulatortest.Emulator(t, emulator.Firestore), PubSub: emulatortest.Emulator(t, emulator.PubSub),
		Binary: servoBin, Addr: freeAddr(t), Project: emulatortest.ProjectID(t), LogDir: logDir(t),
		Seed: 1, Tasks: 4, Rate: 2, Modes: []string{faults.ModeSlowBody}, Drain: 2 * time.Minute, Progress: testWriter{t},
	}
	res, err := faults.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Report())
	if len(res.Violations) > 0 {
		t.Errorf("%d invariant violations:\n%s", len(res.Violations), faults.Report(res.History, res.Violations))
	}
	if res.Worker[faults.ModeSlowBody] != int64(cfg.Tasks) {
		t.Errorf("%d tasks met the slow body, want %d", res.Worker[faults.ModeSlowBody], cfg.Tasks)
	}
}
