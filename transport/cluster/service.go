package cluster

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// watchPeer asks the service actor to watch another pod's service actor.
type watchPeer struct{ pid *actor.PID }

// remoteStream is a stream of this pod's connection whose GET is on another
// pod, by its stream actor there.
type remoteStream struct {
	connID string
	handle uint64
	pid    *actor.PID
}

// service is each pod's one actor that other pods talk to: it serves their
// forwarded requests on this pod's connections, feeds their streams, hands
// sessions over and answers pings. It also watches the other pods' service
// actors and the stream actors of this pod's connections elsewhere. Every
// call it makes on the edge takes a mutex, never waits: what can (DELETE,
// handover) runs in a goroutine that answers.
type service struct {
	n *Node
	// streams by stream actor (key: pidKey).
	streams map[string][]remoteStream
}

func newService(n *Node) *service { return &service{n: n, streams: map[string][]remoteStream{}} }

func pidKey(p *actor.PID) string { return p.Address + "/" + p.Id }

var unavailable = &clusterpb.Reply{Status: fasthttp.StatusServiceUnavailable, Error: "Server is starting"}

func (s *service) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *clusterpb.Post:
		o := s.n.owner.get()
		if o == nil {
			ctx.Respond(unavailable)
			return
		}
		r := o.ServePost(m.ConnId, m.SessionId, m.Principal, m.Traceparent, m.Body)
		ctx.Respond(&clusterpb.Reply{Status: int32(r.Status), Error: r.Error})
	case *clusterpb.Delete:
		o := s.n.owner.get()
		if o == nil {
			ctx.Respond(unavailable)
			return
		}
		s.async(ctx, func() any {
			r := o.ServeDelete(m.ConnId, m.Principal)
			return &clusterpb.Reply{Status: int32(r.Status), Error: r.Error}
		})
	case *clusterpb.Attach:
		s.attach(ctx, m)
	case *clusterpb.Take:
		o := s.n.owner.get()
		if o == nil {
			ctx.Respond(&clusterpb.Batch{End: true})
			return
		}
		batch, final, end := o.Take(m.ConnId, m.Handle, nil)
		out := &clusterpb.Batch{Final: final, End: end, Events: make([]*clusterpb.Event, len(batch))}
		if !end {
			out.Pending = o.Pending(m.ConnId, m.Handle)
		}
		for i := range batch {
			out.Events[i] = &clusterpb.Event{Id: batch[i].ID, Data: batch[i].Data}
		}
		ctx.Respond(out)
	case *clusterpb.Detach:
		s.detach(ctx, m.ConnId, m.Handle)
	case *clusterpb.HandOver:
		s.async(ctx, func() any {
			if err := s.n.srv.HandOff(m.SessionId, handOffTimeout); err != nil {
				return &clusterpb.HandOverReply{Error: err.Error()}
			}
			return &clusterpb.HandOverReply{Ok: true}
		})
	case *clusterpb.Adopt:
		s.async(ctx, func() any { return adoptReply(s.n.adopt(m.SessionId, m.McpServers, "handed over")) })
	case *clusterpb.Share:
		s.serveShare(ctx, m)
	case *clusterpb.MoveConn:
		s.async(ctx, func() any { return s.serveMove(m) })
	case *clusterpb.Ping:
		ctx.Respond(&clusterpb.Pong{Incarnation: s.n.self})
	case *watchPeer:
		ctx.Watch(m.pid)
	case *actor.Terminated:
		if m.Who.Id == serviceName {
			s.n.peers.lost(m.Who)
			return
		}
		// A stream actor of another pod went away (its client left, or
		// its pod died): its streams here are detached.
		key := pidKey(m.Who)
		for _, rs := range s.streams[key] {
			if o := s.n.owner.get(); o != nil {
				o.Detach(rs.connID, rs.handle)
			}
		}
		delete(s.streams, key)
	}
}

// attach makes the sender's stream actor the stream of a connection here.
func (s *service) attach(ctx actor.Context, m *clusterpb.Attach) {
	o := s.n.owner.get()
	if o == nil {
		ctx.Respond(&clusterpb.AttachReply{Status: unavailable.Status, Error: unavailable.Error})
		return
	}
	var last *uint64
	if m.HasLastEventId {
		v := m.LastEventId
		last = &v
	}
	target := actor.NewPID(m.StreamAddress, m.StreamId)
	root := ctx.ActorSystem().Root
	ready := func() { root.Send(target, &clusterpb.Ready{}) }
	h, reject, replaced, r := o.AttachRemote(m.ConnId, m.SessionId, m.Principal, last, ready)
	if r.Status == fasthttp.StatusOK && reject == nil {
		key := pidKey(target)
		if len(s.streams[key]) == 0 {
			ctx.Watch(target)
		}
		s.streams[key] = append(s.streams[key], remoteStream{connID: m.ConnId, handle: h, pid: target})
	}
	ctx.Respond(&clusterpb.AttachReply{Status: int32(r.Status), Error: r.Error, Handle: h, Reject: reject, Replaced: replaced})
}

func (s *service) detach(ctx actor.Context, connID string, handle uint64) {
	if o := s.n.owner.get(); o != nil {
		o.Detach(connID, handle)
	}
	for key, list := range s.streams {
		for i, rs := range list {
			if rs.connID == connID && rs.handle == handle {
				list = append(list[:i], list[i+1:]...)
				if len(list) == 0 {
					delete(s.streams, key)
					ctx.Unwatch(rs.pid)
				} else {
					s.streams[key] = list
				}
				return
			}
		}
	}
}

// async answers the sender with what f returns, from a goroutine: f may
// wait (a DELETE waits for the connection's turns to answer).
func (s *service) async(ctx actor.Context, f func() any) {
	sender, root := ctx.Sender(), ctx.ActorSystem().Root
	if sender == nil {
		return
	}
	go func() {
		var reply any
		defer func() {
			if p := recover(); p != nil {
				s.n.log.Error().Interface("panic", p).Msg("cluster: request crashed")
				reply = &clusterpb.Reply{Status: fasthttp.StatusInternalServerError, Error: fmt.Sprint("internal error: ", p)}
			}
			root.Send(sender, reply)
		}()
		reply = f()
	}()
}
