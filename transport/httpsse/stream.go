package httpsse

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/iac-code/iac-code/protocol"
)

// endGrace is how long a stream the server ended may take to write its last
// bytes before its TCP connection is closed under it (a client that stopped
// reading would otherwise hold the writer and the socket forever).
const endGrace = 2 * time.Second

var retryTail = "\nretry: " + strconv.Itoa(RetryMillis) + "\n\n"

// stream is one attached GET. Its writer goroutine (the fasthttp body stream
// writer) sleeps until woken, then writes every available event and flushes
// once, so bursts of small chunks cost few syscalls.
type stream struct {
	c      *conn
	sl     *slot
	nc     net.Conn
	wakeCh chan struct{}
	done   chan struct{}
	// Set under c.mu before done is closed.
	ended bool
	drain bool
	final []byte
	// notify, for the stream of a GET on another pod, replaces wakeCh: it
	// tells that pod to take (once until it does: pending).
	notify  func()
	pending atomic.Bool
}

func newStream(c *conn, sl *slot, nc net.Conn) *stream {
	return &stream{c: c, sl: sl, nc: nc, wakeCh: make(chan struct{}, 1), done: make(chan struct{})}
}

func (st *stream) wake() {
	if st.notify != nil {
		if st.pending.CompareAndSwap(false, true) {
			st.notify()
		}
		return
	}
	select {
	case st.wakeCh <- struct{}{}:
	default:
	}
}

// end asks the writer to stop (c.mu held). The TCP connection is closed
// after endGrace whatever the writer does: SSE responses are sent with
// "Connection: close", so the socket is never reused for another request.
func (st *stream) end(final []byte, drain bool) {
	st.ended, st.drain, st.final = true, drain, final
	close(st.done)
	if nc := st.nc; nc != nil {
		time.AfterFunc(endGrace, func() { _ = nc.Close() })
	}
	if st.notify != nil {
		st.pending.Store(true)
		st.notify()
	}
}

// run is the body stream writer of a local GET.
func (st *stream) run(w *bufio.Writer) {
	p := pump{e: st.c.e, nc: st.nc, wake: st.wakeCh, done: st.done,
		take:   func(dst []event) ([]event, []byte, bool) { return st.c.take(st, dst) },
		detach: func() { st.c.detach(st); st.c.e.streams.Add(-1) }}
	p.run(w)
}

// pump writes a stream's events to its client: those of a connection of
// this pod (stream.run) or of another pod (remoteGet).
type pump struct {
	e    *Edge
	nc   net.Conn
	wake <-chan struct{}
	done <-chan struct{}
	// quit ends the stream at once, without a final event (nil: never).
	quit <-chan struct{}
	// take hands over the next events (see conn.take); detach is called
	// once when the writer exits.
	take   func(dst []event) (batch []event, final []byte, end bool)
	detach func()
}

// run is the body stream writer. It returns when the stream is ended by the
// server or a write fails (the only sign that the client went away; the
// keep-alive comment bounds how late that is noticed).
func (p *pump) run(w *bufio.Writer) {
	e := p.e
	defer p.detach()
	beat := time.NewTicker(e.cfg.KeepAlive)
	defer beat.Stop()
	var batch []event
	var num []byte
	for {
		select {
		case <-p.wake:
		case <-p.done:
		case <-p.quit:
			return
		case <-beat.C:
			if !peerOpen(p.nc) {
				return
			}
			if _, err := w.WriteString(": ping\n\n"); err != nil {
				return
			}
			if w.Flush() != nil {
				return
			}
			continue
		}
		// A client that closed its side must not be handed events: they
		// would count as written and a GET without Last-Event-ID would
		// miss them.
		if !peerOpen(p.nc) {
			return
		}
		var final []byte
		var end bool
		batch, final, end = p.take(batch)
		for i := range batch {
			num = writeEvent(w, &batch[i], num)
			batch[i] = event{}
		}
		if final != nil {
			_, _ = w.Write(final)
		}
		if err := w.Flush(); err != nil {
			return
		}
		e.met.eventsSent.Add(float64(len(batch)))
		if end {
			return
		}
	}
}

// writeEvent writes one SSE event: event type, the JSON-RPC message as data
// (one data line per line of the payload, though encoded JSON has none), the
// id and the retry hint.
func writeEvent(w *bufio.Writer, ev *event, num []byte) []byte {
	_, _ = w.WriteString("event: message\n")
	writeData(w, ev.data)
	_, _ = w.WriteString("id: ")
	num = strconv.AppendUint(num[:0], ev.id, 10)
	_, _ = w.Write(num)
	_, _ = w.WriteString(retryTail)
	return num
}

func writeData(w *bufio.Writer, data []byte) {
	for {
		i := bytes.IndexAny(data, "\r\n")
		_, _ = w.WriteString("data: ")
		if i < 0 {
			_, _ = w.Write(data)
			_ = w.WriteByte('\n')
			return
		}
		_, _ = w.Write(data[:i])
		_ = w.WriteByte('\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
}

// errorEvent is a final "error" event: a JSON-RPC error response with id
// null, so clients that parse every data line as JSON-RPC still read it as
// a well-formed message. It has no id: it is not part of the replayable
// event sequence.
func errorEvent(e *protocol.Error) []byte {
	var b bytes.Buffer
	b.WriteString("event: error\ndata: ")
	b.Write(protocol.EncodeError(nil, e))
	b.WriteString("\n\n")
	return b.Bytes()
}
