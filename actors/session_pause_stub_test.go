package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
)

// A drain pauses a turn prompted by a connection of the draining pod
// itself: the connection follows the session to the pod that adopts it
// (session_pause_stub.go), its prompt answered there. Two servers over one
// PostgreSQL, the real bash tool, the scripted model server.
var _ = Describe("a turn prompted on the draining pod (PostgreSQL)", func() {
	var (
		stores [3]*store.PGStore
		net    *podNet
		model  *llmtest.Server
		a, b   *Server
		h      *harness
		sid    string
		steps  string
	)
	BeforeEach(func() {
		stores, model, a, b, net = twoDurablePods()
		h = connectTo(a)
		DeferCleanup(func() { h.conn.Close(2 * time.Second) })
		steps = filepath.Join(GinkgoT().TempDir(), "steps")
		sid = h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
	})

	step := func(id, line string, sleep float64) llmtest.ToolCall { return bashStep(steps, id, line, sleep) }
	lines := func() []string { return fileLines(steps) }
	toolCalls := func(id string) int { return toolUpdates(h, "tool_call", id) }
	answers := func(id float64) int { return answersTo(h, id) }
	running := func(id string) func() bool { return toolRunning(h, id) }
	drain := func(adopt func(id string, mcpServers []byte)) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return a.PauseTurns(ctx, adopt)
	}

	It("is answered to the connection that sent it by the pod that adopts it: every step once, every update once", func() {
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.5)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c2", "two", 0.3)}},
			llmtest.Reply{Text: "all done", Split: 3, Delay: 50 * time.Millisecond})
		prompt := h.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(running("c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())

		adopted := make(chan error, 1)
		Expect(drain(func(id string, servers []byte) { go func() { adopted <- b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))
		Expect(<-adopted).To(Succeed())
		Eventually(func() map[string]any { return h.out.response(prompt) }, 15*time.Second, 10*time.Millisecond).Should(
			HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "end_turn")), "answered by the adopter's resumed turn")
		Expect(lines()).To(Equal([]string{"one", "two"}), "each step ran once")
		Expect(toolCalls("c1")).To(Equal(1))
		Expect(toolCalls("c2")).To(Equal(1), "the adopter's step reached the connection once")
		Expect(chatOf(h, 0, "agent_message_chunk")).To(Equal("all done"))
		Consistently(func() int { return answers(prompt) }, 200*time.Millisecond).Should(Equal(1))
		Expect(model.MaxConcurrent()).To(Equal(int64(1)))
		Expect(a.Metrics().TurnsPaused.Load()).To(Equal(int64(1)))
		Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))

		By("the connection's next prompt runs on the adopter, through the stub")
		model.Script(llmtest.Reply{Text: "again"})
		from := len(h.out.all())
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "once more")))["stopReason"]).To(Equal("end_turn"))
		Expect(chatOf(h, from, "agent_message_chunk")).To(Equal("again"))
	})

	It("makes a move of the connection asked while it follows wait until it rejoined the adopter", func() {
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.3)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c2", "two", 1)}},
			llmtest.Reply{Text: "done"})
		prompt := h.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(running("c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())
		Expect(drain(nil)).To(Equal([]string{sid}))

		moved := make(chan *Move, 1)
		go func() {
			defer GinkgoRecover()
			mv, err := h.conn.StartMove(5 * time.Second)
			Expect(err).NotTo(HaveOccurred(), "the prompt running does not keep the connection")
			moved <- mv
		}()
		Consistently(moved, 400*time.Millisecond).ShouldNot(Receive(), "nobody holds the session yet")
		Expect(b.Adopt(sid)).To(Succeed())
		var mv *Move
		Eventually(moved, 5*time.Second).Should(Receive(&mv))
		Expect(mv.State.Sessions).To(HaveLen(1))
		ms := mv.State.Sessions[0]
		Expect(ms.ID).To(Equal(sid))
		Expect(ms.Holder).To(Equal(stores[1].Incarnation()), "it moves with a leg of the adopter")
		Expect(ms.ProxyID).NotTo(BeEmpty())
		Expect(h.result(prompt)["stopReason"]).To(Equal("end_turn"))
		Expect(lines()).To(Equal([]string{"one", "two"}))
	})

	It("goes on when the client goes with the draining pod (a WebSocket cannot move): a load at the adopter shows it running", func() {
		model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c1", "one", 0.3)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c2", "two", 1)}},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{step("c3", "three", 0)}},
			llmtest.Reply{Text: "done"})
		h.call("session/prompt", textPrompt(sid, "run the steps"))
		Eventually(running("c1"), 5*time.Second, 5*time.Millisecond).Should(BeTrue())
		Expect(drain(func(id string, servers []byte) { go func() { _ = b.AdoptHanded(id, servers) }() })).To(Equal([]string{sid}))
		Eventually(running("c2"), 5*time.Second, 5*time.Millisecond).Should(BeTrue(), "the leg rejoined the adopter")

		By("the leg goes, and its proxy at the adopter with it (as when its stub's pod shuts down)")
		net.mu.Lock()
		proxies := append([]*actor.PID(nil), net.proxies...)
		net.mu.Unlock()
		Expect(proxies).To(HaveLen(1))
		Expect(b.sys.Root.StopFuture(proxies[0]).Wait()).To(Succeed())
		g := connectTo(b)
		DeferCleanup(func() { g.conn.Close(2 * time.Second) })
		res := g.result(g.call("session/load", map[string]any{"sessionId": sid, "cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))
		Expect(res).To(HaveKeyWithValue("_meta", HaveKey("activeTurn")), "running still")
		Eventually(func() string { return chatOf(g, 0, "agent_message_chunk") }, 10*time.Second).Should(HaveSuffix("done"))
		Expect(lines()).To(Equal([]string{"one", "two", "three"}), "not cancelled with its client")
	})
})

