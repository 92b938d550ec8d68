package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// podNet joins several servers of this process as pods of one cluster on
// one PostgreSQL: a pod's Share or TakeOver reaches the pod named by the
// store's lease (its incarnation), and the frames between a stub and its
// proxy cross the two actor systems through forwarders (podLink's). gate,
// when set, holds every Share made to a pod until it is closed, gateFrom
// every Share a pod makes; slow, when set, holds the stubs' relays to the
// proxies on a pod (relayHold), slowBack the proxies' frames to the stubs
// on a pod; proxies are the proxies made, on their pods, and served
// counts them by pod. gateAfter, when set, holds every Share made to a pod
// once its proxy is made, until it is closed (the proxy answers, its Share
// has not returned); slowFrom holds the frames of the proxies on a pod to
// their stubs; heard, when set, is told of every frame of a proxy on its
// way to its stub.
type podNet struct {
	mu        sync.Mutex
	pods      map[string]*Server
	gate      map[string]chan struct{}
	gateFrom  map[*Server]chan struct{}
	gateAfter map[string]chan struct{}
	slow      map[string]*relayHold
	slowBack  map[*Server]*relayHold
	slowFrom  map[*Server]*relayHold
	heard     func(from *Server, body []byte)
	proxies   []*actor.PID
	served    map[string]int
	// behind: the proxy each forwarder a stub was given stands for, as a
	// move names it (proxyOf).
	behind map[forwarderOn]*actor.PID
}

// forwarderOn is a forwarder's actor id on the pod it runs on (ids repeat
// across the pods' systems).
type forwarderOn struct {
	pod *Server
	id  string
}

// proxyOf is the proxy that the forwarder pid on pod stands for, or pid.
func (n *podNet) proxyOf(pod *Server, pid *actor.PID) *actor.PID {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.behind[forwarderOn{pod, pid.Id}]; p != nil {
		return p
	}
	return pid
}

// podOf is the Handover of pod here.
type podOf struct {
	net  *podNet
	here *Server
}

func (p podOf) Share(id, owner, principal, conn string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	p.net.mu.Lock()
	holder, gate, gateFrom := p.net.pods[owner], p.net.gate[owner], p.net.gateFrom[p.here]
	p.net.mu.Unlock()
	if holder == nil || holder == p.here {
		return nil, errors.New("no such pod")
	}
	for _, g := range []chan struct{}{gateFrom, gate} {
		if g != nil {
			<-g
		}
	}
	proxy, err := holder.ServeShare(id, principal, conn, p.net.backTo(holder, p.here, stub), init, open)
	if err != nil {
		return nil, err
	}
	p.net.mu.Lock()
	after := p.net.gateAfter[owner]
	p.net.mu.Unlock()
	if after != nil {
		<-after
	}
	toProxy := p.net.relayTo(p.here, holder, owner, proxy)
	p.net.mu.Lock()
	p.net.proxies = append(p.net.proxies, proxy)
	if p.net.served == nil {
		p.net.served = map[string]int{}
	}
	p.net.served[owner]++
	if p.net.behind == nil {
		p.net.behind = map[forwarderOn]*actor.PID{}
	}
	p.net.behind[forwarderOn{p.here, toProxy.Id}] = proxy
	p.net.mu.Unlock()
	return toProxy, nil
}

// relayHold holds the relays to the proxies on one pod, as a slow link
// does: caught hears of each relay held, the relays go on, in order, once
// release is closed.
type relayHold struct {
	caught  chan struct{}
	release chan struct{}
}

// holdRelays holds the relays of the stubs to the proxies on pod inc (a
// slow link) until the returned func is called; caught hears of each one
// held.
func (n *podNet) holdRelays(inc string) (caught <-chan struct{}, release func()) {
	h := newRelayHold()
	n.mu.Lock()
	if n.slow == nil {
		n.slow = map[string]*relayHold{}
	}
	n.slow[inc] = h
	n.mu.Unlock()
	return h.caught, sync.OnceFunc(func() { close(h.release) })
}

func newRelayHold() *relayHold {
	return &relayHold{caught: make(chan struct{}, 1), release: make(chan struct{})}
}

// pass returns once h lets a frame go on (at once for nil), telling
// caught of the frame held.
func (h *relayHold) pass() {
	if h == nil {
		return
	}
	select {
	case h.caught <- struct{}{}:
	default:
	}
	<-h.release
}

