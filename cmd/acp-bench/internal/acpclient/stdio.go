package acpclient

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
)

// Stdio talks NDJSON to a server's stdin and stdout.
type Stdio struct {
	in  io.Writer
	out *bufio.Reader
	// Bytes counts every byte read from stdout (newlines included).
	Bytes int64
	// Lines counts every line read.
	Lines int64
	big   []byte
}

// NewStdio wraps the server's stdin and stdout.
func NewStdio(stdin io.Writer, stdout io.Reader) *Stdio {
	return &Stdio{in: stdin, out: bufio.NewReaderSize(stdout, 256<<10)}
}

// Send writes one message and a newline.
func (c *Stdio) Send(msg []byte) error {
	line := make([]byte, 0, len(msg)+1)
	line = append(append(line, msg...), '\n')
	_, err := c.in.Write(line)
	return err
}

// ReadLine returns the next non-empty line without its newline. The slice
// is valid until the next call.
func (c *Stdio) ReadLine() ([]byte, error) {
	for {
		line, err := c.out.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			c.big = append(c.big[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = c.out.ReadSlice('\n')
				c.big = append(c.big, line...)
			}
			line = c.big
		}
		c.Bytes += int64(len(line))
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				c.Lines++
				return trim(line), nil
			}
			return nil, err
		}
		c.Lines++
		if t := trim(line); len(t) > 0 {
			return t, nil
		}
	}
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// ReadUntil reads messages until the response to id, calling onMsg (may be
// nil) for every other message, and returns that response. A server→client
// request is an error: the workloads never trigger one.
func (c *Stdio) ReadUntil(id int64, onMsg func(m *Msg)) (*Msg, error) {
	for {
		line, err := c.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("waiting for response %d: %w", id, err)
		}
		m := Parse(line)
		switch {
		case m.Kind == KindResponse && m.ID == id:
			m.Data = append([]byte(nil), m.Data...)
			return &m, nil
		case m.Kind == KindRequest:
			return nil, fmt.Errorf("unexpected server request %s", line)
		}
		if onMsg != nil {
			onMsg(&m)
		}
	}
}

// Call sends a request and waits for its response; an error response is
// returned as *RPCError.
func (c *Stdio) Call(id int64, msg []byte, onMsg func(m *Msg)) (*Msg, error) {
	if err := c.Send(msg); err != nil {
		return nil, err
	}
	m, err := c.ReadUntil(id, onMsg)
	if err != nil {
		return nil, err
	}
	if m.Err != nil {
		return m, m.Err
	}
	return m, nil
}

// deadlineReader is implemented by *os.File pipes.
type deadlineReader interface{ SetReadDeadline(time.Time) error }

// SetReadDeadline bounds reads when stdout supports deadlines (an os.Pipe).
func SetReadDeadline(r io.Reader, t time.Time) {
	if d, ok := r.(deadlineReader); ok {
		_ = d.SetReadDeadline(t)
	}
}
