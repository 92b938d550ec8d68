package actors

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// podLink joins two servers of this process as the cluster transport joins
// two pods: Share asks the holder's Server.ServeShare for a proxy, and the
// frames between stub and proxy cross the two actor systems through a
// forwarder on each side. init keeps the handshake the stub sent.
type podLink struct {
	holder, here *Server
	init         chan *protocol.Message
	// toStubs and toProxies are the forwarders made on the holder's and on
	// this side (kill stops them, as the death of the holding pod ends its
	// remote endpoint).
	mu                 sync.Mutex
	toStubs, toProxies []*actor.PID
	// proxies are the holder's proxy connections, each watching its
	// toStubs forwarder as it would watch the stub across pods.
	proxies []*actor.PID
}

// lose is this side's pod dying as the holder sees it: the library ends
// the remote endpoint and tells every watcher of an actor there it is
// gone with TerminatedReason_AddressTerminated (remote.endpointWatcher).
func (l *podLink) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, proxy := range l.proxies {
		ref, ok := l.holder.sys.ProcessRegistry.GetLocal(proxy.Id)
		Expect(ok).To(BeTrue(), "proxy %s", proxy.Id)
		ref.SendSystemMessage(proxy, &actor.Terminated{Who: l.toStubs[i], Why: actor.TerminatedReason_AddressTerminated})
	}
}

// silence stops every frame of the holding pod to this side.
func (l *podLink) silence() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.toStubs {
		Expect(l.holder.sys.Root.StopFuture(f).Wait()).To(Succeed())
	}
}

// kill is the holding pod dying: nothing more crosses the link, and what
// this side watches across it is terminated.
func (l *podLink) kill() {
	l.silence()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.toProxies {
		Expect(l.here.sys.Root.StopFuture(f).Wait()).To(Succeed())
	}
}

// forwarder is an actor of one system passing the relayed frames it gets
// to target, an actor of another system (and a proxy's repoint, which a
// connection's move sends it).
func forwarder(on, to *Server, target *actor.PID) *actor.PID {
	return on.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *clusterpb.Relay:
			to.sys.Root.Send(target, m)
		case *clusterpb.Repoint:
			to.sys.Root.Send(target, m)
		}
	}))
}

func (l *podLink) Share(id, _, principal, conn string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	if m, e := protocol.Decode(init); e == nil {
		l.init <- m
	}
	toStub := forwarder(l.holder, l.here, stub)
	proxy, err := l.holder.ServeShare(id, principal, conn, toStub, init, open)
	if err != nil {
		return nil, err
	}
	toProxy := forwarder(l.here, l.holder, proxy)
	l.mu.Lock()
	l.toStubs, l.toProxies, l.proxies = append(l.toStubs, toStub), append(l.toProxies, toProxy), append(l.proxies, proxy)
	l.mu.Unlock()
	return toProxy, nil
}

// chatOf is the text of h's updates of kind (agent_message_chunk,
// user_message_chunk) from frame index from on.
func chatOf(h *harness, from int, kind string) string {
	var b strings.Builder
	for _, f := range framesAfter(h, from) {
		if f["method"] != "session/update" {
			continue
		}
		u := f["params"].(map[string]any)["update"].(map[string]any)
		if c, ok := u["content"].(map[string]any); ok && u["sessionUpdate"] == kind {
			b.WriteString(c["text"].(string))
		}
	}
	return b.String()
}

func (l *podLink) TakeOver(string, string) error { panic("a shared session is not taken over") }

