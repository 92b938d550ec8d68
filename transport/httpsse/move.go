package httpsse

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/protocol"
)

// Moving HTTP connections off a draining pod (cluster mode, issue 29). A
// connection's id names the pod that answered its initialize; when that pod
// drains, each of its SSE connections is handed over, with its outbox (every
// buffered event with its id, the id counter, what each stream was handed)
// and its actor's state, to a live pod. Its streams here end; the client
// reconnects with Last-Event-ID through the load balancer and any pod
// serves it: the pod it moved to directly, any other by forwarding there
// (the cluster records where it went: Cluster.MovedTo). WebSockets do not
// move: their socket is their stream (they close 1001 at shutdown).

// Steps of a move, on the pod taking the connection (Owner.AdoptConn).
const (
	MovePrepare = 1
	MoveCommit  = 2
	MoveAbort   = 3
)

// reasonMoved closes a connection here that moved to another pod.
const reasonMoved = "moved"

// moveStepTimeout bounds each step of one connection's move.
const moveStepTimeout = 5 * time.Second

// movedOutbox is a connection's outbox as it moves (MoveCommit's data).
type movedOutbox struct {
	LastID uint64      `json:"lastId"`
	Slots  []movedSlot `json:"slots"`
	// Requests are the requests posted whose answer no stream was handed
	// yet (cluster tracking: conn.requests), raw id → slot key.
	Requests map[string]string `json:"requests,omitempty"`
	// Asked are the connection's requests to its client for a proxy, not
	// answered yet; Relayed the requests relayed to each proxy, unanswered.
	Asked   []actors.MovedRequest          `json:"asked,omitempty"`
	Relayed map[string][]actors.MovedRelay `json:"relayed,omitempty"`
}

type movedSlot struct {
	Key     string       `json:"key"`
	Written uint64       `json:"written"`
	Evicted uint64       `json:"evicted"`
	Events  []movedEvent `json:"events,omitempty"`
}

type movedEvent struct {
	ID   uint64              `json:"id"`
	Data protocol.RawMessage `json:"data"`
	At   int64               `json:"at"`
}

// HandOverConnections moves every SSE connection of this pod to live pods
// (the drain at SIGTERM, before the turns' sessions are adopted elsewhere
// and before Shutdown). It returns how many moved; those that could not
// (no live pod, a step failed or ctx ended) stay here and close at
// Shutdown as before. nil cluster: nothing to do.
func (e *Edge) HandOverConnections(ctx context.Context) int {
	if e.cluster == nil {
		return 0
	}
	e.enter(edgeDraining)
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved int
		sem   = make(chan struct{}, 16)
	)
	for _, c := range e.snapshot() {
		if c.ws || c.initPending() {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			to, err := e.moveConn(c)
			if err != nil {
				c.log.Warn().Err(err).Msg("connection not handed over; it closes with this pod")
				return
			}
			c.log.Info().Str("to", to).Msg("connection handed over to another pod")
			mu.Lock()
			moved++
			mu.Unlock()
		}()
	}
	wg.Wait()
	e.log.Info().Int("moved", moved).Dur("took", time.Since(start)).Msg("connections handed over")
	return moved
}

// moveConn moves c to a live pod (see the top of the file).
func (e *Edge) moveConn(c *conn) (string, error) {
	c.mu.Lock()
	w := &moveWait{done: make(chan struct{})}
	if c.state != stateOpen || !c.moving.CompareAndSwap(nil, w) {
		c.mu.Unlock()
		return "", errConnClosed
	}
	c.mu.Unlock()
	defer func() {
		c.moving.Store(nil)
		close(w.done)
	}()
	mv, err := c.actor.StartMove(moveStepTimeout)
	if err != nil {
		return "", err
	}
	if len(mv.Legless) > 0 {
		c.log.Warn().Strs("sessions", mv.Legless).Msg("connection moves without its leg of these sessions: it opens them again at its next request, a prompt owed there unanswered")
	}
	var avoid []string
	for _, s := range mv.State.Sessions {
		if s.Holder != "" {
			avoid = append(avoid, s.Holder)
		}
	}
	to, reply, err := e.cluster.PrepareMove(c.id, protocol.MustMarshal(&mv.State), avoid)
	if err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	var legs map[string]actors.LegRef
	if len(reply) > 0 {
		if err := protocol.Unmarshal(reply, &legs); err != nil {
			e.cluster.AbortMove(to, c.id)
			return "", fmt.Errorf("prepare: %w", err)
		}
	}
	relayed := mv.Repoint(legs, moveStepTimeout)
	asked, err := mv.Finish(moveStepTimeout)
	if err != nil {
		e.cluster.AbortMove(to, c.id)
		return "", fmt.Errorf("flush: %w", err)
	}
	// From here on frames for c are dropped: its outbox is what moves.
	c.mu.Lock()
	out := c.exportLocked()
	c.state = stateClosed
	c.reason = reasonMoved
	c.mu.Unlock()
	out.Asked, out.Relayed = asked, relayed
	if err := e.cluster.CommitMove(to, c.id, protocol.MustMarshal(out)); err != nil {
		// The connection is lost: its client initializes again.
		e.dropMoved(c, mv, reasonShutdown)
		return "", fmt.Errorf("commit: %w", err)
	}
	e.dropMoved(c, mv, reasonMoved)
	return to, nil
}

