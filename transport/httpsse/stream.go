package httpsse

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iac-code/iac-code/protocol"
)

// endGrace is how long a stream the server ended may take to write its last
// bytes before its TCP connection is closed under it (a client that stopped
// reading would otherwise hold the writer and the socket forever).
const endGrace = 2 * time.Second

var retryTail = "\nretry: " + strconv.Itoa(RetryMillis) + "\n\n"

// stream is one attached GET. Its writer (the goroutine of the GET's
// handler) sleeps until woken, then writes every available event and flushes
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

	// Direct writes (c.mu): the connection actor's Send writes a single new
	// event to the socket itself, without blocking, when nothing else is
	// pending and nobody is writing (see tryDirect). raw is nil when the
	// socket allows none. live: the writer has written the response head.
	// busy: the writer or a Send is writing to the socket. rest is what a
	// direct write left unwritten, for the writer to write first; broken:
	// a direct write failed. lastWrite: unix nanoseconds of the last write
	// of events.
	raw       *directWriter
	live      bool
	busy      bool
	broken    bool
	rest      []byte
	lastWrite int64
	// directs and partials count direct writes and those the socket did not
	// take whole (tests).
	directs, partials int
	// allowed re-checks, at every keep-alive, the credential the GET was
	// opened with (nil: no authentication); a revoked one ends the stream.
	allowed func() bool
}

func newStream(c *conn, sl *slot, nc net.Conn) *stream {
	return &stream{c: c, sl: sl, nc: nc, raw: newDirectWriter(nc), wakeCh: make(chan struct{}, 1), done: make(chan struct{})}
}

// tryDirect claims the socket for Send to write ev, the newest event of the
// stream's slot, itself (c.mu held). It does when the writer is parked with
// nothing else to write (every older event has been written whole), and
// the stream wrote within probeQuiet (else the writer probes the peer
// first).
func (st *stream) tryDirect(ev *event) bool {
	if st.raw == nil || !st.live || st.busy || st.ended || st.broken || st.rest != nil || st.sl.stream != st {
		return false
	}
	if st.sl.written+1 != ev.id && len(st.sl.after(st.sl.written)) != 1 {
		return false
	}
	if time.Now().UnixNano()-st.lastWrite >= int64(probeQuiet) {
		return false
	}
	st.busy = true
	st.sl.written = ev.id
	st.directs++
	return true
}

// writeDirect writes ev, claimed by tryDirect, with one non-blocking write
// and hands what the socket did not take, or a failure, to the writer.
func (st *stream) writeDirect(ev *event) {
	bp := outBufs.Get().(*[]byte)
	buf := appendEvent((*bp)[:0], ev)
	n, err := st.raw.write(buf)
	c := st.c
	c.mu.Lock()
	st.busy = false
	switch {
	case err != nil:
		st.broken = true
	case n < len(buf):
		st.rest = bytes.Clone(buf[n:])
		st.partials++
	default:
		st.lastWrite = time.Now().UnixNano()
	}
	wake := err != nil || st.rest != nil || st.ended || len(st.sl.after(st.sl.written)) > 0
	c.mu.Unlock()
	if cap(buf) <= 4*flushAt { // a huge event's buffer is not kept for the next
		*bp = buf[:0]
		outBufs.Put(bp)
	}
	if err == nil {
		c.e.met.eventsSent.Add(1)
	}
	if wake {
		st.wake()
	}
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
	} else {
		// A writer that found a direct write under way waits for a wake,
		// not for done (see pump.run).
		st.wake()
	}
}

// run is the writer of a local GET.
func (st *stream) run(head []byte) {
	p := pump{e: st.c.e, nc: st.nc, wake: st.wakeCh, done: st.done, allowed: st.allowed,
		take:    func(dst []event) handout { return st.c.take(st, dst) },
		claim:   func() bool { return st.c.claim(st) },
		release: func() bool { return st.c.release(st) },
		detach:  func() { st.c.detach(st); st.c.e.streams.Add(-1) }}
	p.run(head)
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
	take   func(dst []event) handout
	detach func()
	// claim and release (nil: not needed) take and give back the socket
	// around a keep-alive, and release it after a batch (take claims it);
	// release reports whether more is pending.
	claim   func() bool
	release func() bool
	// probe replaces peerOpen (tests).
	probe func(net.Conn) bool
	// allowed, when set, is asked at every keep-alive whether the stream's
	// credential still holds (see Edge.stillAllowed).
	allowed func() bool
}

func (p *pump) peerOpen() bool {
	if p.probe != nil {
		return p.probe(p.nc)
	}
	return peerOpen(p.nc)
}

// probeQuiet is how long a stream must have written nothing before the
// writer checks, before its next batch, that the client is still there.
const probeQuiet = 100 * time.Millisecond

