package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/store/pgtest"
)

// A drain hands a paused turn to the pod where another client of the
// session is served through a stub: that stub takes the session
// (session_stub_adopt.go). Two servers over one PostgreSQL, the real bash
// tool, the scripted model server.
var _ = Describe("a stub asked to adopt its session (PostgreSQL)", func() {
	var (
		stores [3]*store.PGStore
		model  *llmtest.Server
		a, b   *Server
		h, g   *harness
		net    *podNet
		sid    string
		steps  string
	)
	BeforeEach(func() {
		stores, model, a, b, net = twoDurablePods()
		h, g = connectTo(a), connectTo(b)
		DeferCleanup(func() { h.conn.Close(2 * time.Second); g.conn.Close(2 * time.Second) })
		steps = filepath.Join(GinkgoT().TempDir(), "steps")
		cwd := GinkgoT().TempDir()
		sid = h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
		g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	})

	step := func(id, line string, sleep float64) llmtest.ToolCall { return bashStep(steps, id, line, sleep) }
	lines := func() []string { return fileLines(steps) }

	It("takes the session and its paused turn: the prompt sent through it is answered here, every step once, every update once to both clients", func() {
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.5)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c2", "two", 0.3)}},
			llmtest.Reply{Text: "all done", Split: 3, Delay: 50 * time.Millisecond})
		prompt := g.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(toolRunning(g, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		adopted := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) { go func() { adopted <- b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))
		Expect(<-adopted).To(Succeed(), "the pod with the stub adopts the session")
		Eventually(func() map[string]any { return g.out.response(prompt) }, 15*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")), "answered by the turn resumed where its client is")
		Expect(lines()).To(Equal([]string{"one", "two"}), "each step ran once")
		for _, x := range []*harness{g, h} {
			Eventually(func() string { return chatOf(x, 0, "agent_message_chunk") }, 5*time.Second).Should(Equal("all done"))
			Expect(toolUpdates(x, "tool_call", "c1")).To(Equal(1))
			Expect(toolUpdates(x, "tool_call", "c2")).To(Equal(1), "the step resumed reached each client once")
		}
		Consistently(func() int { return answersTo(g, prompt) }, 200*time.Millisecond).Should(Equal(1))
		Expect(model.MaxConcurrent()).To(Equal(int64(1)))
		Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))

		By("the session is b's now: its client prompts it there, the draining pod's client follows")
		model.Script(llmtest.Reply{Text: "again"})
		from := len(g.out.all())
		Expect(g.result(g.call("session/prompt", textPrompt(sid, "once more")))["stopReason"]).To(Equal("end_turn"))
		Expect(chatOf(g, from, "agent_message_chunk")).To(Equal("again"))
		holder, err := stores[1].Holder(context.Background(), sid)
		Expect(err).NotTo(HaveOccurred())
		Expect(holder.Owner).To(Equal(stores[1].Incarnation()))
	})

	// nextDuringTake runs a step of a turn prompted by g's client, has a
	// pause it and b adopt it, g's client sending one more prompt as a
	// lets go; both prompts are answered end_turn, the second after the
	// resumed turn. hold runs once the step runs, before the pause; what
	// it returns, once PauseTurns returns.
	nextDuringTake := func(hold func() (release func())) {
		GinkgoHelper()
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.5)}},
			llmtest.Reply{Text: "first"},
			llmtest.Reply{Text: "second"})
		prompt := g.call("session/prompt", textPrompt(sid, "run"))
		Eventually(toolRunning(g, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())
		release := hold()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var next float64
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) {
			next = g.call("session/prompt", textPrompt(sid, "next")) // sent while the session has no holder
			go func() { adopted <- b.AdoptHanded(id, servers) }()
		})).To(Equal([]string{sid}))
		release()
		Expect(<-adopted).To(Succeed())
		Expect(g.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Expect(g.result(next)["stopReason"]).To(Equal("end_turn"), "served by b, not cancelled")
		Expect(chatOf(g, 0, "agent_message_chunk")).To(Equal("firstsecond"))
		Expect(lines()).To(Equal([]string{"one"}))
	}

	It("serves what its client sent while it took the session, in order, after the resumed turn", func() {
		nextDuringTake(func() func() { return func() {} })
	})

	// a's proxy got the prompt after it heard the session left: it holds
	// such a request until the session's actor stops, and that actor,
	// staying as the stub of a's own client h, has to tell it it will not
	// (leftHeard): then the proxy answers "moved", which b's stub waits
	// for (bounceDue) before it takes the session and serves the prompt.
	It("serves a prompt its client sent that reached the old holder as it let go, after the resumed turn, not cancelled", func() {
		nextDuringTake(func() func() {
			By("a's word that the session left waits on its way to b; the prompt is relayed to a's proxy meanwhile")
			_, releaseBack := net.holdBack(b)
			DeferCleanup(releaseBack)
			relayed, releaseRelays := net.holdRelays(stores[0].Incarnation())
			DeferCleanup(releaseRelays)
			return func() {
				Eventually(relayed, 5*time.Second).Should(Receive(), "the leg, still served by a, relays the prompt to a")
				releaseRelays()
				releaseBack()
			}
		})
	})

	It("asks again a permission pending at the drain, of its clients; the call is announced once", func() {
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "default"}))
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0)}}, llmtest.Reply{Text: "done"})
		prompt := g.call("session/prompt", textPrompt(sid, "run"))
		asked := func(x *harness) func() int {
			return func() int { return len(x.out.requests("session/request_permission")) }
		}
		Eventually(asked(g), 5*time.Second, 5*time.Millisecond).Should(Equal(1))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) { go func() { adopted <- b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))
		Expect(<-adopted).To(Succeed())
		Eventually(asked(g), 5*time.Second, 5*time.Millisecond).Should(Equal(2), "asked again by the stub that took the session")
		ask := g.out.requests("session/request_permission")[1]
		g.answer(ask["id"], map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}})
		Expect(g.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Expect(lines()).To(Equal([]string{"one"}))
		for _, x := range []*harness{g, h} {
			Eventually(func() string { return chatOf(x, 0, "agent_message_chunk") }, 5*time.Second).Should(Equal("done"))
			Expect(toolUpdates(x, "tool_call", "c1")).To(Equal(1), "announced by the holder that recorded the step, not again by the adopter")
		}
	})
})

