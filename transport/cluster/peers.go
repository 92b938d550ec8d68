package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// peerState is what this pod knows of another.
type peerState uint8

const (
	// alive: watched, nothing wrong seen.
	alive peerState = iota
	// checking: its watch fired (its connection to us broke); the probe
	// says whether it is dead.
	checking
	// unreachable: it does not answer, but its port is not refused (a
	// partition, a stalled process): not declared dead; its leases expire.
	unreachable
	// dead: gone for good (declared in the store).
	dead
)

type peer struct {
	inc     string
	addr    string
	service *actor.PID
	state   peerState
	// settled is closed when a check ends; gone when the peer is dead.
	settled chan struct{}
	gone    chan struct{}
}

type peers struct {
	n  *Node
	mu sync.Mutex
	m  map[string]*peer
	// unknown remembers ids no pod has (until when), so that requests with
	// made-up connection ids do not each cost a database query.
	unknown map[string]time.Time
	// reread is when live last read the pods table for want of a live pod.
	reread time.Time
}

// unknownFor is how long an id found in no row is taken as unknown; a pod
// registers before it answers its first initialize, so an id of a real
// connection is never in it.
const unknownFor = 30 * time.Second

func newPeers(n *Node) *peers {
	return &peers{n: n, m: map[string]*peer{}, unknown: map[string]time.Time{}}
}

var (
	errUnknownPod = errors.New("unknown pod")
	errPodGone    = errors.New("pod gone")
	// errUnreachable: the pod did not answer a ping in time.
	errUnreachable = errors.New("pod does not answer")
)

// addLocked records a pod, watched by the service actor unless dead.
func (ps *peers) addLocked(inc store.Incarnation) *peer {
	p := &peer{inc: inc.ID, addr: inc.Addr, service: actor.NewPID(inc.Addr, serviceName),
		settled: make(chan struct{}), gone: make(chan struct{})}
	close(p.settled)
	ps.m[inc.ID] = p
	if !inc.Dead.IsZero() {
		p.state = dead
		close(p.gone)
		return p
	}
	ps.n.sys.Root.Send(ps.n.service, &watchPeer{pid: p.service})
	return p
}

// resolve finds the pod of incarnation inc (the store when it is new
// here), waiting for a check in progress. errPodGone for a dead pod,
// errUnknownPod for an id no pod ever had.
func (ps *peers) resolve(inc string) (*peer, error) {
	ps.mu.Lock()
	p := ps.m[inc]
	until, unknown := ps.unknown[inc]
	ps.mu.Unlock()
	if p == nil && unknown && time.Now().Before(until) {
		return nil, errUnknownPod
	}
	if p == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		row, err := ps.n.st.LookupIncarnation(ctx, inc)
		if errors.Is(err, store.ErrUnknownIncarnation) {
			ps.mu.Lock()
			if len(ps.unknown) >= 4096 {
				clear(ps.unknown)
			}
			ps.unknown[inc] = time.Now().Add(unknownFor)
			ps.mu.Unlock()
			return nil, errUnknownPod
		}
		if err != nil {
			return nil, err
		}
		ps.mu.Lock()
		if p = ps.m[inc]; p == nil {
			p = ps.addLocked(row)
		}
		ps.mu.Unlock()
	}
	ps.mu.Lock()
	settled := p.settled
	ps.mu.Unlock()
	select {
	case <-settled:
	case <-time.After(2 * dialTimeout):
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.state == dead {
		return p, errPodGone
	}
	return p, nil
}

// suspect checks a pod that is slow to answer (unless a check runs); the
// channel closes when the check is over.
func (ps *peers) suspect(p *peer) <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.state == alive {
		p.state = checking
		p.settled = make(chan struct{})
		go ps.check(p)
	}
	return p.settled
}

func (ps *peers) state(p *peer) peerState {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return p.state
}

// lost: the watch of the pod at service fired (its connection to this one
// broke, or it stopped). It is checked at once.
func (ps *peers) lost(service *actor.PID) {
	ps.mu.Lock()
	var p *peer
	for _, q := range ps.m {
		if q.service.Equal(service) {
			p = q
		}
	}
	if p == nil || p.state == dead || p.state == checking {
		ps.mu.Unlock()
		return
	}
	p.state = checking
	p.settled = make(chan struct{})
	ps.mu.Unlock()
	ps.n.log.Info().Str("pod", p.inc).Str("addr", p.addr).Msg("cluster: lost the connection to a pod; checking it")
	go ps.check(p)
}

// check decides what a pod whose watch fired is: dead when its address
// refuses connections or another incarnation answers there (declared so in
// the store: its leases can be taken at once, its connections are gone);
// alive when it answers a ping (watched again); else unreachable.
func (ps *peers) check(p *peer) {
	defer func() {
		if r := recover(); r != nil {
			ps.n.log.Error().Interface("panic", r).Msg("cluster: pod check crashed")
		}
	}()
	next := unreachable
	pong := make(chan string, 1)
	go func() {
		res, err := ps.n.sys.Root.RequestFuture(p.service, &clusterpb.Ping{}, pingTimeout).Result()
		if r, ok := res.(*clusterpb.Pong); err == nil && ok {
			pong <- r.Incarnation
		}
	}()
	// Dialled again while the ping waits: a process that was just killed
	// may still hold its listening socket for a moment after its
	// connections broke.
	deadline := time.Now().Add(pingTimeout)
	for time.Now().Before(deadline) {
		if refused(p.addr) {
			next = dead
			break
		}
		select {
		case inc := <-pong:
			next = alive
			if inc != p.inc {
				next = dead
			}
			deadline = time.Time{}
		case <-time.After(50 * time.Millisecond):
		}
	}
	ps.settle(p, next)
}

