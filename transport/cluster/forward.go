package cluster

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// Texts of the replies for connections this pod cannot serve.
const (
	msgConnGone       = "Connection not found: the server that held it is gone. Send 'initialize' again and load your sessions."
	msgConnUnknown    = "Connection not found. Send 'initialize' first or provide a valid Acp-Connection-Id header."
	msgOwnerNoAnswer  = "The server holding this connection does not answer; try again shortly."
	msgOwnerStreamErr = "The server holding this connection did not accept the stream"
)

// owner finds the pod of a connection: a reply to send instead when it is
// gone or unknown.
func (n *Node) ownerPeer(inc string) (*peer, *httpsse.Reply) {
	p, err := n.peers.resolve(inc)
	switch {
	case errors.Is(err, errPodGone):
		return nil, &httpsse.Reply{Status: fasthttp.StatusBadRequest, Error: msgConnGone}
	case errors.Is(err, errUnknownPod):
		return nil, &httpsse.Reply{Status: fasthttp.StatusBadRequest, Error: msgConnUnknown}
	case err != nil:
		n.log.Warn().Err(err).Msg("cluster: cannot look up a pod")
		return nil, &httpsse.Reply{Status: fasthttp.StatusServiceUnavailable, Error: msgOwnerNoAnswer}
	}
	return p, nil
}

// failed is the reply for a request to a pod that did not answer.
func (n *Node) failed(p *peer, err error, what string) httpsse.Reply {
	if errors.Is(err, errPodGone) {
		return httpsse.Reply{Status: fasthttp.StatusBadRequest, Error: msgConnGone}
	}
	n.log.Warn().Err(err).Str("pod", p.inc).Str("request", what).Msg("cluster: pod did not answer")
	return httpsse.Reply{Status: fasthttp.StatusServiceUnavailable, Error: msgOwnerNoAnswer}
}

// Post implements httpsse.Cluster.
func (n *Node) Post(owner, connID, sessionID, who, traceparent string, body []byte) httpsse.Reply {
	for tries := 0; ; {
		p, bad := n.route(owner, connID)
		if bad != nil {
			return *bad
		}
		n.met.forwarded.WithLabelValues("post").Inc()
		start := time.Now()
		res, err := n.forward(p, &clusterpb.Post{ConnId: connID, SessionId: sessionID, Body: body, Principal: who, Traceparent: traceparent}, forwardTimeout)
		n.met.hop.WithLabelValues("post").Observe(time.Since(start).Seconds())
		r, ok := res.(*clusterpb.Reply)
		if n.movedFromGone(p, connID, err, &tries) {
			continue
		}
		if err != nil || !ok {
			return n.failed(p, err, "post")
		}
		if n.redirected(connID, r.Status, r.Error, &tries) {
			continue
		}
		return httpsse.Reply{Status: int(r.Status), Error: r.Error}
	}
}

// Delete implements httpsse.Cluster. A connection of a dead pod is closed
// already: 200, as for any unknown id.
func (n *Node) Delete(owner, connID, who string) httpsse.Reply {
	for tries := 0; ; {
		p, bad := n.route(owner, connID)
		if bad != nil {
			return httpsse.Reply{Status: fasthttp.StatusOK}
		}
		n.met.forwarded.WithLabelValues("delete").Inc()
		start := time.Now()
		res, err := n.request(p, &clusterpb.Delete{ConnId: connID, Principal: who}, forwardTimeout)
		n.met.hop.WithLabelValues("delete").Observe(time.Since(start).Seconds())
		r, ok := res.(*clusterpb.Reply)
		if err != nil || !ok {
			if errors.Is(err, errPodGone) {
				return httpsse.Reply{Status: fasthttp.StatusOK}
			}
			return n.failed(p, err, "delete")
		}
		if n.redirected(connID, r.Status, r.Error, &tries) {
			continue
		}
		return httpsse.Reply{Status: int(r.Status), Error: r.Error}
	}
}

// Attach implements httpsse.Cluster: a stream actor here, watched by the
// owner and watching it, receives Ready; the writer takes the events.
func (n *Node) Attach(owner, connID, sessionID, who string, last *uint64) (httpsse.RemoteSource, httpsse.Reply, []byte, bool) {
	for tries := 0; ; {
		src, r, reject, replaced, retry := n.attach(owner, connID, sessionID, who, last, &tries)
		if retry || n.redirected(connID, int32(r.Status), r.Error, &tries) {
			continue
		}
		return src, r, reject, replaced
	}
}

