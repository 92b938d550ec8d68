//go:build unix

package httpsse

import (
	"errors"
	"net"
	"syscall"
)

// rawConnOf is nc's descriptor; nil, nil when nc has none.
func rawConnOf(nc net.Conn) (syscall.RawConn, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	return sc.SyscallConn()
}

// peerOpen reports whether the client still has its side of the connection
// open: a non-blocking MSG_PEEK read returns EAGAIN (or pending bytes) while
// it does, and 0 bytes (EOF) or an error once it has closed. It consumes
// nothing, so fasthttp is not disturbed; one cheap system call.
func peerOpen(nc net.Conn) bool {
	rc, err := rawConnOf(nc)
	if err != nil {
		return false
	}
	if rc == nil {
		return true
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

// directWriter writes to a socket without waiting (see stream.tryDirect).
// Its callback is made once per stream, not per write (a closure passed to
// RawConn.Write escapes); writes are serialized by stream.busy.
type directWriter struct {
	rc  syscall.RawConn
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// newDirectWriter is nil when nc has no descriptor to write to.
func newDirectWriter(nc net.Conn) *directWriter {
	rc, err := rawConnOf(nc)
	if rc == nil || err != nil {
		return nil
	}
	w := &directWriter{rc: rc}
	w.fn = w.write1
	return w
}

func (w *directWriter) write1(fd uintptr) bool {
	for {
		w.n, w.err = syscall.Write(int(fd), w.b)
		if w.err != syscall.EINTR {
			return true
		}
	}
}

// write writes b with one non-blocking write: n is what the socket took
// (0 when its buffer is full); err only for a failed connection.
func (w *directWriter) write(b []byte) (n int, err error) {
	w.b = b
	err = w.rc.Write(w.fn)
	n, werr := max(w.n, 0), w.err
	w.b, w.err = nil, nil
	if errors.Is(werr, syscall.EAGAIN) {
		werr = nil
	}
	if err == nil {
		err = werr
	}
	return n, err
}
