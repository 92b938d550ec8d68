// Package stdio is the stdio edge: newline-delimited JSON-RPC on stdin and
// stdout. One read loop decodes lines for the connection actor; one write
// loop owns stdout and coalesces flushes.
package stdio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

// MaxLine is the longest accepted input line (64 MiB). ACP lines carry whole
// files; the Go SDK allows 10 MiB and the TypeScript SDK 32 MiB. A longer
// line is skipped, never buffered whole, and answered -32600 with its id
// when the id is in its first 64 KiB (see protocol.PeekID).
const MaxLine = 64 << 20

// peekHead is how much of an overlong line is kept to read its id.
const peekHead = 64 << 10

// DrainTimeout bounds the end of a connection (stdin EOF or a signal):
// running turns are cancelled and their prompts answered within it.
const DrainTimeout = 5 * time.Second

// Serve runs one connection over in/out until in reaches EOF or ctx is
// done (a signal), then cancels running turns, waits for their answers
// (what completed, the partial answer included, is persisted by then) and
// flushes everything written.
func Serve(ctx context.Context, srv *actors.Server, in io.Reader, out io.Writer, log zerolog.Logger) error {
	w := newWriter(out)
	go w.loop()
	conn := srv.Connect(w)
	log = log.With().Str("conn", conn.ID).Str("transport", "stdio").Logger()
	log.Info().Msg("connection open")

	var stopped atomic.Bool
	readDone := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				readDone <- fmt.Errorf("stdin reader panic: %v", r)
			}
		}()
		readDone <- readLines(in, func(line []byte, tooLong bool) {
			if stopped.Load() {
				return // shutting down: nothing new starts
			}
			deliver(conn, line, tooLong)
		})
	}()
	select {
	case err := <-readDone:
		if err != nil {
			log.Error().Err(err).Msg("read stdin")
		}
	case <-ctx.Done():
		// The reader may stay blocked in a read of stdin; it is abandoned.
		stopped.Store(true)
		log.Info().Msg("signal: cancelling running turns")
	}
	conn.Close(DrainTimeout)
	w.close()
	log.Info().Msg("connection closed")
	return w.err
}

func deliver(conn *actors.Conn, line []byte, tooLong bool) {
	if tooLong {
		conn.Reject(protocol.PeekID(line), protocol.ErrInvalidRequest("message longer than 64 MiB (the stdio line limit)"))
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
}

// readLines calls fn for every non-empty line. Lines longer than MaxLine are
// not kept: fn gets their first peekHead bytes with tooLong set, and the
// stream goes on with the next line.
func readLines(in io.Reader, fn func(line []byte, tooLong bool)) error {
	r := bufio.NewReaderSize(in, 1<<20)
	var long []byte
	var head []byte // the start of an overlong line
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !tooLong {
				long = append(long, chunk...)
				if len(long) > MaxLine {
					tooLong = true
					head = append([]byte(nil), long[:peekHead]...)
					long = nil
				}
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		line := chunk
		if long != nil {
			if len(long)+len(chunk) > MaxLine+1 { // +1: the newline
				tooLong = true
				head = append([]byte(nil), long[:min(len(long), peekHead)]...)
			}
			line = append(long, chunk...)
			long = nil
		}
		if tooLong {
			tooLong = false
			fn(head, true)
			head = nil
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
// empty, so bursts of small chunks become few syscalls. A written frame is
// given back (Frame.Written): the bufio.Writer copied it or wrote it out.
type writer struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []actors.Frame
	spare   []actors.Frame
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
	w.queue = append(w.queue, f)
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

		for i, f := range batch {
			if w.err == nil {
				_, w.err = w.out.Write(f.Data)
				if w.err == nil {
					w.err = w.out.WriteByte('\n')
				}
			}
			f.Written()
			batch[i] = actors.Frame{}
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
