// Package servotest holds small helpers that Servo's tests share: a clock
// tests set by hand, a buffer that concurrent writers (loggers, child
// processes) can share with the test reading it, HTTP requests with their
// answers read whole (Do, GetJSON), and waits with one generous deadline
// (WaitFor, Until). Package stacktest starts a local stack for a test and
// drives its API.
package servotest

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// Clock is a clock that moves only when the test says. Its Now method
// fits the Now fields of Servo's configurations.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Buffer is an io.Writer safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the complete lines written so far.
func (b *Buffer) Lines() []string {
	s := strings.TrimSuffix(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
