//go:build unix

package llm

import (
	"net"
	"syscall"
)

// peerClosed: the other end of conn has closed it (or sent something no
// request asked for), seen without waiting: a peek that finds the end of
// the stream, data, or an error other than "nothing yet".
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK || n > 0
		return true // never wait for the socket to become readable
	}); err != nil {
		return true
	}
	return closed
}
