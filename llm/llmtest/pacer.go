package llmtest

import (
	"net/http"
	"time"
)

// pacer writes the chunks of one scripted answer: it sleeps Delay before
// each, counts them, and cuts the stream as scripted (Disconnect, Hang,
// StreamError after AfterChunks chunks).
type pacer struct {
	srv    *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	req    *http.Request
	reply  *Reply
	flush  bool
	sent   int
	cutAt  int // -1: never
	timer  *time.Timer
	failed bool
	// out gathers unflushed chunks into writes of batchSize, as a server
	// that outruns the network fills its socket buffer: one write system
	// call per batch instead of one per 4 KiB of net/http's buffers.
	out []byte
	// errorEvent is the format's in-stream error for StreamError.
	errorEvent func() []byte
}

func newPacer(srv *Server, w http.ResponseWriter, r *http.Request, reply *Reply) pacer {
	p := pacer{srv: srv, w: w, rc: http.NewResponseController(w), req: r, reply: reply, cutAt: -1}
	if reply.Disconnect || reply.Hang || reply.StreamError != "" {
		p.cutAt = max(reply.AfterChunks, 0)
	}
	p.flush = reply.Chunks == 0 || reply.Delay > 0 || (reply.ChunkFunc != nil && !reply.Buffered)
	return p
}

// writeHeader starts the event stream.
func (p *pacer) writeHeader(requestID string) {
	h := p.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set(requestID, "req_llmtest")
	for k, v := range p.reply.Header {
		h.Set(k, v)
	}
	p.w.WriteHeader(http.StatusOK)
}

// ready cuts the stream when scripted to, and sleeps Delay before a chunk.
func (st *pacer) ready() bool {
	if st.failed {
		return false
	}
	if st.cutAt >= 0 && st.sent >= st.cutAt {
		st.cut()
		return false
	}
	d := st.reply.Delay
	if d <= 0 {
		return true
	}
	if st.timer == nil {
		st.timer = time.NewTimer(d)
	} else {
		st.timer.Reset(d)
	}
	select {
	case <-st.timer.C:
		return true
	case <-st.req.Context().Done():
	case <-st.srv.done:
	}
	st.failed = true
	return false
}

// put writes a counted chunk.
func (st *pacer) put(b []byte) bool {
	if !st.write(b) {
		return false
	}
	st.sent++
	return true
}

// batchSize is the size of the writes of unflushed chunks.
const batchSize = 64 << 10

// write writes without counting (structural events of the Anthropic format).
func (st *pacer) write(b []byte) bool {
	if st.failed {
		return false
	}
	if !st.flush {
		st.out = append(st.out, b...)
		if len(st.out) < batchSize {
			return true
		}
		b = st.out
		st.out = st.out[:0]
	}
	if _, err := st.w.Write(b); err != nil {
		st.failed = true
		return false
	}
	if st.flush {
		if err := st.rc.Flush(); err != nil {
			st.failed = true
			return false
		}
	}
	return true
}

// drain writes the chunks write gathered.
func (st *pacer) drain() {
	if len(st.out) == 0 || st.failed {
		return
	}
	if _, err := st.w.Write(st.out); err != nil {
		st.failed = true
	}
	st.out = st.out[:0]
}

// cut ends the stream abnormally: an error event, a dropped connection or a
// hang.
func (st *pacer) cut() {
	st.drain()
	st.failed = true
	if st.reply.StreamError != "" && st.errorEvent != nil {
		_, _ = st.w.Write(st.errorEvent())
		_ = st.rc.Flush()
		return
	}
	_ = st.rc.Flush()
	if st.reply.Hang {
		select {
		case <-st.req.Context().Done():
		case <-st.srv.done:
		}
		return
	}
	conn, _, err := st.rc.Hijack()
	if err != nil {
		// HTTP/2 cannot hijack; aborting resets the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
