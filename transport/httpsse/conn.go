package httpsse

import (
	"bytes"
	"errors"
	"math"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

// event is one outbound JSON-RPC message with its SSE id. Ids are assigned
// per connection, in the order the connection actor emits its frames, and
// shared by all the connection's streams: a client sees strictly increasing
// ids on every stream, with gaps only where events went to another stream.
type event struct {
	id   uint64
	data []byte
	// at is when the event was produced (unix nanoseconds), for the age
	// limit of the replay window.
	at int64
}

// slot is one stream scope of a connection: the connection stream (key "")
// or the stream of one split session. It keeps its events in id order,
// those not yet written to a client and, behind them, written ones kept for
// Last-Event-ID replay.
type slot struct {
	key  string
	buf  []event
	head int
	// written is the highest id handed to a stream writer of this slot.
	written uint64
	// evicted is the highest id dropped from this slot's replay window.
	evicted uint64
	// stream is the attached GET, if any.
	stream *stream
}

func (s *slot) size() int { return len(s.buf) - s.head }

func (s *slot) front() *event { return &s.buf[s.head] }

func (s *slot) push(ev event) { s.buf = append(s.buf, ev) }

func (s *slot) pop() event {
	ev := s.buf[s.head]
	s.buf[s.head] = event{}
	s.head++
	if s.head == len(s.buf) {
		s.buf, s.head = s.buf[:0], 0
	} else if s.head >= 1024 && s.head*2 >= len(s.buf) {
		n := copy(s.buf, s.buf[s.head:])
		clear(s.buf[n:])
		s.buf, s.head = s.buf[:n], 0
	}
	return ev
}

// after returns the buffered events with an id greater than id.
func (s *slot) after(id uint64) []event {
	evs := s.buf[s.head:]
	i := sort.Search(len(evs), func(i int) bool { return evs[i].id > id })
	return evs[i:]
}

func (s *slot) drop() {
	clear(s.buf)
	s.buf, s.head = nil, 0
}

type connState uint8

const (
	// stateOpen: requests and streams are served.
	stateOpen connState = iota
	// stateClosing: the connection left the registry; its turns are being
	// cancelled and their last frames still reach the streams.
	stateClosing
	// stateClosed: frames are dropped; streams have been told to end.
	stateClosed
	// stateIncoming: a connection moving here from another pod (move.go),
	// not served yet; its frames wait in early.
	stateIncoming
)

// initWait captures the initialize response for the synchronous POST.
type initWait struct {
	id protocol.RawMessage
	ch chan []byte
}

// conn is one ACP connection of the HTTP edge. It is the connection actor's
// Outlet: Send assigns the event id and appends to the target slot (the
// connection's outbox); stream writers take from their slot.
type conn struct {
	e     *Edge
	id    string
	actor *actors.Conn
	log   zerolog.Logger
	// ws: a WebSocket connection (ws.go), whose socket is its only stream.
	ws bool
	// prompts are the session/prompt requests delivered and not answered
	// yet, by raw id; detached: a WebSocket connection whose socket ended
	// while they ran (detach.go). c.mu.
	prompts  map[string]struct{}
	detached bool
	// detachTimer ends a detached WebSocket's turns at DetachedTurnMax;
	// stopped when the connection closes first (its last prompt answered).
	detachTimer *time.Timer
	// principal initialized the connection; only it may use it.
	principal string

	mu    sync.Mutex
	state connState
	// reason is why the connection is closing (closeConn, overflow).
	reason string
	init   *initWait
	// lastID is the id of the newest event of the connection.
	lastID   uint64
	main     *slot
	sessions map[string]*slot
	// count and bytes are the buffered events of all slots.
	count int
	bytes int
	// open counts slots with an attached stream.
	open int

	lastActive atomic.Int64
	closeOnce  sync.Once
	// settled: the connection left the edge's unused queue (used or closed).
	settled atomic.Bool
	// hadStream: a stream was attached once; cancelledAt is the lastActive
	// value at which its turns were cancelled for a stream gone too long.
	hadStream   bool
	cancelledAt int64
	// moving is closed when a move of the connection to another pod ends
	// (move.go); early are the frames of a connection moving here, moved
	// that it did. c.mu.
	moving atomic.Pointer[moveWait]
	early  []actors.Frame
	moved  bool
	// requests, in cluster mode only, are the requests whose answer no
	// stream has been handed yet: raw id → key of the slot that will carry
	// it. A stream on another pod learns its slot's share with every batch
	// (see pendingFor), so that if this pod dies it can still answer each
	// of them, by its own id.
	requests map[string]string
}

var (
	errTooManySessions = errors.New("too many session streams on this connection")
	errConnClosed      = errors.New("connection closed")
)

// Send is called by the connection actor, in order, for every outbound frame.
// It never blocks beyond the connection's mutex.
func (c *conn) Send(f actors.Frame) {
	c.mu.Lock()
	if w := c.init; w != nil && f.SessionID == "" && answers(f.Data, w.id) {
		c.init = nil
		c.mu.Unlock()
		w.ch <- f.Data
		return
	}
	if c.state >= stateClosed {
		if c.state == stateIncoming {
			c.early = append(c.early, f)
		} else {
			c.e.met.dropped.Inc()
		}
		c.mu.Unlock()
		return
	}
	if last := c.promptAnsweredLocked(f.Data); c.detached {
		// Nobody can read it; the session's history keeps the turn.
		c.mu.Unlock()
		if last {
			go c.e.closeConn(c, reasonWebSocket, false, c.e.cfg.CloseTimeout)
		}
		return
	}
	sl := c.main
	if f.SessionID != "" {
		if s, ok := c.sessions[f.SessionID]; ok {
			sl = s
		}
	}
	c.lastID++
	sl.push(event{id: c.lastID, data: f.Data, at: time.Now().UnixNano()})
	c.count++
	c.bytes += len(f.Data)
	if !c.trim() {
		n := c.count
		if c.detachOverflowLocked() {
			c.mu.Unlock()
			c.log.Warn().Int("buffered_events", n).Msg("client is not reading its websocket: buffer full, closing the socket; its turns go on detached")
			return
		}
		c.overflowLocked()
		c.mu.Unlock()
		c.log.Warn().Int("buffered_events", n).Msg("client is not reading its event stream: buffer full, closing the connection")
		go c.e.closeConn(c, reasonOverflow, false, c.e.cfg.CloseTimeout)
		return
	}
	st := sl.stream
	if st != nil && st.tryDirect(&sl.buf[len(sl.buf)-1]) {
		ev := sl.buf[len(sl.buf)-1]
		c.mu.Unlock()
		st.writeDirect(&ev)
		return
	}
	c.mu.Unlock()
	if st != nil {
		st.wake()
	}
}

// pushLocked appends a frame to its slot with the next id, as Send does,
// for a connection no stream reads yet (c.mu held).
func (c *conn) pushLocked(f actors.Frame) {
	sl := c.main
	if s, ok := c.sessions[f.SessionID]; ok && f.SessionID != "" {
		sl = s
	}
	c.lastID++
	sl.push(event{id: c.lastID, data: f.Data, at: time.Now().UnixNano()})
	c.count++
	c.bytes += len(f.Data)
}

// answers reports whether frame is the response to the request with id.
func answers(frame []byte, id protocol.RawMessage) bool {
	var head struct {
		ID     protocol.RawMessage `json:"id"`
		Method string              `json:"method"`
	}
	if protocol.Unmarshal(frame, &head) != nil || head.Method != "" {
		return false
	}
	return bytes.Equal(bytes.TrimSpace(head.ID), bytes.TrimSpace(id))
}

// trackRequest records a request posted in cluster mode (see requests);
// sessionID is the session it names (its Acp-Session-Id, else
// params.sessionId), whose slot carries the answer if it has one.
func (c *conn) trackRequest(id protocol.RawMessage, sessionID string) {
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return
	}
	sl, ok := c.sessions[sessionID]
	if !ok {
		sl, sessionID = c.main, ""
	}
	if c.requests == nil {
		c.requests = map[string]string{}
	}
	c.requests[string(id)] = sessionID
	st := sl.stream
	c.mu.Unlock()
	// A stream on another pod takes now, and so learns of the request
	// before its answer (or this pod's death) comes.
	if st != nil && st.notify != nil {
		st.wake()
	}
}

