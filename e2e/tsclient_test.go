package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// tsRun is the one JSON line the Node harness prints.
type tsRun struct {
	OK                 bool             `json:"ok"`
	Scenario           string           `json:"scenario"`
	Result             map[string]any   `json:"result"`
	Updates            []map[string]any `json:"updates"`
	PermissionRequests []map[string]any `json:"permissionRequests"`
	Schema             struct {
		Passed     int   `json:"passed"`
		Failed     int   `json:"failed"`
		Violations []any `json:"violations"`
	} `json:"schema"`
	SDKErrors []any  `json:"sdkErrors"`
	Error     string `json:"error"`
	// Raw is the whole report, for scenario-specific parts.
	Raw map[string]any `json:"-"`
}

// runTSClient drives the server with the official TypeScript SDK
// (e2e/node/client.mjs), which validates every server message against the
// ACP JSON Schema and fails on SDK "Error handling notification" logs.
func runTSClient(env []string, args ...string) tsRun {
	cmd := exec.Command("node", append([]string{filepath.Join(nodeDir, "client.mjs")}, args...)...)
	cmd.Env = env
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = GinkgoWriter
	_ = cmd.Run() // a failing scenario exits 1; its JSON line says why
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var run tsRun
	Expect(json.Unmarshal([]byte(lines[len(lines)-1]), &run)).To(Succeed(), "harness output: %s", stdout.String())
	Expect(json.Unmarshal([]byte(lines[len(lines)-1]), &run.Raw)).To(Succeed())
	Expect(run.Schema.Violations).To(BeEmpty(), "schema violations")
	Expect(run.Schema.Failed).To(BeZero())
	Expect(run.Schema.Passed).To(BeNumerically(">", 0))
	Expect(run.SDKErrors).To(BeEmpty(), "SDK errors")
	Expect(run.OK).To(BeTrue(), "scenario failed: %s", run.Error)
	return run
}

func stdioArgs(scenario, cwd string, extra ...string) []string {
	return append([]string{"--transport", "stdio", "--bin", binPath, "--scenario", scenario, "--cwd", cwd}, extra...)
}

func chunkText(updates []map[string]any, kind string) string {
	var b strings.Builder
	for _, u := range updates {
		if u["sessionUpdate"] == kind {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

var _ = Describe("stdio transport with the TypeScript SDK client", Label("e2e", "node"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("initializes", func() {
		run := runTSClient(agentEnv(fake), stdioArgs("initialize", cwd)...)
		Expect(run.Result["protocolVersion"]).To(Equal(1.0))
	})

	It("streams thinking and text and ends the turn with usage", func() {
		fake.Script(llmtest.Reply{Thinking: "pondering deeply", Text: "The answer is 42.",
			Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 6}})
		run := runTSClient(agentEnv(fake), stdioArgs("prompt", cwd, "--text", "question")...)
		Expect(run.Result["stopReason"]).To(Equal("end_turn"))
		Expect(run.Result["usage"]).To(HaveKeyWithValue("totalTokens", 18.0))
		Expect(chunkText(run.Updates, "agent_thought_chunk")).To(Equal("pondering deeply"))
		Expect(chunkText(run.Updates, "agent_message_chunk")).To(Equal("The answer is 42."))
	})

	DescribeTable("maps model endings to stop reasons",
		func(finish, stop string) {
			fake.Script(llmtest.Reply{Text: "partial", FinishReason: finish})
			run := runTSClient(agentEnv(fake), stdioArgs("prompt", cwd)...)
			Expect(run.Result["stopReason"]).To(Equal(stop))
		},
		Entry("length", "length", "max_tokens"),
		Entry("content_filter", "content_filter", "refusal"),
	)

	It("cancels mid-stream and serves the next prompt", func() {
		fake.Script(llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3}, llmtest.Reply{Text: "fresh"})
		run := runTSClient(agentEnv(fake), stdioArgs("cancel", cwd)...)
		Expect(run.Result["first"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(run.Result["second"]).To(HaveKeyWithValue("stopReason", "end_turn"))
	})

	It("cancels on an idle session harmlessly", func() {
		run := runTSClient(agentEnv(fake), stdioArgs("cancel-idle", cwd)...)
		Expect(run.Result["stopReason"]).To(Equal("end_turn"))
	})

	It("closes a session; a later prompt is rejected", func() {
		run := runTSClient(agentEnv(fake), stdioArgs("close", cwd)...)
		Expect(run.Result["rejected"]).To(HaveKeyWithValue("code", -32002.0))
	})

	It("rejects an unknown session", func() {
		run := runTSClient(agentEnv(fake), stdioArgs("unknown-session", cwd)...)
		Expect(run.Result["rejected"]).To(HaveKeyWithValue("code", -32002.0))
		Expect(run.Result["rejected"]).To(HaveKeyWithValue("data", map[string]any{"sessionId": "no-such-session-e2e", "session_id": "Session not found"}))
	})
})

var _ = Describe("tools and permissions with the TypeScript SDK client", Label("e2e", "node"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	DescribeTable("answers session/request_permission for a write",
		func(mode string, written bool) {
			fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "ts.txt", "content": "from ts\n"}), llmtest.Reply{Text: "done"})
			run := runTSClient(agentEnv(fake), stdioArgs("permission", cwd, "--permission", mode)...)
			Expect(run.PermissionRequests).To(HaveLen(1))
			Expect(run.Result["prompts"]).To(ContainElement(HaveKeyWithValue("stopReason", "end_turn")))
			if written {
				Expect(filepath.Join(cwd, "ts.txt")).To(BeAnExistingFile())
				Expect(lastOf(toolUpdates(run.Updates, "w1"))["content"]).To(ContainElement(HaveKeyWithValue("type", "diff")))
			} else {
				Expect(filepath.Join(cwd, "ts.txt")).NotTo(BeAnExistingFile())
				Expect(toolResultFor(fake, "w1")).To(Equal("Permission denied."))
			}
		},
		Entry("allow_once", "allow_once", true),
		Entry("reject_once", "reject_once", false),
		Entry("legacy allowed", "legacy-allowed", true),
		Entry("legacy denied", "legacy-denied", false),
	)

	It("does not ask again after allow_always", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "a.txt", "content": "1"}), llmtest.Reply{Text: "one"},
			toolCallReply("w2", "write_file", map[string]any{"path": "b.txt", "content": "2"}), llmtest.Reply{Text: "two"})
		run := runTSClient(agentEnv(fake), stdioArgs("permission", cwd, "--permission", "allow_always", "--prompts", "2")...)
		Expect(run.PermissionRequests).To(HaveLen(1))
		Expect(filepath.Join(cwd, "b.txt")).To(BeAnExistingFile())
	})

	It("ends the turn cancelled when cancelled during a pending permission", func() {
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "never.txt", "content": "x"}), llmtest.Reply{Text: "second"})
		run := runTSClient(agentEnv(fake), stdioArgs("cancel-permission", cwd)...)
		Expect(run.Result["first"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(filepath.Join(cwd, "never.txt")).NotTo(BeAnExistingFile())
	})
})
