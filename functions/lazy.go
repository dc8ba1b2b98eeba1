package functions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Backoff of a failed initialisation: the first retry waits
// initMinBackoff, each later one twice as long, up to initMaxBackoff.
const (
	initMinBackoff = time.Second
	initMaxBackoff = 30 * time.Second
)

// errBackingOff is wrapped by lazy.get's error while a failed build waits
// for its backoff to pass.
var errBackingOff = errors.New("functions: initialisation failed; retrying after a backoff")

// initError is lazy.get's error: the last build's failure and when the
// next build may run.
type initError struct {
	err     error
	retryIn time.Duration
	backoff bool // the build did not run for this call
}

func (e *initError) Error() string {
	if e.backoff {
		return fmt.Sprintf("%v (next attempt in %v): %v", errBackingOff, e.retryIn.Round(time.Millisecond), e.err)
	}
	return e.err.Error()
}

func (e *initError) Unwrap() []error {
	if e.backoff {
		return []error{errBackingOff, e.err}
	}
	return []error{e.err}
}

// retryAfter returns when a caller of get may try again (at least 1 s,
// whole seconds, for a Retry-After header), given get's error.
func retryAfter(err error) time.Duration {
	var ie *initError
	if errors.As(err, &ie) && ie.retryIn > 0 {
		return max(time.Second, ie.retryIn.Round(time.Second))
	}
	return initMinBackoff
}

// lazy builds a value on first use and keeps it once built, like
// sync.OnceValues, except that a failed build is not kept: a later call
// builds again once a backoff has passed (initMinBackoff doubling up to
// initMaxBackoff). Concurrent calls share one build in flight; calls during
// the backoff return the last error at once, without building.
type lazy[T any] struct {
	build func(context.Context) (T, error)
	now   func() time.Time // default time.Now

	mu       sync.Mutex
	built    bool
	val      T
	err      error         // last failure
	failures int           // consecutive failures
	retryAt  time.Time     // no build before this time
	inflight chan struct{} // closed when the build in flight ends
	waiters  int           // calls waiting for the build in flight (for tests)
}

// newLazy returns a lazy that builds with build.
func newLazy[T any](build func(context.Context) (T, error)) *lazy[T] {
	return &lazy[T]{build: build}
}

func (l *lazy[T]) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// run calls build; a panic is a failed build (and never leaves the build
// in flight for ever).
func (l *lazy[T]) run(ctx context.Context) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("functions: initialisation panicked: %v", r)
		}
	}()
	return l.build(ctx)
}

// get returns the built value, building it if needed. The build runs with
// ctx's values but not its cancellation (what it builds outlives the
// request). A caller waiting for another's build stops waiting when ctx
// ends. Errors are *initError.
func (l *lazy[T]) get(ctx context.Context) (T, error) {
	var zero T
	l.mu.Lock()
	for {
		if l.built {
			v := l.val
			l.mu.Unlock()
			return v, nil
		}
		ch := l.inflight
		if ch == nil {
			break
		}
		l.waiters++
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		l.mu.Lock()
		l.waiters--
		if !l.built && l.inflight == ch {
			// ctx ended before the build did.
			l.mu.Unlock()
			return zero, &initError{err: fmt.Errorf("functions: waiting for initialisation: %w", ctx.Err())}
		}
		if !l.built && l.err != nil && l.clock().Before(l.retryAt) {
			// The build this call waited for failed: report it.
			err := &initError{err: l.err, retryIn: l.retryAt.Sub(l.clock())}
			l.mu.Unlock()
			return zero, err
		}
	}
	if now := l.clock(); l.err != nil && now.Before(l.retryAt) {
		err := &initError{err: l.err, retryIn: l.retryAt.Sub(now), backoff: true}
		l.mu.Unlock()
		return zero, err
	}
	ch := make(chan struct{})
	l.inflight = ch
	l.mu.Unlock()

	v, err := l.run(context.WithoutCancel(ctx))

	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight = nil
	close(ch)
	if err != nil {
		l.failures++
		l.err = err
		wait := initMaxBackoff
		if l.failures <= 5 { // 1 s · 2^5 = 32 s > initMaxBackoff
			wait = min(initMaxBackoff, initMinBackoff<<(l.failures-1))
		}
		l.retryAt = l.clock().Add(wait)
		return zero, &initError{err: err, retryIn: wait}
	}
	l.built, l.val, l.err, l.failures = true, v, nil, 0
	return v, nil
}