var _ = Describe("a session loaded through another pod (PostgreSQL)", func() {
	var (
		holder, here *sessionHarness
		link         *podLink
		theirs       store.Store
		provider     *scriptedProvider
		cwd, extra   string
		sid          string
	)

	BeforeEach(func() {
		mine, pgTheirs := twoPods()
		theirs = pgTheirs
		provider = &scriptedProvider{}
		holder = newSessionHarnessOn(provider, theirs, nil, echoTool{})
		DeferCleanup(holder.close)
		// no pod takes the session after its holder: its clients are
		// answered after a second (session_follow.go)
		here = newSessionHarnessOn(&scriptedProvider{}, mine, func(c *Config) { c.FollowTimeout = time.Second })
		DeferCleanup(here.close)
		link = &podLink{holder: holder.srv, here: here.srv, init: make(chan *protocol.Message, 4)}
		here.srv.SetHandover(link)

		cwd, extra = GinkgoT().TempDir(), GinkgoT().TempDir()
		h := holder.connect()
		sid = h.result(h.call("session/new", map[string]any{"cwd": cwd, "additionalDirectories": []string{extra}}))["sessionId"].(string)
	})

	// connectWith opens a connection to here whose client declares caps.
	connectWith := func(caps map[string]any) *harness {
		out := &recorder{}
		h := &harness{srv: here.srv, conn: here.srv.Connect(out), out: out, provider: here.provider}
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": caps}))
		here.conns = append(here.conns, h)
		return h
	}

	It("keeps the session's additional directories", func() {
		h := connectWith(map[string]any{})
		h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "additionalDirectories": []string{extra}}))

		meta, err := theirs.Stat(sid)
		Expect(err).NotTo(HaveOccurred())
		Expect(meta.AdditionalDirectories).To(Equal([]string{extra}))
	})

	It("has the holder offer what the loading client declared", func() {
		h := connectWith(map[string]any{
			"elicitation": map[string]any{"form": map[string]any{}},
			"session":     map[string]any{"compaction": map[string]any{}, "configOptions": map[string]any{"boolean": map[string]any{}}},
		})
		loaded := h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "additionalDirectories": []string{extra}}))

		var ids []any
		for _, o := range loaded["configOptions"].([]any) {
			ids = append(ids, o.(map[string]any)["id"])
		}
		Expect(ids).To(ContainElement(optAutoCompact))
		var init *protocol.Message
		Expect(link.init).To(Receive(&init))
		var req protocol.InitializeRequest
		Expect(protocol.Unmarshal(init.Params, &req)).To(Succeed())
		Expect(req.ClientCapabilities.Elicitation).NotTo(BeNil())
		Expect(req.ClientCapabilities.Elicitation.Form).NotTo(BeNil())
		Expect(req.ClientCapabilities.Session).NotTo(BeNil())
		Expect(req.ClientCapabilities.Session.Compaction).NotTo(BeNil())
	})

	It("cancels the prompt it relayed when its transport cancels the connection's turns, and only that one", func() {
		provider.then(hangAfter("x"))
		h := connectWith(map[string]any{})
		h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "additionalDirectories": []string{extra}}))
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		other := holder.conns[0]
		queued := other.call("session/prompt", textPrompt(sid, "after it"))
		Consistently(func() map[string]any { return other.out.response(queued) }, 200*time.Millisecond).Should(BeNil())

		h.conn.CancelTurns()
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(other.result(queued)["stopReason"]).To(Equal("end_turn"))
	})

	load := func(h *harness) float64 {
		return h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "additionalDirectories": []string{extra}})
	}

	It("serves several connections of this pod: each gets the replay, every update of another client's turn, the permission request (first answer wins) and its own answers", func() {
		owner := holder.conns[0]
		provider.then(say("remembered"))
		Expect(owner.result(owner.call("session/prompt", textPrompt(sid, "remember 42")))["stopReason"]).To(Equal("end_turn"))

		b1, b2 := connectWith(map[string]any{}), connectWith(map[string]any{})
		b1.result(load(b1))
		b2.result(load(b2))
		for _, b := range []*harness{b1, b2} {
			Expect(chatOf(b, 0, "user_message_chunk")).To(Equal("remember 42"), "the replay")
			Expect(chatOf(b, 0, "agent_message_chunk")).To(Equal("remembered"))
		}

		By("a turn of a client of the holding pod asks for permission")
		provider.then(callTool("c1", "echo", `{"x":1}`)).then(say("done ", "it"))
		from1, from2 := len(b1.out.all()), len(b2.out.all())
		turn := owner.call("session/prompt", textPrompt(sid, "use echo"))
		for _, b := range []*harness{b1, b2} {
			Eventually(func() int { return len(b.out.requests("session/request_permission")) }, 5*time.Second).Should(Equal(1))
		}
		Eventually(func() int { return len(owner.out.requests("session/request_permission")) }, 5*time.Second).Should(Equal(1))
		b2.answer(b2.out.requests("session/request_permission")[0]["id"],
			map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(owner.result(turn)["stopReason"]).To(Equal("end_turn"))
		res := provider.requests()[2].Messages
		Expect(res[len(res)-1].Content[0].IsError).To(BeFalse(), "the tool ran: b2's allow won")
		withdrawn := func(h *harness) bool {
			for _, f := range h.out.all() {
				if f["method"] == protocol.MethodCancelRequest {
					return true
				}
			}
			return false
		}
		Eventually(func() bool { return withdrawn(b1) }, 5*time.Second).Should(BeTrue(), "b1's request is withdrawn")
		for _, b := range []*harness{b1, b2} {
			Eventually(func() string { return chatOf(b, 0, "agent_message_chunk") }, 5*time.Second).Should(Equal("remembereddone it"))
		}
		Expect(chatOf(b1, from1, "user_message_chunk")).To(Equal("use echo"))
		Expect(chatOf(b2, from2, "user_message_chunk")).To(Equal("use echo"))

		By("each connection's own prompt is answered to it")
		provider.then(say("to b1")).then(say("to b2"))
		p1 := b1.call("session/prompt", textPrompt(sid, "from b1"))
		Expect(b1.result(p1)["stopReason"]).To(Equal("end_turn"))
		b2.nextID += 10 // ids b1 never sent
		p2 := b2.call("session/prompt", textPrompt(sid, "from b2"))
		Expect(b2.result(p2)["stopReason"]).To(Equal("end_turn"))
		Eventually(func() string { return chatOf(b1, 0, "agent_message_chunk") }, 5*time.Second).Should(HaveSuffix("to b1to b2"))
		Consistently(func() map[string]any { return b1.out.response(p2) }, 200*time.Millisecond).Should(BeNil(),
			"b1 did not send that id")
	})

	// promptThrough loads the session on a new connection of this pod and
	// sends a prompt whose turn runs on the holder until cancelled.
	promptThrough := func() (*harness, float64) {
		provider.then(hangAfter("x"))
		h := connectWith(map[string]any{})
		h.result(load(h))
		prompt := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(h.out.updates, 5*time.Second).ShouldNot(BeEmpty())
		return h, prompt
	}

	It("answers the prompt it relayed cancelled within seconds when the holding pod dies", func() {
		h, prompt := promptThrough()

		link.silence()
		mode := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Consistently(func() map[string]any { return h.out.response(mode) }, 100*time.Millisecond).Should(BeNil(), "its answer is lost")
		link.kill()
		var answer map[string]any
		Eventually(func() map[string]any { answer = h.out.response(prompt); return answer }, 3*time.Second).ShouldNot(BeNil())
		Expect(answer["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(h.errorOf(mode)).To(And(HaveKeyWithValue("code", -32010.0),
			HaveKeyWithValue("data", HaveKeyWithValue("reason", "session_holder_gone"))))
	})

	It("lets the turn it relayed run on at the holder when this pod dies: the holder's client sees it end, its reply recorded", func() {
		release := make(chan struct{})
		provider.then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "half "})
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err() // cancelled: the turn did not go on
			}
			return say("done")(ctx, emit)
		})
		owner := holder.conns[0]
		from := len(owner.out.all())
		h := connectWith(map[string]any{})
		h.result(load(h))
		h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return chatOf(owner, from, "agent_message_chunk") }, 5*time.Second).Should(Equal("half "))

		link.lose()
		Eventually(func() int {
			n := 0
			holder.srv.deps.shares.proxies.Range(func(any, any) bool { n++; return true })
			return n
		}, 5*time.Second).Should(BeZero(), "the proxy is gone")
		close(release)
		Eventually(func() string { return chatOf(owner, from, "agent_message_chunk") }, 5*time.Second).Should(Equal("half done"),
			"the turn went on (cancelled before: the proxy's leaving cancelled its client's turn)")
		provider.then(say("next"))
		Expect(owner.result(owner.call("session/prompt", textPrompt(sid, "after")))["stopReason"]).To(Equal("end_turn"))
		last := provider.requests()[len(provider.requests())-1].Messages
		Expect(last[len(last)-2].TextOf()).To(Equal("half done"), "the relayed turn's reply is in the history")
	})

	It("answers at once when the holding pod ends its shares (its shutdown), which refuses new ones", func() {
		// A follow would end only after its timeout: made long here, so
		// that "at once" holds on a loaded machine too.
		here.srv.deps.Config.FollowTimeout = 10 * time.Second
		h, prompt := promptThrough()

		began := time.Now()
		holder.srv.EndShares(2 * time.Second)
		link.kill() // its proxies seen gone too while the stub stops: it follows no one
		Expect(time.Since(began)).To(BeNumerically("<", 5*time.Second), "the proxies stopped")
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Expect(time.Since(began)).To(BeNumerically("<", 5*time.Second), "not after the follow timeout")
		_, err := holder.srv.ServeShare(sid, DefaultPrincipal, h.conn.ID, h.conn.pid, nil, nil)
		Expect(err).To(MatchError(ContainSubstring("shutting down")))
	})

	It("answers a hand-off at once: it holds nothing to hand over", func() {
		h := connectWith(map[string]any{})
		h.result(load(h))
		Expect(here.srv.HandOff(sid, 2*time.Second)).To(Succeed())
	})
})
