package functions

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/servotest"
)

var errHiccup = errors.New("secret manager hiccup")

// TestLazyRetriesWithBackoff drives a lazy through a script of calls, each
// at a clock offset, against a build that fails a given number of times.
func TestLazyRetriesWithBackoff(t *testing.T) {
	type call struct {
		at        time.Duration // clock offset from the start
		wantBuild int           // builds run so far, after this call
		wantErr   bool
		backoff   bool          // the error says the call was refused during the backoff
		retryIn   time.Duration // wanted retryAfter(err) when wantErr
	}
	tests := []struct {
		name  string
		fails int // the first fails builds fail
		calls []call
	}{
		{"success is kept", 0, []call{
			{at: 0, wantBuild: 1},
			{at: 0, wantBuild: 1},
			{at: time.Hour, wantBuild: 1},
		}},
		{"fail, fail, succeed, then reuse", 2, []call{
			{at: 0, wantBuild: 1, wantErr: true, retryIn: time.Second},
			// Within the 1 s backoff: refused at once, no build.
			{at: 500 * time.Millisecond, wantBuild: 1, wantErr: true, backoff: true, retryIn: time.Second},
			{at: 999 * time.Millisecond, wantBuild: 1, wantErr: true, backoff: true, retryIn: time.Second},
			// Past it: builds again, fails, backs off 2 s.
			{at: time.Second, wantBuild: 2, wantErr: true, retryIn: 2 * time.Second},
			{at: 2500 * time.Millisecond, wantBuild: 2, wantErr: true, backoff: true, retryIn: time.Second},
			{at: 3 * time.Second, wantBuild: 3},
			{at: 3 * time.Second, wantBuild: 3},
			{at: time.Hour, wantBuild: 3},
		}},
		{"backoff doubles up to 30 s", 100, []call{
			{at: 0, wantBuild: 1, wantErr: true, retryIn: time.Second},
			{at: 1 * time.Second, wantBuild: 2, wantErr: true, retryIn: 2 * time.Second},
			{at: 3 * time.Second, wantBuild: 3, wantErr: true, retryIn: 4 * time.Second},
			{at: 7 * time.Second, wantBuild: 4, wantErr: true, retryIn: 8 * time.Second},
			{at: 15 * time.Second, wantBuild: 5, wantErr: true, retryIn: 16 * time.Second},
			{at: 31 * time.Second, wantBuild: 6, wantErr: true, retryIn: 30 * time.Second},
			{at: 60 * time.Second, wantBuild: 6, wantErr: true, backoff: true, retryIn: time.Second},
			{at: 61 * time.Second, wantBuild: 7, wantErr: true, retryIn: 30 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := servotest.NewClock(start)
			builds := 0
			l := newLazy(func(context.Context) (int, error) {
				builds++
				if builds <= tc.fails {
					return 0, errHiccup
				}
				return 42, nil
			})
			l.now = clk.Now
			for i, c := range tc.calls {
				clk.Set(start.Add(c.at))
				v, err := l.get(context.Background())
				if builds != c.wantBuild {
					t.Fatalf("call %d at %v: %d builds, want %d", i, c.at, builds, c.wantBuild)
				}
				if !c.wantErr {
					if err != nil || v != 42 {
						t.Fatalf("call %d at %v: %v, %v; want 42", i, c.at, v, err)
					}
					continue
				}
				if !errors.Is(err, errHiccup) {
					t.Fatalf("call %d at %v: error %v, want the build's", i, c.at, err)
				}
				if errors.Is(err, errBackingOff) != c.backoff {
					t.Fatalf("call %d at %v: error %q, backing off %v", i, c.at, err, c.backoff)
				}
				if got := retryAfter(err); got != c.retryIn {
					t.Fatalf("call %d at %v: retry after %v, want %v", i, c.at, got, c.retryIn)
				}
			}
		})
	}
}

// TestLazyConcurrentCallsShareOneBuild: calls arriving while a build runs
// wait for it and run no build of their own, whether it succeeds or fails.
func TestLazyConcurrentCallsShareOneBuild(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "success", true: "failure"}[fail], func(t *testing.T) {
			var builds atomic.Int32
			release := make(chan struct{})
			entered := make(chan struct{})
			l := newLazy(func(context.Context) (string, error) {
				if builds.Add(1) == 1 {
					close(entered)
				}
				<-release
				if fail {
					return "", errHiccup
				}
				return "ok", nil
			})
			l.now = servotest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Now
			const callers = 16
			errs := make([]error, callers)
			vals := make([]string, callers)
			var wg sync.WaitGroup
			wg.Go(func() { vals[0], errs[0] = l.get(context.Background()) })
			<-entered
			for i := 1; i < callers; i++ {
				wg.Go(func() { vals[i], errs[i] = l.get(context.Background()) })
			}
			// Let the other callers reach the wait before the build ends.
			for {
				l.mu.Lock()
				w := l.waiters
				l.mu.Unlock()
				if w == callers-1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			close(release)
			wg.Wait()
			if n := builds.Load(); n != 1 {
				t.Fatalf("%d builds for %d concurrent calls, want 1", n, callers)
			}
			for i := range callers {
				if fail && !errors.Is(errs[i], errHiccup) {
					t.Fatalf("caller %d: %v, want the build's error", i, errs[i])
				}
				if !fail && (errs[i] != nil || vals[i] != "ok") {
					t.Fatalf("caller %d: %q, %v", i, vals[i], errs[i])
				}
			}
		})
	}
}

// TestLazyWaiterHonoursItsContext: a caller waiting for another's build
// stops when its own context ends; the build goes on for the others.
func TestLazyWaiterHonoursItsContext(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	l := newLazy(func(context.Context) (int, error) {
		close(entered)
		<-release
		return 7, nil
	})
	done := make(chan int)
	go func() {
		v, _ := l.get(context.Background())
		done <- v
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter with a cancelled context: %v", err)
	}
	close(release)
	if v := <-done; v != 7 {
		t.Fatalf("builder got %d", v)
	}
	if v, err := l.get(ctx); v != 7 || err != nil {
		t.Fatalf("after the build: %d, %v", v, err)
	}
}

// TestLazyPanicIsAFailure: a panicking build is a failed build, retried
// after the backoff.
func TestLazyPanicIsAFailure(t *testing.T) {
	clk := servotest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	n := 0
	l := newLazy(func(context.Context) (int, error) {
		n++
		if n == 1 {
			panic("boom")
		}
		return n, nil
	})
	l.now = clk.Now
	if _, err := l.get(context.Background()); err == nil {
		t.Fatal("panicking build: no error")
	}
	clk.Advance(time.Second)
	if v, err := l.get(context.Background()); v != 2 || err != nil {
		t.Fatalf("after the backoff: %d, %v", v, err)
	}
}