// refused reports whether addr refuses TCP connections: nothing listens
// there any more.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	_ = c.Close()
	return false
}

func (ps *peers) settle(p *peer, next peerState) {
	ps.mu.Lock()
	was := p.state
	if was == dead {
		ps.mu.Unlock()
		return
	}
	p.state = next
	select {
	case <-p.settled:
	default:
		close(p.settled)
	}
	if next == dead {
		close(p.gone)
	}
	ps.mu.Unlock()
	switch next {
	case alive:
		ps.n.sys.Root.Send(ps.n.service, &watchPeer{pid: p.service})
	case dead:
		ps.n.met.podsLost.Inc()
		defer ps.n.kickRecovery() // after MarkDead: its leases are free
		ps.n.log.Warn().Str("pod", p.inc).Str("addr", p.addr).Msg("cluster: pod gone; its connections are closed and its sessions can be taken over")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ps.n.st.MarkDead(ctx, p.inc); err != nil {
			ps.n.log.Warn().Err(err).Str("pod", p.inc).Msg("cluster: cannot declare the pod dead in the store")
		}
	case unreachable:
		if was != unreachable {
			ps.n.log.Warn().Str("pod", p.inc).Str("addr", p.addr).Msg("cluster: pod does not answer; its sessions are taken over when their leases expire")
		}
	}
}

// refresh takes in the pods table: pods declared dead (by themselves at
// shutdown, or by another pod) are dead here too, new ones are watched,
// unreachable ones are checked again.
func (ps *peers) refresh(incs []store.Incarnation) {
	var recheck []*peer
	kick := false
	ps.mu.Lock()
	for _, inc := range incs {
		if inc.ID == ps.n.self {
			continue
		}
		p := ps.m[inc.ID]
		if p == nil {
			if inc.Dead.IsZero() {
				ps.addLocked(inc)
			}
			continue
		}
		switch {
		case !inc.Dead.IsZero() && p.state != dead:
			kick = true
			p.state = dead
			select {
			case <-p.settled:
			default:
				close(p.settled)
			}
			close(p.gone)
		case p.state == unreachable:
			p.state = checking
			p.settled = make(chan struct{})
			recheck = append(recheck, p)
		}
	}
	ps.mu.Unlock()
	for _, p := range recheck {
		go ps.check(p)
	}
	if kick {
		ps.n.kickRecovery()
	}
}

// live are the pods to hand work to (a drain's turns and connections):
// those believed alive, and those being checked (a watch that fired on a
// loaded machine; asking them costs a timeout at worst), not this one.
// With none, the pods table is read first: a pod started a moment ago (a
// rolling update's replacement) may not be watched yet; at most once per
// liveReread, as a drain asks for each of its sessions and connections.
func (ps *peers) live() []*peer {
	if out := ps.liveNow(); len(out) > 0 {
		return out
	}
	ps.mu.Lock()
	due := time.Since(ps.reread) >= liveReread
	if due {
		ps.reread = time.Now()
	}
	ps.mu.Unlock()
	if !due {
		return nil
	}
	ps.n.refresh()
	return ps.liveNow()
}

// liveReread bounds live's reads of the pods table.
const liveReread = time.Second

func (ps *peers) liveNow() []*peer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*peer
	for _, p := range ps.m {
		if p.state == alive || p.state == checking {
			out = append(out, p)
		}
	}
	return out
}

// request sends msg to a pod's service actor and waits for the answer, or
// until the pod is found dead (errPodGone) or unreachable, whichever comes
// first.
func (n *Node) request(p *peer, msg any, timeout time.Duration) (any, error) {
	return n.ask(p, msg, timeout, false)
}

// forward is request for what the pod may be serving once it has it (a
// client's POST, a take of its stream's events): a pod only slow to answer
// its ping (a loaded machine, a stall) is waited for up to timeout, since
// an error now would tell the client its request failed while it may run
// (a prompt sent again would run twice), or drop the events taken.
func (n *Node) forward(p *peer, msg any, timeout time.Duration) (any, error) {
	return n.ask(p, msg, timeout, true)
}

func (n *Node) ask(p *peer, msg any, timeout time.Duration, waitSlow bool) (any, error) {
	f := n.sys.Root.RequestFuture(p.service, msg, timeout)
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f.Result()
		ch <- result{v, err}
	}()
	// A pod that has not answered within slowAnswer is checked: when it is
	// gone (its port refuses connections) the request ends at once instead
	// of waiting for the library to give up on it (seconds).
	slow := time.NewTimer(slowAnswer)
	defer slow.Stop()
	var settled <-chan struct{}
	for {
		select {
		case r := <-ch:
			return r.v, r.err
		case <-p.gone:
			return nil, errPodGone
		case <-slow.C:
			settled = n.peers.suspect(p)
		case <-settled:
			settled = nil
			if !waitSlow && n.peers.state(p) == unreachable {
				return nil, errUnreachable
			}
		}
	}
}

// ownerRef holds the edge serving this pod's connections.
type ownerRef struct{ v atomic.Value }

type ownerBox struct{ o httpsse.Owner }

func (r *ownerRef) set(o httpsse.Owner) { r.v.Store(ownerBox{o}) }

func (r *ownerRef) get() httpsse.Owner {
	b, _ := r.v.Load().(ownerBox)
	return b.o
}
