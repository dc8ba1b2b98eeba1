package servotest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// DeadAddr returns an address of 127.0.0.1 that refuses connections for
// the rest of the test: a port bound but never listened on. Holding the
// port keeps every other listener of the machine (another test's emulator,
// say) off it, which a port closed after choosing it would not.
func DeadAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("servotest: dead address: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("servotest: dead address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("servotest: dead address: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
