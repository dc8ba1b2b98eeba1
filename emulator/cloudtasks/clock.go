package cloudtasks

import (
	"sort"
	"sync"
	"time"
)

// Clock is the emulator's source of time. Schedule times, backoffs, dispatch
// deadlines, token-bucket refills and tombstone windows all read it, so a test
// can inject a [FakeClock] and move time forward without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once the clock has advanced by at least d. f must not
	// block: the emulator only uses it to wake a goroutine or cancel a
	// context.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending [Clock.AfterFunc] call.
type Timer interface {
	// Stop prevents the call from happening. It reports whether it did so,
	// false meaning the call already happened or the timer was stopped.
	Stop() bool
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FakeClock is a manually advanced [Clock] for tests. Its zero value is not
// usable; create one with [NewFakeClock]. It is safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[uint64]*fakeTimer
}

type fakeTimer struct {
	c    *FakeClock
	id   uint64
	when time.Time
	f    func()
}

// NewFakeClock returns a FakeClock whose time is start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, timers: make(map[uint64]*fakeTimer)}
}

// Now returns the fake current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc registers f to be called when the clock reaches Now()+d. If d is
// not positive, f is called at once, in its own goroutine.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, id: c.seq, when: c.now.Add(d), f: f}
	if d <= 0 {
		go f()
		return t
	}
	c.timers[t.id] = t
	return t
}

// Advance moves the clock forward by d and calls, in deadline order, every
// function whose deadline has been reached. The calls have returned when
// Advance returns.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	for id, t := range c.timers {
		if !t.when.After(now) {
			due = append(due, t)
			delete(c.timers, id)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if due[i].when.Equal(due[j].when) {
			return due[i].id < due[j].id
		}
		return due[i].when.Before(due[j].when)
	})
	for _, t := range due {
		t.f()
	}
}

// AdvanceTo moves the clock forward to t; it does nothing if t is not after
// the current time.
func (c *FakeClock) AdvanceTo(t time.Time) {
	if d := t.Sub(c.Now()); d > 0 {
		c.Advance(d)
	}
}

// Pending returns the deadlines of the timers that have not fired yet, in
// ascending order. Tests use it to wait until the emulator has armed the timer
// they are about to fire.
func (c *FakeClock) Pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.when)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Stop implements [Timer].
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if _, ok := t.c.timers[t.id]; !ok {
		return false
	}
	delete(t.c.timers, t.id)
	return true
}
