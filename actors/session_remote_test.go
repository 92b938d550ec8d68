package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

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
}

// forwarder is an actor of one system passing the relayed frames it gets
// to target, an actor of another system.
func forwarder(on, to *Server, target *actor.PID) *actor.PID {
	return on.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*clusterpb.Relay); ok {
			to.sys.Root.Send(target, m)
		}
	}))
}

func (l *podLink) Share(id, _, principal string, stub *actor.PID, init, open []byte) (*actor.PID, error) {
	if m, e := protocol.Decode(init); e == nil {
		l.init <- m
	}
	proxy, err := l.holder.ServeShare(id, principal, forwarder(l.holder, l.here, stub), init, open)
	if err != nil {
		return nil, err
	}
	return forwarder(l.here, l.holder, proxy), nil
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
		holder = newSessionHarnessOn(provider, theirs, nil)
		DeferCleanup(holder.close)
		here = newSessionHarnessOn(&scriptedProvider{}, mine, nil)
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
})