// dropMoved lets a connection that moved (or failed to) go from this pod:
// its streams end (their clients reconnect, with Last-Event-ID, to
// wherever it is now), its actor stops without cancelling anything.
func (e *Edge) dropMoved(c *conn, mv *actors.Move, reason string) {
	c.closeOnce.Do(func() {
		e.mu.Lock()
		delete(e.conns, c.id)
		e.leaveUserLocked(c.principal)
		e.mu.Unlock()
		e.settle(c)
		c.mu.Lock()
		c.endStreamsLocked(nil, false)
		c.mu.Unlock()
		mv.Stop()
		e.met.closed.WithLabelValues(reason).Inc()
	})
}

// exportLocked is c's outbox as it moves (c.mu held).
func (c *conn) exportLocked() *movedOutbox {
	out := &movedOutbox{LastID: c.lastID}
	add := func(s *slot) {
		ms := movedSlot{Key: s.key, Written: s.written, Evicted: s.evicted}
		for _, ev := range s.buf[s.head:] {
			ms.Events = append(ms.Events, movedEvent{ID: ev.id, Data: ev.data, At: ev.at})
		}
		out.Slots = append(out.Slots, ms)
	}
	add(c.main)
	for _, s := range c.sessions {
		add(s)
	}
	if len(c.requests) > 0 {
		out.Requests = make(map[string]string, len(c.requests))
		for k, v := range c.requests {
			out.Requests[k] = v
		}
	}
	return out
}

// importLocked makes in c's outbox (c.mu held, c new).
func (c *conn) importLocked(in *movedOutbox) {
	c.lastID = in.LastID
	for _, ms := range in.Slots {
		s := c.main
		if ms.Key != "" {
			s = &slot{key: ms.Key}
			if c.sessions == nil {
				c.sessions = map[string]*slot{}
			}
			c.sessions[ms.Key] = s
		}
		s.written, s.evicted = ms.Written, ms.Evicted
		for _, ev := range ms.Events {
			s.push(event{id: ev.ID, data: ev.Data, at: ev.At})
			c.count++
			c.bytes += len(ev.Data)
		}
	}
	if len(in.Requests) > 0 {
		c.requests = in.Requests
	}
}

// moveWait is closed when a move of its connection ends.
type moveWait struct{ done chan struct{} }

// waitMove waits while c is moving (bounded); it reports whether it waited,
// so that the caller looks the connection up again.
func (c *conn) waitMove() bool {
	w := c.moving.Load()
	if w == nil {
		return false
	}
	select {
	case <-w.done:
	case <-time.After(4 * moveStepTimeout):
	}
	return true
}

// AdoptConn implements Owner: a step of the move of a connection of a
// draining pod to this one.
func (e *Edge) AdoptConn(step int, connID string, data []byte) ([]byte, error) {
	switch step {
	case MovePrepare:
		return e.adoptPrepare(connID, data)
	case MoveCommit:
		return nil, e.adoptCommit(connID, data)
	case MoveAbort:
		e.mu.Lock()
		c := e.incoming[connID]
		delete(e.incoming, connID)
		e.mu.Unlock()
		if c != nil {
			c.mu.Lock()
			c.state = stateClosed
			c.early = nil
			c.mu.Unlock()
			c.actor.Close(e.cfg.CloseTimeout)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("unknown move step %d", step)
}

func (e *Edge) adoptPrepare(connID string, data []byte) ([]byte, error) {
	if e.current() != edgeServing {
		return nil, errors.New(msgShuttingDown)
	}
	var st actors.MovedConn
	if err := protocol.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("moved connection state: %w", err)
	}
	e.mu.Lock()
	_, here := e.conns[connID]
	_, coming := e.incoming[connID]
	e.mu.Unlock()
	if here || coming {
		return nil, errors.New("connection already here")
	}
	c := &conn{e: e, id: connID, main: &slot{}, principal: st.Principal, state: stateIncoming}
	if c.principal == "" {
		c.principal = actors.DefaultPrincipal
	}
	c.log = e.log.With().Str("conn", connID).Logger()
	c.touch()
	a, legs := e.srv.MoveIn(connID, &st, c)
	c.actor = a
	e.mu.Lock()
	e.incoming[connID] = c
	e.mu.Unlock()
	return protocol.MustMarshal(legs), nil
}

func (e *Edge) adoptCommit(connID string, data []byte) error {
	var in movedOutbox
	if err := protocol.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("moved outbox: %w", err)
	}
	e.mu.Lock()
	c := e.incoming[connID]
	delete(e.incoming, connID)
	e.mu.Unlock()
	if c == nil {
		return errors.New("connection not prepared here")
	}
	c.mu.Lock()
	c.importLocked(&in)
	// What the connection's stubs passed on since their proxies were
	// repointed follows the events of the old pod, in order.
	for _, f := range c.early {
		c.pushLocked(f)
	}
	c.early = nil
	c.state = stateOpen
	c.moved = true
	c.mu.Unlock()
	c.actor.Restore(in.Asked, in.Relayed)
	// Counted as a connection of its principal (never refused: the client
	// is connected already); used, not in the unused queue.
	c.settled.Store(true)
	e.mu.Lock()
	e.conns[connID] = c
	e.perUser[c.principal]++
	e.mu.Unlock()
	e.met.movedIn.Inc()
	c.log.Info().Int("events", c.buffered()).Msg("connection moved here from a draining pod")
	return nil
}

// movedReply is the answer to another pod's request for a connection that
// moved from here: 421 naming the pod it moved to (transport/cluster
// retries there).
func (e *Edge) movedReply(id []byte) (Reply, bool) {
	if e.cluster == nil {
		return Reply{}, false
	}
	if to := e.cluster.MovedTo(string(id)); to != "" && to != e.cluster.Incarnation() {
		return Reply{Status: fasthttp.StatusMisdirectedRequest, Error: to}, true
	}
	return Reply{}, false
}