// answeredLocked forgets the requests the events of batch answer.
func (c *conn) answeredLocked(batch []event) {
	for i := range batch {
		if id, ok := responseID(batch[i].data); ok {
			delete(c.requests, string(id))
		}
	}
}

// pendingFor is the ids of the tracked requests whose answer the slot key
// carries.
func (c *conn) pendingFor(key string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for id, k := range c.requests {
		if k == key {
			out = append(out, []byte(id))
		}
	}
	return out
}

// responseHead starts every frame that carries an id (a response, or a
// request of ours); notifications, nearly all frames, start otherwise.
var responseHead = []byte(`{"jsonrpc":"2.0","id":`)

// responseID is the id of frame when it is a response.
func responseID(frame []byte) (protocol.RawMessage, bool) {
	if !bytes.HasPrefix(frame, responseHead) {
		return nil, false
	}
	var head struct {
		ID     protocol.RawMessage `json:"id"`
		Method string              `json:"method"`
	}
	if protocol.Unmarshal(frame, &head) != nil || head.Method != "" {
		return nil, false
	}
	return bytes.TrimSpace(head.ID), true
}

// trim evicts already written events, oldest first, until the buffer fits
// its limits. It reports false when the unwritten events alone exceed them.
// Written events older than ReplayMaxAge go too: a reconnect comes within
// seconds (retry: 5000), and keeping minutes of replay for thousands of busy
// connections made memory grow for as long as the windows took to fill.
func (c *conn) trim() bool {
	cfg := &c.e.cfg
	expired := time.Now().Add(-cfg.ReplayMaxAge).UnixNano()
	switch {
	case c.ws:
		expired = math.MaxInt64 // a WebSocket cannot resume: no replay
	case c.open == 0 && cfg.detachEnabled():
		// Nobody reads: what the last stream was handed just before its
		// client vanished stays replayable for the client coming back while
		// its turns run detached, within the caps.
		expired = math.MinInt64
	}
	for {
		victim := c.oldestWritten()
		over := c.count > cfg.ReplayBuffer || (c.bytes > cfg.MaxBufferBytes && c.count > 1)
		if !over && (victim == nil || victim.front().at > expired) {
			return true
		}
		if victim == nil {
			return false
		}
		ev := victim.pop()
		victim.evicted = ev.id
		c.count--
		c.bytes -= len(ev.data)
	}
}

