package actors

import (
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
)

// commandLists are the command names of every available_commands_update.
func commandLists(h *harness) [][]string {
	var out [][]string
	for _, u := range h.out.allUpdates() {
		if u["sessionUpdate"] == "available_commands_update" {
			var names []string
			for _, c := range u["availableCommands"].([]any) {
				names = append(names, c.(map[string]any)["name"].(string))
			}
			out = append(out, names)
		}
	}
	return out
}

// lastUserText is the text of the last user message of the latest model request.
func lastUserText(p *scriptedProvider) string {
	reqs := p.requests()
	Expect(reqs).NotTo(BeEmpty())
	msgs := reqs[len(reqs)-1].Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return msgs[i].TextOf()
		}
	}
	return ""
}

var _ = Describe("MCP prompts as slash commands", Ordered, func() {
	var (
		h      *harness
		sid    string
		server string
	)
	BeforeAll(func() {
		var err error
		server, err = mcptest.Build(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
	})
	start := func(cfg Config, args ...string) {
		h = newHarnessWith(cfg, &scriptedProvider{})
		DeferCleanup(h.close)
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		res := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{
			map[string]any{"name": "srv", "command": server, "args": args, "env": []any{}}}}))
		sid = res["sessionId"].(string)
	}
	send := func(text string) float64 {
		return h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
	}
	prompt := func(text string) map[string]any { return h.result(send(text)) }
	agentText := func() string {
		var s string
		for _, u := range h.out.updates() {
			if u["sessionUpdate"] == "agent_message_chunk" {
				s += u["content"].(map[string]any)["text"].(string)
			}
		}
		return s
	}

	It("lists each prompt with its input and sends the prompt's messages to the model as the user turn", func() {
		start(Config{})
		Eventually(func() [][]string { return commandLists(h) }).Should(HaveLen(1))
		Expect(commandLists(h)[0]).To(ContainElements("status", "mcp__srv__review", "mcp__srv__greet", "mcp__srv__plain"))
		var review map[string]any
		for _, u := range h.out.allUpdates() {
			for _, c := range u["availableCommands"].([]any) {
				if c.(map[string]any)["name"] == "mcp__srv__review" {
					review = c.(map[string]any)
				}
			}
		}
		Expect(review).To(HaveKeyWithValue("description", "Review the code with a focus"))
		Expect(review["input"]).To(HaveKeyWithValue("hint", "focus"))

		Expect(prompt("/mcp__srv__review error handling and logs")).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(lastUserText(h.provider)).To(Equal("Review the code, focusing on: error handling and logs"))
		var shown []string
		for _, u := range h.out.updates() {
			if u["sessionUpdate"] == "user_message_chunk" {
				shown = append(shown, u["content"].(map[string]any)["text"].(string))
			}
		}
		Expect(shown).To(Equal([]string{"Review the code, focusing on: error handling and logs"}))

		prompt(`/mcp__srv__greet tone=warm Ada Lovelace`)
		Expect(lastUserText(h.provider)).To(Equal("Greet Ada Lovelace in a warm tone."))
		prompt(`/mcp__srv__greet Grace "very formal"`)
		Expect(lastUserText(h.provider)).To(Equal("Greet Grace in a very formal tone."))
		prompt(`/mcp__srv__plain and then some`)
		Expect(lastUserText(h.provider)).To(Equal("First part of the plain prompt.Second part of the plain prompt.and then some"))
		Expect(h.provider.requests()).To(HaveLen(4))
	})

	It("answers an unknown prompt, a missing argument and a failing prompts/get with a text reply, without a model call", func() {
		start(Config{})
		Expect(prompt("/mcp__srv__nope")).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(agentText()).To(ContainSubstring("Unknown command /mcp__srv__nope"))
		prompt("/mcp__srv__review")
		Expect(agentText()).To(ContainSubstring("Missing argument: focus\nUsage: /mcp__srv__review focus"))
		prompt("/mcp__srv__broken")
		Expect(agentText()).To(ContainSubstring("The MCP prompt could not be got"))
		Expect(agentText()).To(ContainSubstring("the prompt store is unavailable"))
		Expect(h.provider.requests()).To(BeEmpty())
		// the session goes on
		prompt("hello")
		Expect(h.provider.requests()).To(HaveLen(1))
	})

	It("cancels a prompt whose prompts/get is running; the late result is dropped and prompts queued meanwhile run", func() {
		start(Config{})
		slow := send("/mcp__srv__slow 3")
		queued := send("/mcp__srv__review the queue")
		Consistently(func() map[string]any { return h.out.response(slow) }, 200*time.Millisecond).Should(BeNil(), "prompts/get runs")
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(h.result(slow)).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(h.result(queued)).To(HaveKeyWithValue("stopReason", "cancelled"), "cancel answers the queued ones too")
		Expect(prompt("/mcp__srv__review after the cancel")).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(lastUserText(h.provider)).To(Equal("Review the code, focusing on: after the cancel"))
		Expect(h.provider.requests()).To(HaveLen(1), "the cancelled prompt never reached the model")
	})

	It("runs a prompt queued behind a prompts/get once the first turn ends", func() {
		start(Config{})
		first := send("/mcp__srv__slow 0.3")
		second := send("plain words")
		Expect(h.result(first)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(h.result(second)).To(HaveKeyWithValue("stopReason", "end_turn"))
		reqs := h.provider.requests()
		Expect(reqs).To(HaveLen(2))
		Expect(reqs[0].Messages[len(reqs[0].Messages)-1].TextOf()).To(Equal("slow prompt after 300ms"))
		Expect(lastUserText(h.provider)).To(Equal("plain words"))
	})

	It("sends a new command list when a server connects after the session was answered", func() {
		start(Config{MCPStartupTimeout: 50 * time.Millisecond}, "-delay", "700ms")
		Eventually(func() [][]string { return commandLists(h) }, 10*time.Second).Should(HaveLen(2))
		lists := commandLists(h)
		Expect(lists[0]).NotTo(ContainElement("mcp__srv__review"))
		Expect(lists[1]).To(ContainElement("mcp__srv__review"))
		Consistently(func() [][]string { return commandLists(h) }, 300*time.Millisecond).Should(HaveLen(2))
	})
})

