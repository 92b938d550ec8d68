package actors

import (
	"encoding/base64"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
)

var _ = Describe("images in prompts", func() {
	var (
		h   *harness
		p   *scriptedProvider
		sid string
		cwd string
	)
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG fake image bytes"))
	start := func(cfg Config) {
		p = &scriptedProvider{}
		cwd = GinkgoT().TempDir()
		h = newHarnessWith(cfg, p)
		sid = h.newSession(cwd)
	}
	AfterEach(func() { h.close() })
	prompt := func(blocks ...any) float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": blocks})
	}
	image := func(mime, data string) map[string]any {
		return map[string]any{"type": "image", "mimeType": mime, "data": data}
	}
	text := func(t string) map[string]any { return map[string]any{"type": "text", "text": t} }

	It("go to the model as images, are kept in the history and replayed on load", func() {
		start(Config{})
		Expect(h.result(prompt(text("what is this?"), image("image/png", png)))["stopReason"]).To(Equal("end_turn"))
		user := p.requests()[0].Messages[0]
		Expect(user.Content).To(Equal([]llm.Block{{Type: llm.BlockText, Text: "what is this?"},
			{Type: llm.BlockImage, MediaType: "image/png", Data: png}}))

		before := len(h.out.allUpdates())
		h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
		replayed := h.out.allUpdates()[before:]
		Expect(replayed).To(ContainElement(And(HaveKeyWithValue("sessionUpdate", "user_message_chunk"),
			HaveKeyWithValue("content", map[string]any{"type": "image", "data": png, "mimeType": "image/png"}),
			HaveKeyWithValue("messageId", Not(BeEmpty())))))
	})

	It("become a text marker for a model known to take none", func() {
		start(Config{Models: []string{"m", "deepseek-chat"}})
		h.result(h.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "deepseek-chat"}))
		h.result(prompt(text("see"), image("image/png", png)))
		Expect(p.requests()[0].Messages[0].Content[1]).To(Equal(llm.Block{Type: llm.BlockText, Text: "[image: image/png]"}))
	})

	DescribeTable("are refused with -32602 and a clear reason when unusable",
		func(block map[string]any, reason string) {
			start(Config{MaxImageBytes: 16})
			e := h.errorOf(prompt(text("x"), block))
			Expect(e["code"]).To(Equal(-32602.0))
			Expect(e["data"].(map[string]any)["prompt"]).To(ContainSubstring(reason))
			Expect(p.requests()).To(BeEmpty())
		},
		Entry("too large", image("image/png", png), "the limit is 16 bytes (IAC_CODE_MAX_IMAGE_BYTES)"),
		Entry("not base64", image("image/png", "!!!not base64!!!"), "data is not base64"),
		Entry("a type no provider takes", image("image/svg+xml", base64.StdEncoding.EncodeToString([]byte("<svg/>"))),
			`mimeType "image/svg+xml" is not supported`),
		Entry("much too large (not decoded)", image("image/png", strings.Repeat("A", 4096)), "the limit is 16 bytes"),
	)
})
