package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// shareTimeout bounds asking the holding pod for a proxy connection (it
// answers once the proxy exists; the load's own answer comes as a Relay).
const shareTimeout = 5 * time.Second

// Share implements actors.Handover: the pod owner, holding sessionID, makes
// a proxy connection attached to it for the stub session actor of this pod.
func (n *Node) Share(sessionID, owner, principal, conn string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	if owner == n.self {
		return nil, errors.New("held by another session actor of this pod")
	}
	p, err := n.peers.resolve(owner)
	if err != nil {
		return nil, err // gone: the caller takes the session over instead
	}
	start := time.Now()
	res, err := n.request(p, &clusterpb.Share{SessionId: sessionID, Init: init, Open: open,
		StubAddress: stub.Address, StubId: stub.Id, Principal: principal, ConnId: conn}, shareTimeout)
	n.met.hop.WithLabelValues("share").Observe(time.Since(start).Seconds())
	r, ok := res.(*clusterpb.ShareReply)
	switch {
	case err != nil:
		return nil, fmt.Errorf("pod %s did not answer: %w", owner, err)
	case !ok:
		return nil, fmt.Errorf("pod %s: unexpected answer %T", owner, res)
	case r.Error != "":
		return nil, fmt.Errorf("pod %s: %s", owner, r.Error)
	}
	return actor.NewPID(r.ProxyAddress, r.ProxyId), nil
}

// serveShare answers a Share of another pod (service actor).
func (s *service) serveShare(ctx actor.Context, m *clusterpb.Share) {
	stub := actor.NewPID(m.StubAddress, m.StubId)
	proxy, err := s.n.srv.ServeShare(m.SessionId, m.Principal, m.ConnId, stub, m.Init, m.Open)
	if err != nil {
		ctx.Respond(&clusterpb.ShareReply{Error: err.Error()})
		return
	}
	ctx.Respond(&clusterpb.ShareReply{ProxyAddress: proxy.Address, ProxyId: proxy.Id})
}