// relayTo is a forwarder on pod on to proxy on pod to (incarnation owner),
// as forwarder, whose relays wait while the net holds them (slow).
func (n *podNet) relayTo(on, to *Server, owner string, proxy *actor.PID) *actor.PID {
	return on.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		m, ok := ctx.Message().(*clusterpb.Relay)
		if !ok {
			if r, ok := ctx.Message().(*clusterpb.Repoint); ok {
				to.sys.Root.Send(proxy, r)
			}
			return
		}
		n.mu.Lock()
		hold := n.slow[owner]
		n.mu.Unlock()
		hold.pass()
		to.sys.Root.Send(proxy, m)
	}))
}

// holdBack holds the frames of the proxies to the stubs on pod (a slow
// link back) until the returned func is called; caught hears of each one
// held.
func (n *podNet) holdBack(pod *Server) (caught <-chan struct{}, release func()) {
	return n.holdIn(&n.slowBack, pod)
}

// holdFrom holds the frames of the proxies on pod to their stubs (a slow
// link from it), as holdBack does.
func (n *podNet) holdFrom(pod *Server) (caught <-chan struct{}, release func()) {
	return n.holdIn(&n.slowFrom, pod)
}

// holdIn sets a hold of the frames back for pod in holds (slowBack or
// slowFrom).
func (n *podNet) holdIn(holds *map[*Server]*relayHold, pod *Server) (caught <-chan struct{}, release func()) {
	h := newRelayHold()
	n.mu.Lock()
	if *holds == nil {
		*holds = map[*Server]*relayHold{}
	}
	(*holds)[pod] = h
	n.mu.Unlock()
	return h.caught, sync.OnceFunc(func() { close(h.release) })
}

// backTo is a forwarder on pod on to stub on pod to, as forwarder, whose
// frames wait while the net holds them (slowBack, slowFrom).
func (n *podNet) backTo(on, to *Server, stub *actor.PID) *actor.PID {
	return on.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *clusterpb.Relay, *clusterpb.Repoint:
		default:
			return
		}
		n.mu.Lock()
		hold, from, heard := n.slowBack[to], n.slowFrom[on], n.heard
		n.mu.Unlock()
		if m, ok := ctx.Message().(*clusterpb.Relay); ok && heard != nil {
			heard(on, m.Body)
		}
		from.pass()
		hold.pass()
		to.sys.Root.Send(stub, ctx.Message())
	}))
}

func (p podOf) TakeOver(id, owner string) error {
	p.net.mu.Lock()
	holder := p.net.pods[owner]
	p.net.mu.Unlock()
	if holder == nil {
		return errors.New("no such pod")
	}
	return holder.HandOff(id, 2*time.Second)
}

// threePods are three stores on one fresh PostgreSQL schema.
func threePods() [3]*store.PGStore {
	GinkgoHelper()
	return [3]*store.PGStore(pgPods(3))
}

