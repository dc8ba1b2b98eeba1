package servotest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestDeadAddr checks that the address refuses connections and that no
// listener can take its port while the test runs.
func TestDeadAddr(t *testing.T) {
	addr := DeadAddr(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
		t.Fatalf("listen on %s succeeded: the port is not held", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen on %s: %v, want address in use", addr, err)
	}
}
