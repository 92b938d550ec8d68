package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// sharedScript is the fake model's part of client.mjs's shared scenario.
func sharedScript(fake *llmtest.Server) {
	fake.Script(
		llmtest.Reply{Text: "Hello both."},
		sessToolReply("w1", "write_file", map[string]any{"path": "shared.txt", "content": "from two clients\n"}),
		llmtest.Reply{Text: "Written."},
		llmtest.Reply{Text: "a slow answer in several chunks", Delay: 80 * time.Millisecond},
		llmtest.Reply{Text: "B's turn."},
		llmtest.Reply{Text: "A's turn."},
		llmtest.Reply{Text: "hanging on", Hang: true, AfterChunks: 3},
		llmtest.Reply{Text: "Alone now."},
	)
}

// sharedArgs are the shared scenario's texts (see client.mjs).
var sharedArgs = []string{"--text", "hello", "--text", "write shared.txt", "--text", "slow please",
	"--text", "hang", "--text", "just me"}

// expectShared checks a shared run against what the fake model was asked.
func expectShared(run tsRun, fake *llmtest.Server, cwd string) {
	GinkgoHelper()
	r := run.Result
	Expect(r["first"]).To(HaveKeyWithValue("stopReason", "end_turn"))
	Expect(r["permission"]).To(HaveKeyWithValue("stopReason", "end_turn"))
	Expect(os.ReadFile(filepath.Join(cwd, "shared.txt"))).To(Equal([]byte("from two clients\n")), "B's allow ran the tool")
	GinkgoWriter.Printf("A's permission request withdrawn %v ms after B answered\n", r["withdrawnAfterMs"])
	for _, q := range r["queued"].([]any) {
		Expect(q).To(HaveKeyWithValue("stopReason", "end_turn"))
	}
	// B's prompt is sent 300 ms before A's; the order is the session's arrival order either way
	echoed := r["queueEchoed"].([]any)
	Expect(echoed).To(HaveLen(3))
	Expect(echoed[0]).To(Equal("slow please"))
	Expect(echoed[1:]).To(ConsistOf("queued from B", "queued from A"))
	Expect(r["cancelled"]).To(Equal([]any{"cancelled", "cancelled", "cancelled"}))
	Expect(r["alone"]).To(HaveKeyWithValue("stopReason", "end_turn"))
	peer := r["peer"].(map[string]any)
	Expect(peer["schema"]).To(And(HaveKeyWithValue("failed", 0.0), HaveKeyWithValue("passed", BeNumerically(">", 0))))
	Expect(peer["unanswered"]).To(BeEmpty())

	// the queued prompts ran in their order, each after the one before; the
	// cancelled ones never reached the model
	var order []string
	for _, req := range fake.Requests() {
		texts := chatTexts(req)
		order = append(order, texts[len(texts)-1])
		for _, t := range texts {
			Expect(t).NotTo(ContainSubstring("never runs"))
		}
	}
	Expect(strings.Join(order, " | ")).To(ContainSubstring(fmt.Sprintf("slow please | %s | %s | hang | just me", echoed[1], echoed[2])),
		"the model ran the queued prompts in the order every client saw them start")
}

var _ = Describe("one session, two TypeScript SDK clients", Label("e2e", "shared", "node"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		var err error
		cwd, err = filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
	})

	It("on one server: identical streams, permission answered by either, prompts of both queued in order, cancel empties the queue, close of one leaves the other working", func() {
		sharedScript(fake)
		env := agentEnv(fake, "IAC_CODE_HOME="+GinkgoT().TempDir())
		a := startHTTPAgent(env, "")
		run := runTSClient(env, append([]string{"--transport", "http", "--http-url", a.base + "/acp",
			"--scenario", "shared", "--cwd", cwd}, sharedArgs...)...)
		expectShared(run, fake, cwd)
	})

	It("across two pods: the same, with the second client on the pod that does not hold the session", Label("cluster"), func() {
		sharedScript(fake)
		cl := newCluster(fake, 2)
		run := runTSClient(agentEnv(fake), append([]string{"--transport", "http", "--http-url", cl.pods[0].base + "/acp",
			"--peer-url", cl.pods[1].base + "/acp", "--scenario", "shared", "--cwd", cwd}, sharedArgs...)...)
		expectShared(run, fake, cwd)
		Expect(cl.pods[1].stderr.String()).NotTo(ContainSubstring("session handed over by another pod"), "shared, not moved")
		Expect(cl.pods[0].stderr.String()).To(ContainSubstring("session shared with a connection of another pod"))
	})
})