// bashStep is the model's call id of bash appending line to the file
// steps, then sleeping for sleep seconds.
func bashStep(steps, id, line string, sleep float64) llmtest.ToolCall {
	args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("echo %s >> %s; sleep %g", line, steps, sleep)})
	return llmtest.ToolCall{ID: id, Name: "bash", Arguments: string(args)}
}

// fileLines are the lines bashStep appended to steps so far.
func fileLines(steps string) []string {
	GinkgoHelper()
	data, err := os.ReadFile(steps)
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.Fields(string(data))
}

// toolUpdates counts x's updates of kind for the tool call id.
func toolUpdates(x *harness, kind, id string) int {
	n := 0
	for _, u := range x.out.allUpdates() {
		if u["sessionUpdate"] == kind && u["toolCallId"] == id {
			n++
		}
	}
	return n
}

// toolRunning: x was told the tool call id runs.
func toolRunning(x *harness, id string) func() bool {
	return func() bool {
		for _, u := range x.out.allUpdates() {
			if u["toolCallId"] == id && u["status"] == "in_progress" {
				return true
			}
		}
		return false
	}
}

// answersTo counts x's answers to its request id.
func answersTo(x *harness, id float64) int {
	n := 0
	for _, f := range x.out.all() {
		if f["id"] == id && f["method"] == nil {
			n++
		}
	}
	return n
}

// twoDurablePods are two servers over one PostgreSQL that find each other
// (podNet), with the real bash tool and one scripted model server.
func twoDurablePods() (stores [3]*store.PGStore, model *llmtest.Server, a, b *Server, net *podNet) {
	GinkgoHelper()
	stores = threePods()
	model = llmtest.NewServer()
	DeferCleanup(model.Close)
	a, b = durableServer(stores[0], model), durableServer(stores[1], model)
	net = &podNet{pods: map[string]*Server{stores[0].Incarnation(): a, stores[1].Incarnation(): b}, gate: map[string]chan struct{}{}}
	a.SetHandover(podOf{net: net, here: a})
	b.SetHandover(podOf{net: net, here: b})
	return stores, model, a, b, net
}
