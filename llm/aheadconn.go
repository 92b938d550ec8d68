package llm

import (
	"context"
	"io"
	"net"
	"sync"
)

// aheadBuffer is what a model connection reads per system call while the
// server sends faster than the stream is decoded.
const aheadBuffer = 64 << 10

// aheadConn reads a model connection in larger pieces while the peer is
// ahead. The HTTP client reads its connections through a 4 KiB buffer: over
// plain HTTP (a model on the same machine or network) a stream that
// outruns us costs a system call per ~4 KiB. When a read fills all the
// space it was given, the next one takes up to aheadBuffer bytes into a
// buffer of the connection's own, which later reads are served from; once
// a read finds less than that (caught up) and the buffer is drained, it is
// let go. A stream at a model's pace never fills 4 KiB and never gets one,
// so idle and slow connections cost nothing more. Over TLS the records are
// buffered whole by crypto/tls anyway.
type aheadConn struct {
	net.Conn
	buf   []byte // buf[r:w] is read from the socket, not yet returned
	r, w  int
	err   error // the socket's error, returned once buf is drained
	ahead bool  // the last socket read filled what it was given
}

func (c *aheadConn) Read(p []byte) (int, error) {
	if c.r < c.w {
		n := copy(p, c.buf[c.r:c.w])
		c.r += n
		if c.r == c.w && !c.ahead {
			c.buf = nil // caught up
		}
		return n, nil
	}
	if c.err != nil {
		err := c.err
		c.err = nil
		return 0, err
	}
	if !c.ahead || len(p) >= aheadBuffer {
		n, err := c.Conn.Read(p)
		c.ahead = n > 0 && n == len(p)
		return n, err
	}
	if c.buf == nil {
		c.buf = make([]byte, aheadBuffer)
	}
	n, err := c.Conn.Read(c.buf)
	c.ahead = n == len(c.buf)
	c.r, c.w = 0, n
	if n == 0 {
		if !c.ahead {
			c.buf = nil
		}
		return 0, err
	}
	c.err = err
	return c.Read(p)
}

// copyBuffers are ReadFrom's buffers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom writes what r yields to the connection. The HTTP client copies
// a request body to its connection with io.Copy; the SDK wraps the body in
// a reader without WriteTo, so io.Copy would allocate a 32 KiB buffer per
// model call. This copies through a pooled one.
func (c *aheadConn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, r, *bp)
}

// dialAhead wraps what dial returns in an aheadConn.
func dialAhead(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &aheadConn{Conn: conn}, nil
	}
}