// pgPods are n stores on one fresh PostgreSQL schema.
func pgPods(n int) []*store.PGStore {
	GinkgoHelper()
	srv := requirePG()
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	out := make([]*store.PGStore, n)
	for i := range out {
		st, err := store.NewPostgres(dbURL, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(st.Close)
		out[i] = st
	}
	return out
}

var _ = Describe("clients following a session to its next pod (PostgreSQL)", func() {
	var (
		net              *podNet
		stores           [3]*store.PGStore
		a, b, c          *sessionHarness
		pa, pc           *scriptedProvider
		incA, incC       string
		sid, cwd         string
		owner            *harness
		loadOn           func(h *harness) float64
		agentText, users func(h *harness, from int) string
	)

	BeforeEach(func() {
		stores = threePods()
		st := stores
		pa, pc = &scriptedProvider{}, &scriptedProvider{}
		a = newSessionHarnessOn(pa, st[0], nil)
		b = newSessionHarnessOn(&scriptedProvider{}, st[1], func(c *Config) { c.FollowTimeout = time.Second })
		// c takes a session over at a load (move), as a pod draining
		// hands it to another
		c = newSessionHarnessOn(pc, st[2], func(c *Config) { c.SessionAttach = AttachMove })
		for _, h := range []*sessionHarness{a, b, c} {
			DeferCleanup(h.close)
		}
		incA, incC = st[0].Incarnation(), st[2].Incarnation()
		net = &podNet{pods: map[string]*Server{incA: a.srv, st[1].Incarnation(): b.srv, incC: c.srv}, gate: map[string]chan struct{}{}}
		for _, h := range []*sessionHarness{a, b, c} {
			h.srv.SetHandover(podOf{net: net, here: h.srv})
		}
		cwd = GinkgoT().TempDir()
		owner = a.connect()
		sid = owner.result(owner.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		loadOn = func(h *harness) float64 { return h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}) }
		agentText = func(h *harness, from int) string { return chatOf(h, from, "agent_message_chunk") }
		users = func(h *harness, from int) string { return chatOf(h, from, "user_message_chunk") }
	})

	// holdShares holds every Share made to pod inc until the returned
	// func is called.
	holdShares := func(inc string) func() {
		g := make(chan struct{})
		net.mu.Lock()
		net.gate[inc] = g
		net.mu.Unlock()
		return sync.OnceFunc(func() { close(g) })
	}

	It("follows an idle session handed to another pod: every update once, what was sent before and after, its requests meanwhile answered there", func() {
		pa.then(say("before"))
		Expect(owner.result(owner.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))

		b1, b2 := b.connect(), b.connect()
		b1.result(loadOn(b1))
		b2.result(loadOn(b2))
		Expect(agentText(b1, 0)).To(Equal("before"), "the replay")
		from1, from2 := len(b1.out.all()), len(b2.out.all())

		By("pod c takes the session; the stub's legs find it there, but their Share waits")
		release := holdShares(incC)
		DeferCleanup(release)
		c1 := c.connect()
		c1.result(loadOn(c1))
		Eventually(func() string {
			h, err := stores[1].Holder(context.Background(), sid)
			Expect(err).NotTo(HaveOccurred())
			return h.Owner
		}, 2*time.Second).Should(Equal(incC), "c holds it")

		By("c's client runs a turn before b's clients are back: they get it from what c kept")
		pc.then(say("whi", "le ", "away"))
		Expect(c1.result(c1.call("session/prompt", textPrompt(sid, "two")))["stopReason"]).To(Equal("end_turn"))
		mode := b1.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Consistently(func() map[string]any { return b1.out.response(mode) }, 150*time.Millisecond).Should(BeNil(), "it waits for the follow")
		release()
		Expect(b1.result(mode)).NotTo(BeNil())

		for _, h := range []*harness{b1, b2} {
			from := from1
			if h == b2 {
				from = from2
			}
			Eventually(func() string { return agentText(h, from) }, 5*time.Second).Should(Equal("while away"))
			Expect(users(h, from)).To(Equal("two"), "the other client's prompt, shown once; no replay of the history")
		}

		By("after the follow everything comes live, and b's prompts run on c, answered to b")
		pc.then(say("after"))
		p := b2.call("session/prompt", textPrompt(sid, "three"))
		Expect(b2.result(p)["stopReason"]).To(Equal("end_turn"))
		for _, h := range []*harness{b1, b2, c1} {
			Eventually(func() string { return agentText(h, 0) }, 5*time.Second).Should(HaveSuffix("while awayafter"))
		}
		Expect(agentText(b1, 0)).To(Equal("beforewhile awayafter"), "each update exactly once")
		Expect(agentText(b2, 0)).To(Equal("beforewhile awayafter"))
		Expect(pc.requests()).To(HaveLen(2), "b's prompt ran on c")
	})

	holdRelays := func(inc string) (caught <-chan struct{}, release func()) { return net.holdRelays(inc) }
	servedBy := func(inc string) func() int {
		return func() int {
			net.mu.Lock()
			defer net.mu.Unlock()
			return net.served[inc]
		}
	}

	It("serves on the new holder, once, a prompt that reached the old one after the session left, its \"moved\" coming after the follow's answer", func() {
		b1 := b.connect()
		b1.result(loadOn(b1))
		from := len(b1.out.all())

		By("b1's prompt is on its way to a (a slow link) when c takes the session over")
		caught, release := holdRelays(incA)
		DeferCleanup(release)
		pc.then(say("served ", "on c"))
		prompt := b1.call("session/prompt", textPrompt(sid, "late"))
		Eventually(caught, 5*time.Second).Should(Receive())
		c1 := c.connect()
		c1.result(loadOn(c1))
		Eventually(servedBy(incC), 5*time.Second, 5*time.Millisecond).Should(Equal(1), "b's leg followed the session to c")
		Consistently(func() map[string]any { return b1.out.response(prompt) }, 300*time.Millisecond, 5*time.Millisecond).Should(BeNil(),
			"a's answer to it (\"moved\") is not here yet: nothing says its turn was cut")

		By("it reaches a, which answers \"moved\": b's stub sends it to c")
		release()
		Expect(b1.result(prompt)["stopReason"]).To(Equal("end_turn"), "served on c, not answered cancelled")
		Expect(agentText(b1, from)).To(Equal("served on c"))
		Expect(users(b1, from)).To(Equal("late"), "shown once")
		Consistently(func() int { return answersTo(b1, prompt) }, 200*time.Millisecond).Should(Equal(1))
		Expect(pc.requests()).To(HaveLen(1), "it ran once, on c")
		Expect(pa.requests()).To(BeEmpty(), "not on a")
	})

	It("waits for that \"moved\" no longer than its follow timeout: the prompt is answered cancelled, what its client sent meanwhile served after", func() {
		b1 := b.connect()
		b1.result(loadOn(b1))
		caught, release := holdRelays(incA)
		DeferCleanup(release) // a's "moved" comes after the spec
		prompt := b1.call("session/prompt", textPrompt(sid, "lost"))
		Eventually(caught, 5*time.Second).Should(Receive())
		c1 := c.connect()
		c1.result(loadOn(c1))
		Eventually(servedBy(incC), 5*time.Second, 5*time.Millisecond).Should(Equal(1))
		followed := time.Now()
		mode := b1.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})

		Expect(b1.result(prompt)["stopReason"]).To(Equal("cancelled"))
		// b's follow timeout is 1 s
		Expect(time.Since(followed)).To(BeNumerically(">=", 900*time.Millisecond), "it waited for a's answer")
		Expect(b1.result(mode)).NotTo(BeNil(), "served on c, after")
		Expect(indexOfResponse(b1.out.all(), mode)).To(BeNumerically(">", indexOfResponse(b1.out.all(), prompt)), "in the order sent")
		Expect(pc.requests()).To(BeEmpty())
	})

	It("answers what it relayed as before when no pod takes the session within the follow timeout", func() {
		pa.then(hangAfter("x"))
		b1 := b.connect()
		b1.result(loadOn(b1))
		prompt := b1.call("session/prompt", textPrompt(sid, "long"))
		Eventually(b1.out.updates, 5*time.Second).ShouldNot(BeEmpty())

		began := time.Now()
		Expect(a.srv.HandOff(sid, 2*time.Second)).To(Succeed())
		Expect(b1.result(prompt)["stopReason"]).To(Equal("cancelled"), "the hand-off cancelled it on a")
		mode := b1.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Expect(b1.errorOf(mode)).To(HaveKeyWithValue("data", HaveKeyWithValue("reason", "session_holder_gone")))
		// the follow timeout (1 s) passed first; the upper bound is loose
		// for loaded machines (the answer came within the harness's 5 s)
		Expect(time.Since(began)).To(And(BeNumerically(">=", time.Second), BeNumerically("<", 5*time.Second)))

		By("its next request opens the session on its own pod")
		Expect(b1.result(b1.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).NotTo(BeNil())
	})

	It("answers a prompt relayed before a pause when its resumed turn ended before the client followed it to the adopter", func() {
		pa.then(hangAfter("cut "))
		b1 := b.connect()
		b1.result(loadOn(b1))
		prompt := b1.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return agentText(b1, 0) }, 5*time.Second).Should(Equal("cut "), "the turn runs on a")

		By("a pauses the turn (cut mid-reply); c adopts it while b's follow cannot reach c yet")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		Expect(a.srv.PauseTurns(ctx, nil)).To(Equal([]string{sid}))
		release := holdShares(incC)
		DeferCleanup(release)
		pc.then(say("the whole answer"))
		Expect(c.srv.Adopt(sid)).To(Succeed())
		Expect(c.srv.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))
		Eventually(pc.requests, 5*time.Second).Should(HaveLen(1), "the resumed turn asks c's model again")
		Eventually(func() int64 { return c.srv.Metrics().RunningTurns.Load() }, 5*time.Second).Should(BeZero(), "the resumed turn ended on c")

		By("b's client follows the session to c: the prompt's answer was kept for it")
		release()
		Expect(b1.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Expect(agentText(b1, 0)).To(HaveSuffix("the whole answer"))
	})

	It("waits past its follow timeout while the store shows the turn paused with no holder: the adopter answers the prompt", func() {
		pa.then(hangAfter("cut "))
		b1 := b.connect()
		b1.result(loadOn(b1))
		prompt := b1.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return agentText(b1, 0) }, 5*time.Second).Should(Equal("cut "), "the turn runs on a")

		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		Expect(a.srv.PauseTurns(ctx, nil)).To(Equal([]string{sid}))
		By("nobody adopts it for longer than b's follow timeout (1 s), as when a drain hands over many turns")
		Consistently(func() map[string]any { return b1.out.response(prompt) }, 1500*time.Millisecond, 50*time.Millisecond).Should(BeNil())
		pc.then(say("the whole answer"))
		Expect(c.srv.Adopt(sid)).To(Succeed())
		Expect(b1.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Expect(agentText(b1, 0)).To(HaveSuffix("the whole answer"))
	})
})