func (n *Node) attach(owner, connID, sessionID, who string, last *uint64, tries *int) (src *source, _ httpsse.Reply, reject []byte, replaced, retry bool) {
	p, bad := n.route(owner, connID)
	if bad != nil {
		return nil, *bad, nil, false, false
	}
	src = &source{n: n, p: p, connID: connID, ready: make(chan struct{}, 1), gone: make(chan struct{})}
	src.pid = n.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &streamActor{src: src} }))
	msg := &clusterpb.Attach{ConnId: connID, SessionId: sessionID, StreamAddress: src.pid.Address, StreamId: src.pid.Id,
		Principal: who}
	if last != nil {
		msg.HasLastEventId, msg.LastEventId = true, *last
	}
	start := time.Now()
	res, err := n.request(p, msg, attachTimeout)
	n.met.hop.WithLabelValues("attach").Observe(time.Since(start).Seconds())
	r, ok := res.(*clusterpb.AttachReply)
	if err != nil || !ok {
		n.sys.Root.Stop(src.pid)
		if n.movedFromGone(p, connID, err, tries) {
			return nil, httpsse.Reply{}, nil, false, true
		}
		return nil, n.failed(p, err, "attach"), nil, false, false
	}
	if r.Status != fasthttp.StatusOK || r.Reject != nil {
		n.sys.Root.Stop(src.pid)
		return nil, httpsse.Reply{Status: int(r.Status), Error: r.Error}, r.Reject, false, false
	}
	n.met.attaches.Inc()
	src.handle = r.Handle
	return src, httpsse.Reply{Status: int(r.Status)}, nil, r.Replaced, false
}

// source is a stream of a connection of another pod, read by the local
// GET's writer.
type source struct {
	n      *Node
	p      *peer
	connID string
	handle uint64
	pid    *actor.PID
	// pending is the owner's list with the last batch (see Pending); only
	// the local writer's goroutine uses it.
	pending [][]byte
	ready   chan struct{}
	gone    chan struct{}
	once    sync.Once
	closed  sync.Once
}

func (s *source) Ready() <-chan struct{} { return s.ready }
func (s *source) Gone() <-chan struct{}  { return s.gone }

func (s *source) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *source) lost() { s.once.Do(func() { close(s.gone) }) }

// Take implements httpsse.RemoteSource: one round trip to the owner, once
// the local writer knows its client is still there.
func (s *source) Take(dst []httpsse.Event) ([]httpsse.Event, []byte, bool, error) {
	start := time.Now()
	res, err := s.n.forward(s.p, &clusterpb.Take{ConnId: s.connID, Handle: s.handle}, takeTimeout)
	s.n.met.hop.WithLabelValues("take").Observe(time.Since(start).Seconds())
	b, ok := res.(*clusterpb.Batch)
	if to := s.n.movedSince(s.p, s.connID, err); to != "" {
		// Its pod moved the connection (a drain) and went before this
		// stream was told to end: it ends now, and the client's
		// reconnect with Last-Event-ID reaches the connection there.
		return dst[:0], nil, true, nil
	}
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("unexpected answer %T", res)
		}
		return dst[:0], nil, true, err
	}
	dst = dst[:0]
	for _, ev := range b.Events {
		dst = append(dst, httpsse.Event{ID: ev.Id, Data: ev.Data})
	}
	s.pending = b.Pending
	return dst, b.Final, b.End, nil
}

// Pending implements httpsse.RemoteSource.
func (s *source) Pending() [][]byte { return s.pending }

// Close implements httpsse.RemoteSource.
func (s *source) Close() {
	s.closed.Do(func() {
		s.n.sys.Root.Send(s.p.service, &clusterpb.Detach{ConnId: s.connID, Handle: s.handle})
		s.n.sys.Root.Stop(s.pid)
	})
}

// streamActor is the local end of a remote stream: the owner sends it
// Ready and watches it; it watches the owner's service actor, so that the
// death of either is noticed by the other at once.
type streamActor struct{ src *source }

func (a *streamActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(a.src.p.service)
	case *clusterpb.Ready:
		a.src.signal()
	case *actor.Terminated:
		if m.Who.Equal(a.src.p.service) {
			a.src.lost()
		}
	case *actor.Stopping:
		a.src.lost()
	}
}

// TakeOver implements actors.Handover.
func (n *Node) TakeOver(sessionID, owner string) error {
	if owner == n.self {
		return errors.New("held by another session actor of this pod")
	}
	p, err := n.peers.resolve(owner)
	switch {
	case errors.Is(err, errPodGone):
		return nil // declared dead: its lease can be taken
	case err != nil:
		return err
	}
	start := time.Now()
	res, err := n.request(p, &clusterpb.HandOver{SessionId: sessionID}, handoverTimeout)
	n.met.hop.WithLabelValues("handover").Observe(time.Since(start).Seconds())
	if errors.Is(err, errPodGone) {
		return nil
	}
	r, ok := res.(*clusterpb.HandOverReply)
	switch {
	case err != nil:
		return fmt.Errorf("pod %s did not answer: %w", owner, err)
	case !ok:
		return fmt.Errorf("pod %s: unexpected answer %T", owner, res)
	case !r.Ok:
		return fmt.Errorf("pod %s: %s", owner, r.Error)
	}
	n.met.handovers.Inc()
	return nil
}
