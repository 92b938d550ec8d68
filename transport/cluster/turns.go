package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// Turns is what moving running turns between pods needs of the actor tree
// (*actors.Server, issue 29).
type Turns interface {
	// PauseTurns pauses the running turns of this process at their next
	// step boundary (bounded by ctx), lets go of their sessions keeping
	// the turns recorded, tells paused each session as soon as it paused
	// with its MCP servers' configuration (opaque; nil when none), and
	// returns their ids.
	PauseTurns(ctx context.Context, paused func(sessionID string, mcpServers []byte)) []string
	// AdoptHanded opens the session here, taking its lease (an
	// *store.InUseError when another live pod holds it), and resumes its
	// recorded turn, with the MCP servers' configuration PauseTurns gave
	// the draining pod that hands it over (nil: none, as after a crash).
	AdoptHanded(sessionID string, mcpServers []byte) error
}

var (
	_ Turns                         = (*actors.Server)(nil)
	_ actor.IgnoreDeadLetterLogging = (*clusterpb.Adopt)(nil) // its MCP servers are secrets
)

// Hand-over and recovery tuning.
const (
	// adoptTimeout bounds one Adopt request to another pod.
	adoptTimeout = 10 * time.Second
	// handOverGrace is the least time the hand-overs get after PauseTurns,
	// even when the pause used up the drain budget: a paused turn that is
	// not handed over waits for another pod's recovery scan.
	handOverGrace = 5 * time.Second
	// handOverParallel is how many Adopt requests a draining pod has in
	// flight at once.
	handOverParallel = 16
	// DefaultRecoveryScan is the mean period of the scan for orphaned
	// turns; each wait is drawn in [½, 1½] of it, so the pods' scans do not
	// march in step.
	DefaultRecoveryScan = 3 * time.Second
	// recoveryBatch caps the sessions one scan adopts.
	recoveryBatch = 64
	// recoveryParallel is how many adoptions one scan runs at once.
	recoveryParallel = 8
)

// Drain implements httpsse.Cluster: the running turns of this pod pause at
// their next step boundary (within ctx: IAC_CODE_DRAIN_TIMEOUT) and each
// paused session is adopted by a live pod, spread over them, as soon as it
// paused: its clients, following it, wait for no slower turn. A session no
// pod adopts is left to the others' recovery scan. This pod adopts nothing
// from now on.
func (n *Node) Drain(ctx context.Context) {
	n.draining.Store(true)
	if n.turns == nil {
		return
	}
	start := time.Now()
	// The hand-overs get the drain's budget, and at least handOverGrace
	// after the last pause.
	hctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := n.startHandOver(hctx)
	ids := n.turns.PauseTurns(ctx, h.add)
	paused := time.Since(start)
	stop := time.AfterFunc(max(time.Until(deadlineOf(ctx, start)), handOverGrace), cancel)
	defer stop.Stop()
	moved := h.wait()
	took := time.Since(start)
	n.met.drain.Observe(took.Seconds())
	n.log.Info().Int("paused", len(ids)).Int("handed_over", moved).Dur("pause_took", paused).Dur("took", took).
		Msg("cluster: drained: running turns handed over to other pods")
}

// deadlineOf is ctx's deadline, or from when it has none.
func deadlineOf(ctx context.Context, from time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return from
}

// handOver asks live pods to adopt paused sessions as they come (add),
// round robin from a random pod, the next pod when one fails.
type handOver struct {
	n     *Node
	ctx   context.Context
	wg    sync.WaitGroup
	slots chan struct{}
	mu    sync.Mutex
	next  int
	moved int
}

func (n *Node) startHandOver(ctx context.Context) *handOver {
	return &handOver{n: n, ctx: ctx, slots: make(chan struct{}, handOverParallel), next: rand.IntN(1 << 16)}
}

// add hands session id over with its MCP servers (off the caller:
// PauseTurns tells each pause). The servers' configuration holds the
// client's secrets: it goes to the adopter only, never to a log.
func (h *handOver) add(id string, mcpServers []byte) {
	h.mu.Lock()
	i := h.next
	h.next++
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		select {
		case h.slots <- struct{}{}:
		case <-h.ctx.Done():
			h.n.log.Warn().Str("session", id).Msg("cluster: paused turn not handed over; another pod's recovery scan adopts it")
			return
		}
		defer func() { <-h.slots }()
		if h.n.handOverOne(h.ctx, id, mcpServers, i) {
			h.mu.Lock()
			h.moved++
			h.mu.Unlock()
		}
	}()
}

// wait returns how many sessions were adopted, once every hand-over ended.
func (h *handOver) wait() int {
	h.wg.Wait()
	return h.moved
}

