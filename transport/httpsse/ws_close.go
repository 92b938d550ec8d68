package httpsse

import (
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// wsLinger bounds how long a socket whose close frame the server sent is
// still read. Closing TCP at once loses the close frame on clients that are
// still sending (an oversized frame, a burst): the unread bytes make the
// kernel reset the connection, and a reset discards what the client had not
// read yet, so Node's ws and browsers report 1006 instead of the code. The
// RFC 6455 closing handshake instead waits for the peer's close frame (7.1.1:
// the server closes TCP after it); wsLinger caps the wait for a peer that
// never sends one. It is endGrace, the bound the stream end puts on the
// socket anyway.
const wsLinger = endGrace

// socketPhase is where a WebSocket stands in the closing handshake.
type socketPhase = int32

const (
	// socketOpen: frames are delivered; a sign of life extends the read
	// deadline by wsDeadAfter.
	socketOpen socketPhase = iota
	// socketClosing: the server's close frame is sent. What the peer still
	// sends is read and dropped until its close frame, the end of its
	// stream or wsLinger, whichever comes first; then TCP is closed.
	socketClosing
)

// wsSocket owns a WebSocket's closing phase and its read deadline, which
// the reader (signs of life) and the writer (its close frame) both move.
type wsSocket struct {
	ws    *websocket.Conn
	nc    net.Conn // the raw connection, for the drain after a read error
	dead  time.Duration
	phase atomic.Int32
	// lingerUntil (unix ns) is the read deadline once closing; set before
	// the phase changes, so a reader that sees socketClosing finds it.
	lingerUntil atomic.Int64
}

func newWSSocket(ws *websocket.Conn, nc net.Conn, dead time.Duration) *wsSocket {
	return &wsSocket{ws: ws, nc: nc, dead: dead}
}

func (s *wsSocket) closing() bool { return s.phase.Load() != socketOpen }

// alive extends the read deadline after a frame, ping or pong from the
// peer, while the socket is open. A close sent meanwhile keeps its own,
// shorter deadline.
func (s *wsSocket) alive() {
	if s.closing() {
		return
	}
	_ = s.ws.SetReadDeadline(time.Now().Add(s.dead))
	if s.closing() {
		_ = s.ws.SetReadDeadline(time.Unix(0, s.lingerUntil.Load()))
	}
}

// closeSent is the one transition: the server's close frame is on the wire
// (sent by sendClose, or by the library on an oversized frame); from now
// on the socket is read for at most wsLinger.
func (s *wsSocket) closeSent() {
	if s.closing() {
		return
	}
	until := time.Now().Add(wsLinger)
	s.lingerUntil.Store(until.UnixNano())
	if s.phase.CompareAndSwap(socketOpen, socketClosing) {
		_ = s.ws.SetReadDeadline(until)
	}
}

// sendClose writes a close frame with code and text; sent says it went out
// (the reader then lingers, see socketClosing). Safe beside the writer: the
// library serializes control frames with data frames.
func (s *wsSocket) sendClose(code int, text string) (sent bool) {
	if s.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(wsWriteWait)) != nil {
		return false
	}
	s.closeSent()
	return true
}

// drain reads and drops what the peer sends until it ends its stream (a
// client closes TCP once both close frames are exchanged) or the linger
// deadline. It serves where the library's reader cannot go on: after it
// refused an oversized frame, the rest of that frame's payload is unread
// and the frames after it cannot be parsed, so the peer's close frame is
// not looked for; its FIN is.
func (s *wsSocket) drain() {
	_ = s.nc.SetReadDeadline(time.Unix(0, s.lingerUntil.Load()))
	_, _ = io.Copy(io.Discard, s.nc)
}
