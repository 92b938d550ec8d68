package e2e

import (
	"bytes"
	"strings"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

var _ = Describe("JSON-RPC edges over stdio", Label("e2e", "edges"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("answers every request with an id it can read, re-encoded as valid JSON", func() {
		a := startAgent(agentEnv(fake))
		a.initialize()
		By("a string id with invalid UTF-8")
		a.sendLine("{\"jsonrpc\":\"2.0\",\"id\":\"bad\xffid\",\"method\":\"no/such/method\"}")
		_, m := a.waitFor("answer to the invalid UTF-8 id", func(m map[string]any) bool {
			id, _ := m["id"].(string)
			return strings.HasPrefix(id, "bad")
		})
		Expect(m["id"]).To(Equal("bad\uFFFDid"))
		Expect(m["error"]).To(HaveKeyWithValue("code", -32601.0))

		By("a message nested deeper than the decoder goes")
		deep := strings.Repeat("[", 10_050) + strings.Repeat("]", 10_050)
		a.sendLine(`{"jsonrpc":"2.0","id":"deep-1","method":"session/prompt","params":{"sessionId":"x","prompt":` + deep + `}}`)
		_, m = a.waitFor("answer to the deep message", func(m map[string]any) bool { return m["id"] == "deep-1" })
		Expect(m["error"]).To(HaveKeyWithValue("code", -32600.0))

		By("a line over the 64 MiB limit, id first")
		huge := `{"jsonrpc":"2.0","id":"huge-1","method":"session/prompt","params":{"text":"` + strings.Repeat("h", 64<<20) + `"}}`
		a.sendLine(huge)
		_, m = a.waitFor("answer to the overlong line", func(m map[string]any) bool { return m["id"] == "huge-1" })
		Expect(m["error"]).To(HaveKeyWithValue("code", -32600.0))
		Expect(m["error"].(map[string]any)["data"]).To(HaveKeyWithValue("error", ContainSubstring("64 MiB")))

		Expect(a.result(a.request("session/list", map[string]any{}))).To(HaveKey("sessions"), "still serving")
		a.finish()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, line := range a.raw {
			Expect(utf8.Valid(line)).To(BeTrue(), "stdout line is not UTF-8: %q", line)
			Expect(bytes.Contains(line, []byte{0xff})).To(BeFalse())
		}
	})

	It("answers a string id with a lone surrogate escape with the id exactly as sent", func() {
		a := startAgent(agentEnv(fake))
		a.sendLine(`{"jsonrpc":"2.0","id":"\ud800","method":"initialize","params":{"protocolVersion":1}}`)
		a.sendLine(`{"jsonrpc":"2.0","id":"\udc00","method":"no/such/method"}`)
		a.sendLine(`{"jsonrpc":"2.0","id":"x\udfff\u0041","method":"initialize","params":{"protocolVersion":1}}`)
		a.sendLine(`{"jsonrpc":"2.0","id":"\ud83d","method":"no/such/method"}`)
		// the Go decoder reads every one of these ids as a string holding U+FFFD,
		// so the answers are told apart on the raw bytes
		a.waitFor("four answers", func(map[string]any) bool { return len(a.messages()) >= 4 })
		a.mu.Lock()
		lines := make([]string, len(a.raw))
		for i, l := range a.raw {
			lines[i] = string(l)
		}
		a.mu.Unlock()
		Expect(lines).To(HaveLen(4))
		Expect(lines).To(ContainElements(
			HavePrefix(`{"jsonrpc":"2.0","id":"\ud800","result":{"protocolVersion":1`),
			HavePrefix(`{"jsonrpc":"2.0","id":"\udc00","error":{"code":-32601`),
			HavePrefix(`{"jsonrpc":"2.0","id":"x\udfff\u0041","result":{"protocolVersion":1`),
			HavePrefix(`{"jsonrpc":"2.0","id":"\ud83d","error":{"code":-32601`)))
		a.finish()
	})

	It("cancels a running prompt named by $/cancel_request; the prompt answers cancelled", func() {
		fake.Script(llmtest.Reply{Text: "one two three four five", Hang: true, AfterChunks: 3}, llmtest.Reply{Text: "fresh"})
		a := startAgent(agentEnv(fake))
		a.initialize()
		sid := a.newSession(cwd)
		id := a.prompt(sid, "long")
		a.waitFor("first chunk", isChunk)
		a.notify("$/cancel_request", map[string]any{"requestId": id})
		Expect(a.result(id)["stopReason"]).To(Equal("cancelled"))
		Expect(a.result(a.prompt(sid, "again"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})
})