var _ = Describe("promptArguments", func() {
	one := []*sdk.PromptArgument{{Name: "focus", Required: true}}
	two := []*sdk.PromptArgument{{Name: "name", Required: true}, {Name: "tone"}, {Name: "lang"}}
	It("gives a single argument the whole input", func() {
		args, extra, bad := promptArguments(one, `a "b" c=d`)
		Expect(args).To(Equal(map[string]string{"focus": `a "b" c=d`}))
		Expect(extra + bad).To(BeEmpty())
	})
	It("takes name=value pairs and positional words, the last open argument taking the rest", func() {
		args, _, bad := promptArguments(two, `lang=fr Ada "in a hurry" now`)
		Expect(bad).To(BeEmpty())
		Expect(args).To(Equal(map[string]string{"lang": "fr", "name": "Ada", "tone": "in a hurry now"}))
		args, _, _ = promptArguments(two, `tone="very warm" other=x`)
		Expect(args).To(Equal(map[string]string{"tone": "very warm", "name": "other=x"}))
	})
	It("names the missing required arguments", func() {
		_, _, bad := promptArguments(two, `tone=warm`)
		Expect(bad).To(Equal("Missing argument: name"))
		_, _, bad = promptArguments(one, ``)
		Expect(bad).To(Equal("Missing argument: focus"))
	})
	It("passes the input of a prompt without arguments on as extra text", func() {
		args, extra, _ := promptArguments(nil, "more")
		Expect(args).To(BeNil())
		Expect(extra).To(Equal("more"))
	})
})