// flushAt is the buffered size at which a batch is written out before it
// is complete (a long replay), so the buffer stays bounded.
const flushAt = 64 << 10

// outBufs holds the write buffers of the streams: a stream takes one for a
// batch and gives it back after the write, so an idle stream holds none.
var outBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// run writes the stream to the client's socket, straight after the
// response head: no HTTP chunking (the body ends with the connection,
// which is sent "Connection: close"), no pipe to a second goroutine. It
// writes every available event in one write, and returns when the stream
// is ended by the server or a write fails (the only sign that the client
// went away; the keep-alive comment bounds how late that is noticed).
func (p *pump) run(head []byte) {
	e := p.e
	defer p.detach()
	beat := time.NewTicker(e.cfg.KeepAlive)
	defer beat.Stop()
	var batch []event
	var lastWrite time.Time
	// The head goes out with the first events when there are some already
	// (a local stream's backlog), else at once.
	ready := false
	select {
	case <-p.wake:
		ready = true
	default:
		if p.write(head) != nil {
			return
		}
		head = nil
	}
	done := p.done
	for {
		if !ready {
			select {
			case <-p.wake:
			case <-done:
			case <-p.quit:
				return
			case <-beat.C:
				if p.allowed != nil && !p.allowed() {
					return // revoked: the client's reconnect gets 401
				}
				if p.claim != nil && !p.claim() {
					continue // a direct write is under way
				}
				if !p.peerOpen() || p.write(pingComment) != nil {
					return
				}
				ready = p.release != nil && p.release()
				continue
			}
		}
		ready = false
		done = p.done
		// A client that closed its side must not be handed events: they
		// would count as written and a GET without Last-Event-ID would
		// miss them. The probe is a system call, so it is made only when
		// the stream has been quiet for probeQuiet (and at every keep-alive):
		// a client that leaves between two turns is caught; one that leaves
		// while events flow less than probeQuiet apart is handed the events
		// up to the first write that fails (on a closed peer the next one
		// after its reset arrives, so about a round trip's worth). Those are
		// missed only by a new GET without Last-Event-ID; a resume replays
		// them.
		if time.Since(lastWrite) >= probeQuiet && !p.peerOpen() {
			return
		}
		h := p.take(batch)
		if h.skip {
			// A direct write is under way; it wakes us when it is done. Until
			// then the stream's end must not make this loop spin.
			done = nil
			continue
		}
		batch = h.batch
		bp := outBufs.Get().(*[]byte)
		buf := append((*bp)[:0], head...)
		buf = append(buf, h.prefix...)
		head = nil
		var err error
		for i := range batch {
			buf = appendEvent(buf, &batch[i])
			batch[i] = event{}
			if len(buf) >= flushAt && i+1 < len(batch) {
				if err = p.write(buf); err != nil {
					break
				}
				buf = buf[:0]
			}
		}
		if err == nil {
			buf = append(buf, h.final...)
			err = p.write(buf)
		}
		if cap(buf) <= 4*flushAt {
			*bp = buf[:0]
			outBufs.Put(bp)
		}
		if err != nil {
			return
		}
		lastWrite = time.Now()
		e.met.eventsSent.Add(uint64(len(batch)))
		if h.end {
			return
		}
		if p.release != nil {
			ready = p.release()
		}
	}
}

var pingComment = []byte(": ping\n\n")

func (p *pump) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := p.nc.Write(b)
	return err
}

// appendEvent appends one SSE event: event type, the JSON-RPC message as
// data (one data line per line of the payload, though encoded JSON has
// none), the id and the retry hint.
func appendEvent(buf []byte, ev *event) []byte {
	buf = append(buf, "event: message\n"...)
	buf = appendData(buf, ev.data)
	buf = append(buf, "id: "...)
	buf = strconv.AppendUint(buf, ev.id, 10)
	return append(buf, retryTail...)
}

func appendData(buf, data []byte) []byte {
	for {
		i := lineBreak(data)
		buf = append(buf, "data: "...)
		if i < 0 {
			buf = append(buf, data...)
			return append(buf, '\n')
		}
		buf = append(buf, data[:i]...)
		buf = append(buf, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
}

// lineBreak is the index of the first '\r' or '\n' in b, or -1. Two
// IndexByte scans (vectorised) instead of bytes.IndexAny, which walks a
// byte set one byte at a time: that was ~2,800 instructions of an event's
// ~44,000 under cachegrind, for payloads that have no line break.
func lineBreak(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	head := b
	if n >= 0 {
		head = b[:n]
	}
	if r := bytes.IndexByte(head, '\r'); r >= 0 {
		return r
	}
	return n
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
