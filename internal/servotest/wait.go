package servotest

import (
	"fmt"
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor and Until wait before they fail the
// test: minutes, not seconds, because a 2-core machine that runs other
// tests and their emulators has been seen to take tens of seconds over
// what takes one alone. A test that passes waits only as long as it must.
const WaitTimeout = 2 * time.Minute

// maxPause is the longest pause between two looks of WaitFor.
const maxPause = 100 * time.Millisecond

// WaitFor calls get until ok holds for what it returns, and returns that.
// It looks again after 10 ms, then ever less often, up to every 100 ms.
// After WaitTimeout it fails t, naming what it waited for and describing
// the last value with describe (with %+v when describe is nil).
func WaitFor[T any](t testing.TB, what string, get func() T, ok func(T) bool, describe func(T) string) T {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, maxPause) {
		v := get()
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			d := fmt.Sprintf("%+v", v)
			if describe != nil {
				d = describe(v)
			}
			t.Fatalf("gave up after %v waiting for %s: %s", WaitTimeout, what, d)
		}
		time.Sleep(pause)
	}
}

// Until waits until cond holds, as WaitFor; after WaitTimeout it fails t.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitFor(t, what, cond, func(ok bool) bool { return ok }, func(bool) string { return "it never held" })
}