// handOverOne asks the live pods, from the i-th on, to adopt session id
// (with its MCP servers), and reports whether one did.
func (n *Node) handOverOne(ctx context.Context, id string, mcpServers []byte, i int) bool {
	live := n.peers.live()
	if len(live) == 0 {
		n.log.Warn().Str("session", id).Msg("cluster: no live pod to hand a paused turn to; the next pod to start adopts it")
		return false
	}
	// In one order for every session, so that i spreads them.
	slices.SortFunc(live, func(a, b *peer) int { return strings.Compare(a.inc, b.inc) })
	for k := range live {
		p := live[(i+k)%len(live)]
		err := n.askAdopt(ctx, p, id, mcpServers)
		if err == nil {
			n.met.handedOver.Inc()
			n.log.Info().Str("session", id).Str("to", p.inc).Msg("cluster: turn handed over")
			return true
		}
		var inUse *store.InUseError
		if errors.As(err, &inUse) {
			// Someone holds it already (a recovery scan was faster): it
			// goes on there.
			n.log.Info().Str("session", id).Str("holder", inUse.Owner).Msg("cluster: paused turn adopted by another pod already")
			return false
		}
		n.log.Warn().Err(err).Str("session", id).Str("pod", p.inc).Msg("cluster: a pod did not adopt a paused turn; trying the next")
		if ctx.Err() != nil {
			break
		}
	}
	n.log.Warn().Str("session", id).Msg("cluster: paused turn not handed over; another pod's recovery scan adopts it")
	return false
}

// askAdopt asks pod p to adopt session id, handing it its MCP servers. An
// *store.InUseError when p found the session held by another pod.
func (n *Node) askAdopt(ctx context.Context, p *peer, id string, mcpServers []byte) error {
	timeout := adoptTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return context.DeadlineExceeded
	}
	start := time.Now()
	res, err := n.request(p, &clusterpb.Adopt{SessionId: id, McpServers: mcpServers}, timeout)
	n.met.hop.WithLabelValues("adopt").Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	r, ok := res.(*clusterpb.AdoptReply)
	switch {
	case !ok:
		return errors.New("unexpected answer to Adopt")
	case r.InUse:
		return &store.InUseError{ID: id, Owner: r.Error}
	case !r.Ok:
		return errors.New(r.Error)
	}
	return nil
}

// adopt serves an Adopt request of another pod (with the session's MCP
// servers), or one of this pod's recovery scan (none): the session opens
// here and its turn resumes.
func (n *Node) adopt(id string, mcpServers []byte, why string) error {
	if n.turns == nil {
		return errors.New("this pod cannot resume turns")
	}
	if n.draining.Load() {
		return errors.New("this pod is draining")
	}
	start := time.Now()
	if err := n.turns.AdoptHanded(id, mcpServers); err != nil {
		return err
	}
	n.log.Info().Str("session", id).Str("why", why).Dur("took", time.Since(start)).Msg("cluster: session adopted here")
	return nil
}

// adoptReply is the answer to an Adopt request.
func adoptReply(err error) *clusterpb.AdoptReply {
	var inUse *store.InUseError
	switch {
	case err == nil:
		return &clusterpb.AdoptReply{Ok: true}
	case errors.As(err, &inUse):
		return &clusterpb.AdoptReply{InUse: true, Error: inUse.Owner}
	}
	return &clusterpb.AdoptReply{Error: err.Error()}
}

// recoverLoop is the crash recovery: every few seconds (jittered), and at once
// when a pod is found dead, the sessions whose running turn nobody carries
// on (their pod died, its lease lapsed, or a drain could not hand them
// over) are adopted by this pod, unless another pod's acquisition of the
// lease is first.
func (n *Node) recoverLoop(every time.Duration) {
	defer close(n.recovered)
	for {
		for scanAgain(n.scanOrphans()) {
		}
		wait := every/2 + rand.N(every)
		select {
		case <-n.quit:
			return
		case <-n.kick:
		case <-time.After(wait):
		}
	}
}

// kickRecovery makes the recovery scan run now (a pod was found dead).
func (n *Node) kickRecovery() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// scanAgain: a scan that listed a whole batch and adopted some of it runs
// again at once. The orphans past the batch would otherwise wait for the
// next scan (1.5-4.5 s), longer than a client following its session to
// the next holder waits (actors' follow timeout, 3 s): kill -9 of a pod
// with 100 turns answered 36 prompts cancelled, the turns going on
// without them. None adopted (another pod was first to each, or none can
// be adopted here): the next scan, as usual.
func scanAgain(listed, adopted int) bool { return listed >= recoveryBatch && adopted > 0 }

// scanOrphans adopts the orphaned turns the store lists, in random order
// (the pods scanning at once then mostly try different sessions first),
// and returns how many it listed and adopted.
func (n *Node) scanOrphans() (listed, adopted int) {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error().Interface("panic", p).Msg("cluster: recovery scan crashed")
			listed, adopted = 0, 0
		}
	}()
	if n.turns == nil || n.draining.Load() {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ids, err := n.st.OrphanedTurns(ctx, recoveryBatch)
	cancel()
	if err != nil {
		n.log.Warn().Err(err).Msg("cluster: recovery scan: cannot list the orphaned turns")
		return 0, 0
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var (
		wg   sync.WaitGroup
		done atomic.Int64
	)
	slots := make(chan struct{}, recoveryParallel)
	for _, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			err := n.adopt(id, nil, "recovery")
			var inUse *store.InUseError
			switch {
			case err == nil:
				done.Add(1)
			case errors.As(err, &inUse), errors.Is(err, store.ErrInUse):
				// Adopted by another pod first.
			default:
				n.log.Warn().Err(err).Str("session", id).Msg("cluster: recovery scan: could not adopt an orphaned turn")
			}
		}()
	}
	wg.Wait()
	return len(ids), int(done.Load())
}