// The stub's take opens the session as any adopter does; when that fails
// (a history left needing repair, which it cannot write), no turn goes on
// with the prompts its legs relayed, and each is answered cancelled, once.
var _ = Describe("a stub whose take of its session fails (PostgreSQL)", func() {
	It("answers the prompt its leg relayed once, cancelled", func() {
		pods := newLinkedPods()
		a, b, stA, stB, other, model, net, link := pods.a, pods.b, pods.stA, pods.stB, pods.other, pods.model, pods.net, pods.link

		_, g, sid, cwd := sharedSession(a, b)
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{bashStep(filepath.Join(cwd, "steps"), "c1", "one", 0.3)}})
		prompt := g.call("session/prompt", textPrompt(sid, "run"))
		Eventually(toolRunning(g, "c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		By("a pauses the turn; another holder leaves the history ending in a call with no result, and no turn recorded")
		_, release := net.holdBack(b) // a's word that it left waits: the leg stays with a
		DeferCleanup(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adopted := make(chan error, 1)
		Expect(a.PauseTurns(ctx, func(id string, servers []byte) {
			defer GinkgoRecover()
			s, _, err := other.Open(id)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Append(store.Entry{Kind: store.KindMessage, Message: llm.Message{Role: llm.RoleAssistant,
				Content: []llm.Block{{Type: llm.BlockToolUse, ToolCallID: "c9", Name: "bash", Input: json.RawMessage(`{}`)}}}})).To(Succeed())
			Expect(s.Release()).To(Succeed()) // its turn's record with it
			go func() { adopted <- b.AdoptHanded(id, servers) }()
		})).To(Equal([]string{sid}))

		By("b's stub holds the lease; its link to the database is cut before it takes the session")
		Eventually(func() string {
			holder, _ := stA.Holder(context.Background(), sid)
			return holder.Owner
		}, 5*time.Second, 10*time.Millisecond).Should(Equal(stB.Incarnation()))
		link.Cut()
		release()
		Expect(<-adopted).To(HaveOccurred(), "the history's repair could not be written")

		Eventually(func() map[string]any { return g.out.response(prompt) }, 10*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "cancelled")))
		Consistently(func() int { return answersTo(g, prompt) }, 300*time.Millisecond).Should(Equal(1), "answered once")
	})
})

// linkedPods are two servers over one PostgreSQL that find each other
// (podNet), as twoDurablePods are, but b reaches the database through
// link, which a spec cuts (pgtest.Proxy); other is one more store on it.
type linkedPods struct {
	a, b            *Server
	stA, stB, other *store.PGStore
	model           *llmtest.Server
	net             *podNet
	link            *pgtest.Proxy
}

func newLinkedPods() linkedPods {
	GinkgoHelper()
	srv := requirePG()
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	link, err := pgtest.NewProxy(fmt.Sprintf("127.0.0.1:%d", srv.Port()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(link.Close)
	open := func(url string) *store.PGStore {
		st, err := store.NewPostgres(url, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(st.Close)
		return st
	}
	p := linkedPods{link: link, model: llmtest.NewServer()}
	p.stA, p.stB, p.other = open(dbURL), open(srv.URLAt(link.Addr(), "postgres")+"&search_path="+schema), open(dbURL)
	DeferCleanup(p.model.Close)
	p.a, p.b = durableServer(p.stA, p.model), durableServer(p.stB, p.model)
	DeferCleanup(link.Heal) // before b shuts down
	p.net = &podNet{pods: map[string]*Server{p.stA.Incarnation(): p.a, p.stB.Incarnation(): p.b}, gate: map[string]chan struct{}{}}
	p.a.SetHandover(podOf{net: p.net, here: p.a})
	p.b.SetHandover(podOf{net: p.net, here: p.b})
	return p
}

// sharedSession is a session that a's client h opens, in bypass mode, and
// b's client g loads (through a stub on b), and the directory it runs in.
func sharedSession(a, b *Server) (h, g *harness, sid, cwd string) {
	GinkgoHelper()
	h, g = connectTo(a), connectTo(b)
	DeferCleanup(func() { h.conn.Close(2 * time.Second); g.conn.Close(2 * time.Second) })
	cwd = GinkgoT().TempDir()
	sid = h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
	h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
	g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
	return h, g, sid, cwd
}
