package httpsse

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/protocol"
)

// Cluster is what the edge needs, in cluster mode, from the pods' mesh
// (transport/cluster): connections stay on the pod that answered their
// initialize, and every other pod forwards their requests and streams
// there. nil in single-process mode, which then pays nothing for it.
type Cluster interface {
	// Incarnation is this pod's incarnation id: the first part of the ids
	// of its connections ("<incarnation>.<random>").
	Incarnation() string
	// Bind hands the mesh the edge that serves this pod's connections.
	Bind(o Owner)
	// Post forwards a POST /acp (not initialize) of principal who to the
	// pod owner.
	Post(owner, connID, sessionID, who, traceparent string, body []byte) Reply
	// Delete forwards a DELETE /acp to the pod owner.
	Delete(owner, connID, who string) Reply
	// Attach makes a GET on this pod the stream of a connection of the pod
	// owner. On success (Reply.Status 200) the source delivers the stream's
	// events, unless reject (an SSE error body for a Last-Event-ID that
	// cannot be honoured) is set.
	Attach(owner, connID, sessionID, who string, last *uint64) (src RemoteSource, r Reply, reject []byte, replaced bool)
	// Collectors are the mesh's metrics, exported on /metrics.
	Collectors() []prometheus.Collector

	// Moved connections (move.go). MovedTo is the pod connection id was
	// moved to, as far as this pod knows without asking the store ("":
	// not known to have moved).
	MovedTo(connID string) string
	// PrepareMove asks a live pod to take connection id of this pod (data:
	// its actor's state), one not in avoid if it can (the pods holding
	// sessions the connection reaches through stubs: a stub cannot be made
	// on the pod holding its session); it returns the pod and its answer
	// (the legs of the stubs). CommitMove hands it the outbox and opens it there;
	// AbortMove drops a prepared one.
	PrepareMove(connID string, data []byte, avoid []string) (to string, reply []byte, err error)
	CommitMove(to, connID string, data []byte) error
	AbortMove(to, connID string)
	// ForgetMoved: a connection moved to this pod closed.
	ForgetMoved(connID string)

	// Drain hands this pod's running turns over to other pods (SIGTERM,
	// see Edge.Drain) and returns when it is done or ctx ends; the edge
	// serves every request but new connections meanwhile.
	Drain(ctx context.Context)
}

// Reply is the outcome of a request served by another pod: an HTTP status
// and, for errors, the text of the {"error": …} body.
type Reply struct {
	Status int
	Error  string
}

// RemoteSource is a stream whose events come from the connection's pod.
type RemoteSource interface {
	// Ready fires when the stream has events or ended; Gone closes when the
	// owner went away.
	Ready() <-chan struct{}
	Gone() <-chan struct{}
	// Take hands over the next events (see conn.take); an error means the
	// owner cannot be reached.
	Take(dst []Event) (batch []Event, final []byte, end bool, err error)
	// Pending is what the last successful Take said of the requests still
	// to be answered on this stream (see Owner.Pending).
	Pending() [][]byte
	// Close detaches the stream from the owner (the client left).
	Close()
}

// Event is one numbered SSE event.
type Event struct {
	ID   uint64
	Data []byte
}

// Owner is the side of the edge that serves, for other pods, the
// connections of this one. *Edge implements it.
// The principal who is the one the forwarding pod decided for the request.
type Owner interface {
	ServePost(connID, sessionID, who, traceparent string, body []byte) Reply
	ServeDelete(connID, who string) Reply
	AttachRemote(connID, sessionID, who string, last *uint64, ready func()) (handle uint64, reject []byte, replaced bool, r Reply)
	Take(connID string, handle uint64, dst []Event) (batch []Event, final []byte, end bool)
	// Pending is the ids of the requests whose answers the stream handle
	// would carry and that no stream has been handed yet (after a Take).
	Pending(connID string, handle uint64) [][]byte
	Detach(connID string, handle uint64)
	// RemoteStreams counts the streams of this pod's connections whose GET
	// is on another pod.
	RemoteStreams() int
	// AdoptConn serves a step of the move of a connection of a draining
	// pod to this one (MovePrepare, MoveCommit, MoveAbort).
	AdoptConn(step int, connID string, data []byte) ([]byte, error)
}

