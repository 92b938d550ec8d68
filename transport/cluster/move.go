package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// Moved connections (httpsse move.go, docs/cluster.md): a draining pod
// hands its HTTP connections to live pods. Where a connection went is kept
// here (moved, a cache) and in the store (iac_moved_connections), which
// the pods read when a connection's own pod is gone. A pod that moved a
// connection answers requests for it 421 naming the pod it went to; the
// forwarding pod then goes there.

// moveTimeout bounds one step of a move between pods.
const moveTimeout = 8 * time.Second

// movedCache maps connection ids to the incarnation serving them now ("":
// the store knew of no move), bounded. A "no move" is kept only
// movedMissTTL: the draining pod may record the move just after a client's
// first try (its reconnect comes back within a second), and a cached miss
// would answer that connection 400 for good.
type movedCache struct {
	mu sync.RWMutex
	m  map[string]movedEntry
}

type movedEntry struct {
	to string
	at time.Time // of a miss
}

const (
	movedCacheMax = 1 << 16
	movedMissTTL  = time.Second
)

func (mc *movedCache) get(id string) (string, bool) {
	mc.mu.RLock()
	defer mc.mu.RUnlock()
	e, ok := mc.m[id]
	if ok && e.to == "" && time.Since(e.at) >= movedMissTTL {
		return "", false
	}
	return e.to, ok
}

func (mc *movedCache) put(id, to string) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.m == nil || len(mc.m) >= movedCacheMax {
		mc.m = map[string]movedEntry{}
	}
	e := movedEntry{to: to}
	if to == "" {
		e.at = time.Now()
	}
	mc.m[id] = e
}

func (mc *movedCache) drop(id string) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.m, id)
}

// MovedTo implements httpsse.Cluster (the cache only).
func (n *Node) MovedTo(connID string) string {
	to, _ := n.moved.get(connID)
	return to
}

