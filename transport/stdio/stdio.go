// Package stdio is the stdio edge: newline-delimited JSON-RPC on stdin and
// stdout. One read loop decodes lines for the connection actor; one write
// loop owns stdout and coalesces flushes.
package stdio

import (
	"bufio"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

// MaxLine is the longest accepted input line. ACP lines carry whole files;
// the Go SDK allows 10 MiB and the TypeScript SDK 32 MiB.
const MaxLine = 64 << 20

// Serve runs one connection over in/out until in reaches EOF, then cancels
// running turns, waits for their answers and flushes everything written.
func Serve(srv *actors.Server, in io.Reader, out io.Writer, log zerolog.Logger) error {
	w := newWriter(out)
	go w.loop()
	conn := srv.Connect(w)
	log = log.With().Str("conn", conn.ID).Str("transport", "stdio").Logger()
	log.Info().Msg("connection open")

	err := readLines(in, func(line []byte, tooLong bool) {
		if tooLong {
			conn.Reject(nil, protocol.ErrParse("line longer than 64 MiB"))
			return
		}
		msg, perr := protocol.Decode(line)
		if perr != nil {
			var id protocol.RawMessage
			if msg != nil {
				id = msg.ID
			}
			conn.Reject(id, perr)
			return
		}
		conn.Deliver(msg)
	})
	if err != nil {
		log.Error().Err(err).Msg("read stdin")
	}
	conn.Close(10 * time.Second)
	w.close()
	log.Info().Msg("connection closed")
	return w.err
}

// readLines calls fn for every non-empty line. Lines longer than MaxLine are
// skipped and answered as parse errors without losing the stream.
func readLines(in io.Reader, fn func(line []byte, tooLong bool)) error {
	r := bufio.NewReaderSize(in, 1<<20)
	var long []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !tooLong {
				long = append(long, chunk...)
				if len(long) > MaxLine {
					tooLong, long = true, nil
				}
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		line := chunk
		if long != nil {
			tooLong = tooLong || len(long)+len(chunk) > MaxLine+1 // +1: the newline
			line = append(long, chunk...)
			long = nil
		}
		if tooLong {
			tooLong = false
			fn(nil, true)
		} else if len(trimNL(line)) > 0 {
			fn(trimNL(line), false)
		}
		if err != nil { // EOF
			return nil
		}
	}
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// writer is the connection's outlet: Send queues without blocking the
// connection actor; loop writes queued frames and flushes once the queue is
// empty, so bursts of small chunks become few syscalls.
type writer struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	spare   [][]byte
	closed  bool
	drained chan struct{}
	out     *bufio.Writer
	err     error
}

func newWriter(out io.Writer) *writer {
	w := &writer{out: bufio.NewWriterSize(out, 64<<10), drained: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *writer) Send(f actors.Frame) {
	w.mu.Lock()
	w.queue = append(w.queue, f.Data)
	w.mu.Unlock()
	w.cond.Signal()
}

func (w *writer) loop() {
	defer close(w.drained)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		batch := w.queue
		w.queue = w.spare[:0]
		closed := w.closed
		w.mu.Unlock()

		for i, data := range batch {
			if w.err == nil {
				_, w.err = w.out.Write(data)
				if w.err == nil {
					w.err = w.out.WriteByte('\n')
				}
			}
			batch[i] = nil
		}
		if w.err == nil {
			w.err = w.out.Flush()
		}
		w.mu.Lock()
		w.spare = batch
		w.mu.Unlock()
		if closed && len(batch) == 0 {
			return
		}
	}
}

// close waits until every queued frame is written.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Signal()
	<-w.drained
}