var _ Owner = (*Edge)(nil)

// ownerOf is the incarnation that owns connection id in cluster mode (its
// prefix), "" for an id of this pod or that is not a cluster id.
func (e *Edge) ownerOf(id []byte) string {
	if e.cluster == nil {
		return ""
	}
	if to := e.cluster.MovedTo(string(id)); to != "" && to != e.cluster.Incarnation() {
		return to
	}
	inc, _, ok := strings.Cut(string(id), ".")
	if !ok || inc == "" || len(inc) > 64 || inc == e.cluster.Incarnation() {
		return ""
	}
	for _, r := range inc {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == '-') {
			return ""
		}
	}
	return inc
}

func (e *Edge) replyError(ctx *fasthttp.RequestCtx, r Reply) {
	jsonError(ctx, r.Status, r.Error)
}

// forwardPost sends a POST for a connection of another pod there.
func (e *Edge) forwardPost(ctx *fasthttp.RequestCtx, owner string, id []byte, who string, body []byte) {
	r := e.cluster.Post(owner, string(id), string(ctx.Request.Header.Peek(HeaderSessionID)), who,
		string(ctx.Request.Header.Peek(HeaderTraceparent)), body)
	if r.Status == fasthttp.StatusAccepted {
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	e.replyError(ctx, r)
}

// ServePost serves a POST forwarded by another pod: what post does once
// the connection is known.
func (e *Edge) ServePost(connID, sessionID, who, traceparent string, body []byte) Reply {
	msg, perr := protocol.Decode(body)
	if perr != nil {
		return Reply{fasthttp.StatusBadRequest, "Invalid JSON-RPC message: " + detail(perr)}
	}
	msg.Traceparent = traceparent
	c := e.lookupSettled([]byte(connID))
	if c == nil {
		if r, ok := e.movedReply([]byte(connID)); ok {
			return r
		}
		return Reply{fasthttp.StatusBadRequest, e.notFound([]byte(connID), msgConnNotFoundPost)}
	}
	return e.postTo(c, who, []byte(sessionID), msg)
}

// ServeDelete serves a DELETE forwarded by another pod.
func (e *Edge) ServeDelete(connID, who string) Reply {
	if r, ok := e.movedReply([]byte(connID)); ok && e.lookup([]byte(connID)) == nil {
		return r
	}
	if c := e.lookupSettled([]byte(connID)); c != nil {
		if r, ok := e.owns(c, who, "delete", ""); !ok {
			return r
		}
		e.closeConn(c, reasonDelete, true, e.cfg.CloseTimeout)
	}
	return Reply{Status: fasthttp.StatusOK}
}

// AttachRemote attaches a stream of another pod to a connection of this
// one. ready is called (never under a lock of the edge's callers) when the
// stream has events or ended; the other pod then calls Take.
func (e *Edge) AttachRemote(connID, sessionID, who string, last *uint64, ready func()) (uint64, []byte, bool, Reply) {
	c := e.lookupSettled([]byte(connID))
	if c == nil {
		if r, ok := e.movedReply([]byte(connID)); ok {
			return 0, nil, false, r
		}
		return 0, nil, false, Reply{fasthttp.StatusBadRequest, e.notFound([]byte(connID), msgConnNotFound)}
	}
	if r, ok := e.owns(c, who, "get", ""); !ok {
		return 0, nil, false, r
	}
	if e.closing() {
		return 0, nil, false, Reply{fasthttp.StatusServiceUnavailable, msgShuttingDown}
	}
	c.touch()
	e.settle(c)
	st, reject, replaced, err := c.attachStream(sessionID, last, nil, ready)
	if err != nil {
		if err == errTooManySessions {
			return 0, nil, false, Reply{fasthttp.StatusBadRequest, "Too many session streams on this connection"}
		}
		return 0, nil, false, Reply{fasthttp.StatusBadRequest, msgConnNotFound}
	}
	if reject != nil {
		return 0, reject, false, Reply{Status: fasthttp.StatusOK}
	}
	if last != nil || replaced {
		e.met.reconnects.Inc()
	}
	e.mu.Lock()
	e.nextHandle++
	h := e.nextHandle
	e.remotes[h] = st
	e.mu.Unlock()
	return h, nil, replaced, Reply{Status: fasthttp.StatusOK}
}

func (e *Edge) remote(connID string, handle uint64) *stream {
	e.mu.RLock()
	defer e.mu.RUnlock()
	st := e.remotes[handle]
	if st == nil || st.c.id != connID {
		return nil
	}
	return st
}

// Take hands another pod's stream its next events: what the stream writer
// of a local GET takes.
func (e *Edge) Take(connID string, handle uint64, dst []Event) ([]Event, []byte, bool) {
	st := e.remote(connID, handle)
	if st == nil {
		return dst[:0], nil, true
	}
	st.pending.Store(false)
	h := st.c.take(st, nil)
	out := dst[:0]
	for i := range h.batch {
		out = append(out, Event{ID: h.batch[i].id, Data: h.batch[i].data})
	}
	if h.end {
		// The other pod's writer stops here: the handle goes now, whether
		// or not its Detach arrives.
		e.Detach(connID, handle)
	}
	return out, h.final, h.end
}

// Pending implements Owner.
func (e *Edge) Pending(connID string, handle uint64) [][]byte {
	st := e.remote(connID, handle)
	if st == nil {
		return nil
	}
	return st.c.pendingFor(st.sl.key)
}

// Detach ends another pod's stream: its client left, or that pod is gone.
func (e *Edge) Detach(connID string, handle uint64) {
	st := e.remote(connID, handle)
	if st == nil {
		return
	}
	e.mu.Lock()
	delete(e.remotes, handle)
	e.mu.Unlock()
	st.c.detach(st)
}

// remoteGet serves a GET whose connection lives on another pod: a local
// writer fed by the owner's outbox (see RemoteSource). The stream is
// counted in e.streams already.
func (e *Edge) remoteGet(ctx *fasthttp.RequestCtx, owner string, id, sid []byte, who string, last *uint64) (stream func()) {
	src, r, reject, _ := e.cluster.Attach(owner, string(id), string(sid), who, last)
	if r.Status != fasthttp.StatusOK {
		e.streams.Add(-1)
		e.replyError(ctx, r)
		return nil
	}
	setStreamHeaders(ctx)
	if reject != nil {
		e.streams.Add(-1)
		ctx.SetBody(reject)
		return nil
	}
	nc := ctx.Conn()
	var batch []Event
	p := &pump{
		e:    e,
		nc:   nc,
		wake: src.Ready(),
		done: src.Gone(),
		// At shutdown this pod's streams of other pods' connections just
		// end: their events stay with the connection's pod, and the client
		// resumes on another pod with Last-Event-ID.
		quit:    e.quit,
		allowed: e.stillAllowed(ctx, who),
		take: func(dst []event) handout {
			var final []byte
			var end bool
			var err error
			batch, final, end, err = src.Take(batch)
			if err != nil {
				return handout{batch: dst[:0], final: ownerGoneAnswers(src.Pending()), end: true}
			}
			dst = dst[:0]
			for _, ev := range batch {
				dst = append(dst, event{id: ev.ID, data: ev.Data})
			}
			if end {
				// As for a local stream the server ended: a client that
				// stopped reading does not hold the writer forever.
				time.AfterFunc(endGrace, func() { _ = nc.Close() })
			}
			return handout{batch: dst, final: final, end: end}
		},
		detach: func() {
			src.Close()
			e.streams.Add(-1)
		},
	}
	head := e.takeOver(ctx)
	return func() { p.run(head) }
}

// ownerGoneAnswers ends a stream whose connection's pod went away: each
// request still waiting for its answer on it gets an error, by its own id
// (an error with id null would be answered to no request), and the stream
// ends. The answers carry no event id: they are this pod's, not in the
// connection's numbering.
func ownerGoneAnswers(pending [][]byte) []byte {
	e := protocol.NewError(protocol.CodeInternalError,
		"The server holding this connection is gone; initialize again and load your sessions",
		map[string]any{"reason": "connection_lost"})
	var b []byte
	for _, id := range pending {
		b = append(b, "event: message\n"...)
		b = appendData(b, protocol.EncodeError(id, e))
		b = append(b, '\n')
	}
	return b
}

// RemoteStreams implements Owner.
func (e *Edge) RemoteStreams() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.remotes)
}
