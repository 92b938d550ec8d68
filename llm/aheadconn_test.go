package llm

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// piecesConn is a connection whose reads return the pieces as they come
// (at most what is asked), then err.
type piecesConn struct {
	net.Conn
	pieces [][]byte
	err    error
	reads  int
}

func (c *piecesConn) Read(p []byte) (int, error) {
	c.reads++
	if len(c.pieces) == 0 {
		return 0, c.err
	}
	n := copy(p, c.pieces[0])
	c.pieces[0] = c.pieces[0][n:]
	if len(c.pieces[0]) == 0 {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

// readAll reads r with the given read sizes (cycled) until an error.
func readAll(r io.Reader, sizes []byte) ([]byte, error) {
	var out []byte
	for i := 0; ; i++ {
		size := 4096
		if len(sizes) > 0 {
			size = 1 + int(sizes[i%len(sizes)])*40
		}
		buf := make([]byte, size)
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if i > 1<<20 {
			return out, errors.New("no progress")
		}
	}
}

// FuzzAheadConn: reading through aheadConn gives the same bytes and the
// same error as reading the connection itself, whatever the socket's
// pieces and the reader's sizes.
func FuzzAheadConn(f *testing.F) {
	f.Add(strings.Repeat("0123456789", 3000), []byte{7, 200, 3}, []byte{102, 255, 0, 1})
	f.Add("short", []byte{0}, []byte{})
	f.Fuzz(func(t *testing.T, data string, cuts, sizes []byte) {
		split := func() [][]byte {
			var ps [][]byte
			rest := []byte(data)
			for i := 0; len(rest) > 0; i++ {
				n := len(rest)
				if len(cuts) > 0 {
					n = min(n, 1+int(cuts[i%len(cuts)])*300)
				}
				ps = append(ps, rest[:n])
				rest = rest[n:]
			}
			return ps
		}
		direct, derr := readAll(&piecesConn{pieces: split(), err: io.EOF}, sizes)
		ahead, aerr := readAll(&aheadConn{Conn: &piecesConn{pieces: split(), err: io.EOF}}, sizes)
		if !bytes.Equal(direct, ahead) || derr != aerr {
			t.Fatalf("direct %d bytes %v, through aheadConn %d bytes %v", len(direct), derr, len(ahead), aerr)
		}
	})
}

func TestAheadConnReadsMoreWhileBehind(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 1<<20)
	// Behind: the socket holds everything; the client asks 4 KiB at a time.
	sock := &piecesConn{pieces: [][]byte{data}, err: io.EOF}
	c := &aheadConn{Conn: sock}
	got, err := readAll(c, []byte{102}) // 4,081-byte reads
	if err != io.EOF || len(got) != len(data) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if want := len(data)/aheadBuffer + 4; sock.reads > want {
		t.Errorf("%d socket reads for 1 MiB, want at most %d", sock.reads, want)
	}
	// At pace: every piece is smaller than what is asked; no buffer.
	sock = &piecesConn{pieces: [][]byte{[]byte("a"), []byte("b"), []byte("c")}, err: io.EOF}
	c = &aheadConn{Conn: sock}
	buf := make([]byte, 4096)
	for range 3 {
		if n, err := c.Read(buf); n != 1 || err != nil || c.buf != nil {
			t.Fatalf("read %d %v, own buffer %v", n, err, c.buf != nil)
		}
	}
	// Caught up after being behind: the buffer is let go once drained.
	sock = &piecesConn{pieces: [][]byte{bytes.Repeat([]byte("y"), 16), []byte("tail")}, err: io.EOF}
	c = &aheadConn{Conn: sock}
	small := make([]byte, 4)
	if n, _ := c.Read(small); n != 4 || !c.ahead { // filled: behind
		t.Fatalf("read %d, ahead %v", n, c.ahead)
	}
	if n, _ := c.Read(small); n != 4 || c.buf == nil || c.w != 12 { // one socket read of the other 12
		t.Fatalf("read %d, own buffer %v holding %d", n, c.buf != nil, c.w)
	}
	if _, err := readAll(c, []byte{0}); err != io.EOF || c.buf != nil {
		t.Fatalf("%v, buffer kept: %v", err, c.buf != nil)
	}
}

// writesConn records what is written to it.
type writesConn struct {
	net.Conn
	buf    bytes.Buffer
	writes int
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.writes++
	return c.buf.Write(p)
}

// onlyReader hides a reader's WriteTo, as the SDK's body wrapper does.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestAheadConnReadFromCopiesEverything(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 5000) // 80,000 bytes: three buffers
	w := &writesConn{}
	c := &aheadConn{Conn: w}
	for range 2 { // the second copy takes the pooled buffer
		w.buf.Reset()
		w.writes = 0
		n, err := io.Copy(c, onlyReader{strings.NewReader(body)})
		if err != nil || n != int64(len(body)) || w.buf.String() != body {
			t.Fatalf("copied %d, err %v, equal %v", n, err, w.buf.String() == body)
		}
		if w.writes != 3 {
			t.Fatalf("%d writes, want 3 (32 KiB each)", w.writes)
		}
	}
}
