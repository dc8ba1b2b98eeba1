// Package emulatortest runs a test binary against the Google Cloud
// emulators: one Firestore and/or Pub/Sub emulator per test binary, shared
// by its tests, which isolate themselves with a project id each.
//
//	func TestMain(m *testing.M) { emulatortest.Main(m, emulator.Firestore) }
//
//	func TestSomething(t *testing.T) {
//		client, err := firestore.NewClient(ctx, emulatortest.ProjectID(t))
//		...
//	}
//
// Main sets FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST, so the
// client libraries find the emulators by themselves.
package emulatortest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/servo-dev/servo/emulator"
)

// running holds the emulators Main started.
var running struct {
	mu    sync.Mutex
	procs map[emulator.Kind]*emulator.Process
}

// Main starts the named emulators once for the test binary, sets their
// *_EMULATOR_HOST variables, runs the tests and exits with their result.
// It stops the emulators whatever happens: normal exit, failure, a panic in
// TestMain's flow, SIGINT or SIGTERM. (If the binary dies abruptly, by
// SIGKILL or a `go test -timeout` panic, the emulators' watchdogs stop
// them; see package emulator.)
//
// If an emulator cannot start, for example because gcloud or Java is
// missing, Main prints why and exits with status 1: tests never skip
// silently for want of an emulator.
func Main(m *testing.M, kinds ...emulator.Kind) {
	os.Exit(run(m, kinds...))
}

// Run is Main without the exit: it returns the tests' exit code, for a
// TestMain with its own clean-up to do after the emulators stopped.
func Run(m *testing.M, kinds ...emulator.Kind) int { return run(m, kinds...) }

func run(m *testing.M, kinds ...emulator.Kind) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "emulatortest: %v: stopping emulators\n", sig)
			stopAll()
			code := 128 + 15
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		case <-finished:
		}
	}()

	defer stopAll() // also runs when TestMain's flow panics
	if err := startAll(kinds); err != nil {
		fmt.Fprintf(os.Stderr, "emulatortest: %v\n", err)
		return 1
	}
	// The store's strict mode (on against the emulator) logs every query
	// production would refuse for want of an index; the emulator served
	// it, so only this log tells: the binary fails when it is not empty.
	strict, err := os.CreateTemp("", "servo-strict-*.log")
	if err != nil {
		fmt.Fprintf(os.Stderr, "emulatortest: %v\n", err)
		return 1
	}
	strict.Close()
	defer os.Remove(strict.Name())
	os.Setenv(StrictLogEnv, strict.Name())
	code := m.Run()
	if b, _ := os.ReadFile(strict.Name()); len(b) > 0 {
		fmt.Fprintf(os.Stderr, "emulatortest: queries production Firestore would refuse (store strict mode; declare the index in store.Indexes):\n%s", b)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// StrictLogEnv names the file the store's strict mode appends refused
// queries to (store.StrictLogEnv; a store test keeps the two equal).
const StrictLogEnv = "SERVO_STORE_STRICT_LOG"

// startAll starts the emulators concurrently and sets their variables.
func startAll(kinds []emulator.Kind) error {
	kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
	ctx, cancel := context.WithTimeout(context.Background(), emulator.StartTimeout)
	defer cancel()
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() {
			p, err := emulator.Start(ctx, k)
			if err != nil {
				errs[i] = fmt.Errorf("start %s emulator: %w", k, err)
				return
			}
			running.mu.Lock()
			defer running.mu.Unlock()
			if running.procs == nil {
				running.procs = map[emulator.Kind]*emulator.Process{}
			}
			running.procs[k] = p
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	running.mu.Lock()
	defer running.mu.Unlock()
	for _, p := range running.procs {
		if err := os.Setenv(p.EnvVar(), p.Host); err != nil {
			return fmt.Errorf("set %s: %w", p.EnvVar(), err)
		}
	}
	return nil
}

// stopAll stops every emulator Main started; it may be called repeatedly.
func stopAll() {
	running.mu.Lock()
	defer running.mu.Unlock()
	for k, p := range running.procs {
		if err := p.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "emulatortest: stop %s emulator: %v\n", k, err)
		}
	}
}

// host returns the host of the running emulator k or fails the test.
func host(t testing.TB, k emulator.Kind) string {
	t.Helper()
	running.mu.Lock()
	p := running.procs[k]
	running.mu.Unlock()
	if p == nil {
		t.Fatalf("emulatortest: no %s emulator is running: name it in TestMain's emulatortest.Main(m, ...)", k)
	}
	return p.Host
}

// Emulator returns the running emulator k that Main started (to freeze
// and thaw it in fault-injection tests), and fails the test if there is
// none.
func Emulator(t testing.TB, k emulator.Kind) *emulator.Process {
	t.Helper()
	host(t, k)
	running.mu.Lock()
	defer running.mu.Unlock()
	return running.procs[k]
}

// FirestoreHost returns the host:port of the Firestore emulator Main
// started, and fails the test if there is none.
func FirestoreHost(t testing.TB) string {
	t.Helper()
	return host(t, emulator.Firestore)
}

// PubSubHost returns the host:port of the Pub/Sub emulator Main started,
// and fails the test if there is none.
func PubSubHost(t testing.TB) string {
	t.Helper()
	return host(t, emulator.PubSub)
}

var projectSeq atomic.Uint64

// ProjectID returns a Google Cloud project id unique to this call, for a
// test to keep its data apart from other tests sharing the emulators: "t-",
// a short hash of the test's name and this process, and a counter, e.g.
// "t-3fa94c1b-7". It is lowercase, at most 30 characters, starts with a
// letter and ends with a digit, like a real project id.
func ProjectID(t testing.TB) string {
	t.Helper()
	h := sha256.Sum256([]byte(strconv.Itoa(os.Getpid()) + "/" + t.Name()))
	return fmt.Sprintf("t-%x-%d", h[:4], projectSeq.Add(1))
}