func (c *conn) oldestWritten() *slot {
	var best *slot
	consider := func(s *slot) {
		if s.size() == 0 {
			return
		}
		f := s.front()
		if f.id <= s.written && (best == nil || f.id < best.front().id) {
			best = s
		}
	}
	consider(c.main)
	for _, s := range c.sessions {
		consider(s)
	}
	return best
}

// overflowLocked kills a connection whose client stopped reading: every
// attached stream gets a final error event, all buffers are freed.
func (c *conn) overflowLocked() {
	final := errorEvent(protocol.NewError(protocol.CodeInternalError,
		"Event buffer overflow: the client did not read its event stream; the connection is closed",
		map[string]any{"reason": "buffer_overflow", "connectionId": c.id, "bufferedEvents": c.count}))
	c.state = stateClosed
	c.reason = reasonOverflow
	c.endStreamsLocked(final, false)
	c.main.drop()
	for _, s := range c.sessions {
		s.drop()
	}
	c.count, c.bytes = 0, 0
}

// endStreamsLocked tells every attached stream to end: after writing what is
// pending (drain) or at once, with an optional final event.
func (c *conn) endStreamsLocked(final []byte, drain bool) {
	c.main.endStream(final, drain)
	for _, s := range c.sessions {
		s.endStream(final, drain)
	}
}

func (s *slot) endStream(final []byte, drain bool) {
	if st := s.stream; st != nil && !st.ended {
		st.end(final, drain)
	}
}

// split makes sessionID's traffic go to its own stream slot from now on.
func (c *conn) splitLocked(sessionID string) (*slot, error) {
	if s, ok := c.sessions[sessionID]; ok {
		return s, nil
	}
	if len(c.sessions) >= c.e.cfg.MaxSessionStreams {
		return nil, errTooManySessions
	}
	s := &slot{key: sessionID}
	if c.sessions == nil {
		c.sessions = map[string]*slot{}
	}
	c.sessions[sessionID] = s
	return s, nil
}

// split is splitLocked for POST handlers.
func (c *conn) split(sessionID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		return errConnClosed
	}
	_, err := c.splitLocked(sessionID)
	return err
}

// attach makes a new GET the stream of its slot. last is the client's
// Last-Event-ID (nil when absent). A non-nil reject is a complete SSE body
// (an error event) for a Last-Event-ID that cannot be honoured; the slot is
// left untouched then.
func (c *conn) attach(sessionID string, last *uint64, nc net.Conn) (st *stream, reject []byte, replaced bool, err error) {
	return c.attachStream(sessionID, last, nc, nil)
}

