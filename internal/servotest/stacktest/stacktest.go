// Package stacktest starts Servo's local stack (package devstack) for a
// test, and drives its control API and callbacks as clients and workers
// do. It is apart from package servotest, whose helpers know nothing of
// Servo, because devstack imports most of Servo and the tests of those
// packages import servotest; only tests import stacktest.
package stacktest

import (
	"context"
	"testing"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/devstack"
)

// Start starts a local stack with o for t and closes it when t and its
// subtests are done. The stack runs on the test binary's emulators
// (emulatortest.Main; ReuseEmulators, o's hosts first), listens on a free
// port of 127.0.0.1 unless o.Addr says otherwise, and keeps its data in
// project emulatortest.ProjectID(t) unless o.Project names one.
func Start(t testing.TB, o devstack.Options) *devstack.Stack {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Project == "" {
		o.Project = emulatortest.ProjectID(t)
	}
	o.ReuseEmulators = true
	s, err := devstack.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// NewAPI is t's client of s's control API.
func NewAPI(t testing.TB, s *devstack.Stack) API {
	return API{T: t, URL: s.URL}
}