// movedInStore reads where connection connID moved ("" when nowhere) and
// caches it.
func (n *Node) movedInStore(connID string) string {
	if to, ok := n.moved.get(connID); ok {
		return to
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	to, err := n.st.MovedConnection(ctx, connID)
	if err != nil {
		n.log.Warn().Err(err).Msg("cluster: cannot read the moved connections")
		return ""
	}
	n.moved.put(connID, to)
	return to
}

// route finds the pod serving a connection whose id names owner: the pod
// it moved to when this pod knows of a move, or when owner (or the pod of
// the move it knew) is gone or unknown and the store knows of one.
func (n *Node) route(owner, connID string) (*peer, *httpsse.Reply) {
	if to := n.MovedTo(connID); to != "" {
		owner = to
	}
	p, bad := n.ownerPeer(owner)
	if bad != nil && bad.Status == fasthttp.StatusBadRequest {
		// The pod it names is gone: so may be the pod a cached move
		// names, when the connection moved again since (a rolling
		// restart moves it once per pod); the store has its last move.
		if to, _ := n.moved.get(connID); to != "" {
			n.moved.drop(connID)
		}
		if to := n.movedInStore(connID); to != "" && to != owner && to != n.self {
			return n.ownerPeer(to)
		}
	}
	return p, bad
}

// movedFromGone: the pod asked about connection connID went while asked
// (it drained, moving its connections, and exited): it reports whether the
// store knows of a later move of the connection, to another pod, which is
// asked instead (route finds it in the cache).
func (n *Node) movedFromGone(p *peer, connID string, err error, tries *int) bool {
	if *tries >= 3 {
		return false
	}
	if to := n.movedSince(p, connID, err); to == "" || to == n.self {
		return false
	}
	*tries++
	return true
}

// movedSince is the pod connection connID moved to, as the store says,
// when err says pod p went while asked about it; "" when it did not go or
// the store knows of no later move.
func (n *Node) movedSince(p *peer, connID string, err error) string {
	if !errors.Is(err, errPodGone) {
		return ""
	}
	n.moved.drop(connID)
	if to := n.movedInStore(connID); to != p.inc {
		return to
	}
	return ""
}

// redirected handles a 421 of the pod asked: the connection moved to the
// pod it names. It reports whether to ask again.
func (n *Node) redirected(connID string, status int32, to string, tries *int) bool {
	if status != fasthttp.StatusMisdirectedRequest || to == "" || *tries >= 3 {
		return false
	}
	*tries++
	n.moved.put(connID, to)
	return true
}

// PrepareMove implements httpsse.Cluster: the first step of a move, to a
// live pod (the next in incarnation order after the last one used).
func (n *Node) PrepareMove(connID string, data []byte, avoid []string) (string, []byte, error) {
	var lastErr error
	targets := n.moveTargets()
	// The pods to avoid go last, in order.
	sort.SliceStable(targets, func(i, j int) bool {
		return !slices.Contains(avoid, targets[i].inc) && slices.Contains(avoid, targets[j].inc)
	})
	for _, p := range targets {
		res, err := n.request(p, &clusterpb.MoveConn{ConnId: connID, Step: httpsse.MovePrepare, Data: data}, moveTimeout)
		r, ok := res.(*clusterpb.MoveConnReply)
		switch {
		case err != nil:
			lastErr = fmt.Errorf("pod %s: %w", p.inc, err)
		case !ok:
			lastErr = fmt.Errorf("pod %s: unexpected answer %T", p.inc, res)
		case r.Error != "":
			lastErr = fmt.Errorf("pod %s: %s", p.inc, r.Error)
		default:
			return p.inc, r.Data, nil
		}
	}
	if lastErr == nil {
		lastErr = errors.New("no live pod to move to")
	}
	return "", nil, lastErr
}

// moveTargets are the live pods (peers.live), other than this one,
// starting after the one the last move used (moves spread over the pods).
func (n *Node) moveTargets() []*peer {
	live := n.peers.live()
	sort.Slice(live, func(i, j int) bool { return live[i].inc < live[j].inc })
	if len(live) == 0 {
		return nil
	}
	k := int(n.moveNext.Add(1)) % len(live)
	return append(live[k:], live[:k]...)
}

// CommitMove implements httpsse.Cluster. Once the pod took the connection
// this pod sends its requests there (421 to other pods).
func (n *Node) CommitMove(to, connID string, data []byte) error {
	r, err := n.moveStep(to, connID, httpsse.MoveCommit, data)
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	if err != nil {
		return err
	}
	n.moved.put(connID, to)
	return nil
}

// AbortMove implements httpsse.Cluster.
func (n *Node) AbortMove(to, connID string) {
	if _, err := n.moveStep(to, connID, httpsse.MoveAbort, nil); err != nil {
		n.log.Warn().Err(err).Str("conn", connID).Msg("cluster: a move was not aborted on its pod")
	}
}

func (n *Node) moveStep(to, connID string, step int32, data []byte) (*clusterpb.MoveConnReply, error) {
	p, err := n.peers.resolve(to)
	if err != nil {
		return nil, err
	}
	res, err := n.request(p, &clusterpb.MoveConn{ConnId: connID, Step: step, Data: data}, moveTimeout)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*clusterpb.MoveConnReply)
	if !ok {
		return nil, fmt.Errorf("pod %s: unexpected answer %T", to, res)
	}
	return r, nil
}

// ForgetMoved implements httpsse.Cluster.
func (n *Node) ForgetMoved(connID string) {
	n.moved.drop(connID)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.st.ForgetConnection(ctx, connID); err != nil {
			n.log.Warn().Err(err).Msg("cluster: cannot forget a moved connection")
		}
	}()
}

// serveMove serves a step of a move to this pod (service actor; the edge
// call waits for actors, so it runs off the service actor). A commit is
// recorded in the store before it is answered: from then on every pod
// finds the connection here, its first pod gone or not.
func (s *service) serveMove(m *clusterpb.MoveConn) any {
	o := s.n.owner.get()
	if o == nil {
		return &clusterpb.MoveConnReply{Error: "Server is starting"}
	}
	data, err := o.AdoptConn(int(m.Step), m.ConnId, m.Data)
	if err != nil {
		return &clusterpb.MoveConnReply{Error: err.Error()}
	}
	if m.Step == httpsse.MoveCommit {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.n.st.MoveConnection(ctx, m.ConnId, s.n.self); err != nil {
			// Pods that ask the first pod while it lives still find it.
			s.n.log.Warn().Err(err).Str("conn", m.ConnId).Msg("cluster: moved connection not recorded")
		}
		s.n.moved.drop(m.ConnId)
	}
	return &clusterpb.MoveConnReply{Data: data}
}