// attachStream is attach for a local GET (nc) or for the GET of another pod
// (notify, called when the stream has events or ended).
func (c *conn) attachStream(sessionID string, last *uint64, nc net.Conn, notify func()) (st *stream, reject []byte, replaced bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateOpen {
		return nil, nil, false, errConnClosed
	}
	sl := c.main
	if sessionID != "" {
		if sl, err = c.splitLocked(sessionID); err != nil {
			return nil, nil, false, err
		}
	}
	if last != nil {
		switch {
		case *last > c.lastID:
			return nil, errorEvent(protocol.NewError(protocol.CodeInvalidRequest,
				"Last-Event-ID was never sent on this connection",
				map[string]any{"reason": "unknown_last_event_id", "lastEventId": *last, "newestEventId": c.lastID})), false, nil
		case *last < sl.evicted:
			return nil, errorEvent(protocol.NewError(protocol.CodeInvalidRequest,
				"Last-Event-ID is too old: events after it are no longer buffered and cannot be replayed",
				map[string]any{"reason": "stale_last_event_id", "lastEventId": *last, "oldestReplayableAfter": sl.evicted})), false, nil
		}
		// The client has every event up to last, and none after: also
		// when this pod counts fewer written (a moved connection's outbox
		// left its first pod while that pod's writer still wrote).
		sl.written = *last
	}
	if old := sl.stream; old != nil {
		old.end(nil, false)
		replaced = true
	} else {
		c.open++
	}
	c.hadStream = true
	st = newStream(c, sl, nc)
	st.notify = notify
	sl.stream = st
	st.wake() // write the backlog (replay and events queued while detached)
	return st, nil, replaced, nil
}

// handout is what a stream writer must write next: prefix (bytes a direct
// write left), the events, then final; end: close the stream after them.
// skip: nothing now, a direct write is under way and wakes the writer when
// it is done.
type handout struct {
	prefix []byte
	batch  []event
	final  []byte
	end    bool
	skip   bool
}

// take hands the writer of st the events it must write next, and claims
// the socket for it until release.
func (c *conn) take(st *stream, dst []event) handout {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := st.sl
	h := handout{batch: dst[:0]}
	switch {
	case sl.stream != st: // replaced
		h.end = true
		return h
	case st.broken: // a direct write failed: the client is gone
		h.end = true
		return h
	case st.busy:
		h.skip = true
		return h
	case st.ended && !st.drain:
		// The rest of a partial direct write completes its event first.
		h.prefix, st.rest = st.rest, nil
		h.final, h.end = st.final, true
		return h
	}
	// Another pod's writer (notify) writes later and never releases; its
	// stream has no direct writes.
	st.busy = st.notify == nil
	h.prefix, st.rest = st.rest, nil
	h.batch = append(h.batch, sl.after(sl.written)...)
	if n := len(h.batch); n > 0 {
		sl.written = h.batch[n-1].id
	}
	if len(c.requests) > 0 {
		c.answeredLocked(h.batch)
	}
	h.final, h.end = st.final, st.ended
	return h
}

// claim takes the socket for a keep-alive; false while a direct write is
// under way or left the rest of an event to write (the comment would land
// inside it; the writer has been woken for it).
func (c *conn) claim(st *stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.busy || st.rest != nil {
		return false
	}
	st.busy = true
	return true
}

// release gives the socket back after the writer wrote (the head, events
// or a keep-alive) and reports whether more is pending.
func (c *conn) release(st *stream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.busy, st.live = false, true
	st.lastWrite = time.Now().UnixNano()
	return st.ended || st.rest != nil || len(st.sl.after(st.sl.written)) > 0
}

// detach is called once by every stream writer when it exits.
func (c *conn) detach(st *stream) {
	c.mu.Lock()
	if st.sl.stream == st {
		st.sl.stream = nil
		c.open--
	}
	c.mu.Unlock()
	c.touch()
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// idleSince reports whether the connection has had no stream and no request
// since before cutoff, or since before detachedCutoff while prompts of it
// run (detached turns are not reaped with it before their limit).
func (c *conn) idleSince(cutoff, detachedCutoff int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.lastActive.Load()
	return c.state == stateOpen && c.init == nil && c.open == 0 && last < cutoff && (len(c.prompts) == 0 || last < detachedCutoff)
}

// abandoned reports, once per spell of inactivity, a connection whose
// streams have all been gone, with no request either, since before cutoff.
func (c *conn) abandoned(cutoff int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.lastActive.Load()
	if c.state != stateOpen || !c.hadStream || c.open > 0 || last >= cutoff || c.cancelledAt == last {
		return false
	}
	c.cancelledAt = last
	return true
}

// initPending: the initialize POST is still waiting for its answer.
func (c *conn) initPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.init != nil
}

func (c *conn) buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}
