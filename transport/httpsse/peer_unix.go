//go:build unix

package httpsse

import (
	"errors"
	"net"
	"syscall"
)

// peerOpen reports whether the client still has its side of the connection
// open: a non-blocking MSG_PEEK read returns EAGAIN (or pending bytes) while
// it does, and 0 bytes (EOF) or an error once it has closed. It consumes
// nothing, so fasthttp is not disturbed; one cheap syscall per batch.
func peerOpen(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var probe [1]byte
	err = rc.Control(func(fd uintptr) {
		n, _, rerr := syscall.Recvfrom(int(fd), probe[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == nil:
			open = n > 0
		case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EINTR):
		default:
			open = false
		}
	})
	return open && err == nil
}
