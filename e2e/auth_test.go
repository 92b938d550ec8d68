package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// Auth methods, login and logout: a key that lives in .credentials.yml.
var _ = Describe("login, logout and the auth methods", Label("e2e", "auth"), func() {
	var (
		fake  *llmtest.Server
		home  string
		cwd   string
		creds string
		env   []string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home, cwd = GinkgoT().TempDir(), GinkgoT().TempDir()
		creds = filepath.Join(home, ".credentials.yml")
		env = agentEnv(fake, "IAC_CODE_HOME="+home, "IAC_CODE_API_KEY=")
	})

	It("answers session/new at once with -32000 without a key; a terminal login in a pty stores it (0600) and the next session/new and prompt work", func() {
		a := startAgent(env)
		res := a.initializeWith(map[string]any{"auth": map[string]any{"terminal": true}})
		methods := res["authMethods"].([]any)
		Expect(methods).To(HaveLen(2))
		Expect(methods[0]).To(HaveKeyWithValue("id", "api-key"))
		term := methods[1].(map[string]any)
		Expect(term).To(HaveKeyWithValue("type", "terminal"))
		e := a.errorOf(a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		Expect(e["code"]).To(Equal(-32000.0))
		Expect(fake.Requests()).To(BeEmpty())

		By("the client runs the agent's invocation with the method's args in a terminal")
		args := []string{"acp"}
		for _, x := range term["args"].([]any) {
			args = append(args, x.(string))
		}
		t := startTTY(env, cwd, args...)
		t.waitFor("Provider [chaos_openai]: ")
		_, _ = t.master.WriteString("\n")
		t.waitFor("(not shown): ")
		_, _ = t.master.WriteString(testAPIKey + "\n")
		Expect(t.exit()).To(Equal(0))
		Expect(t.screen.String()).NotTo(ContainSubstring(testAPIKey), "the key is not echoed")
		info, err := os.Stat(creds)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		Expect(os.ReadFile(creds)).To(ContainSubstring("chaos_openai: " + testAPIKey))

		By("no authenticate: session/new reads the configuration again")
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(fake.Requests()[0].Header.Get("Authorization")).To(Equal("Bearer " + testAPIKey))
		a.finish()
	})

	It("passes the ACP Registry's auth check: its validator's initialize (_meta terminal-auth) gets a terminal login naming this binary", func() {
		a := startAgent(env)
		// The request of agentclientprotocol/registry .github/workflows/client.py, as sent.
		res := a.result(a.request("initialize", map[string]any{
			"protocolVersion": 1,
			"clientInfo":      map[string]any{"name": "ACP Registry Validator", "version": "1.0.0"},
			"clientCapabilities": map[string]any{
				"terminal": true,
				"fs":       map[string]any{"readTextFile": true, "writeTextFile": true},
				"_meta":    map[string]any{"terminal_output": true, "terminal-auth": true},
			},
		}))
		// client.py's classification: the type field, else a _meta key, else "agent".
		var terminal map[string]any
		for _, m := range res["authMethods"].([]any) {
			method := m.(map[string]any)
			meta, _ := method["_meta"].(map[string]any)
			if method["type"] == "terminal" || (method["type"] == nil && meta["terminal-auth"] != nil) {
				terminal = meta["terminal-auth"].(map[string]any)
			}
		}
		Expect(terminal).NotTo(BeNil(), "a terminal login for the _meta convention: %v", res["authMethods"])
		exe, err := filepath.EvalSymlinks(binPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(terminal["command"]).To(Equal(exe))
		Expect(terminal["args"]).To(Equal([]any{"login"}))

		By("the login it names stores a key (here from a script), and authenticate with its id picks it up")
		cmd := exec.Command(terminal["command"].(string), append([]string{"login"}, "--provider", "chaos_openai", "--key-stdin")...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(testAPIKey+"\n")
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(a.result(a.request("authenticate", map[string]any{"methodId": "login"}))).To(BeEmpty())
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("logs in from a script with --provider and --key-stdin", func() {
		cmd := exec.Command(binPath, "login", "--provider", "openai", "--key-stdin")
		// A server setting that is invalid is no business of login's.
		cmd.Env = append(slices.Clone(env), "IAC_CODE_PROMPT_QUEUE=0")
		cmd.Stdin = strings.NewReader(testAPIKey + "\n")
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).NotTo(ContainSubstring(testAPIKey))
		Expect(os.ReadFile(creds)).To(Equal([]byte("openai: " + testAPIKey + "\n")))
		Expect(os.ReadFile(filepath.Join(home, "settings.yml"))).To(Equal([]byte("activeProvider: openai\n")),
			"another provider than the configured one becomes the active one")

		bad := exec.Command(binPath, "login", "--provider", "no-such", "--key-stdin")
		bad.Env, bad.Stdin = env, strings.NewReader("k\n")
		out, err = bad.CombinedOutput()
		Expect(err).To(HaveOccurred())
		Expect(string(out)).To(ContainSubstring("unknown provider"))
	})

	It("logout forgets the stored key: later prompts and session/new answer -32000 (raw JSON-RPC)", func() {
		Expect(os.WriteFile(creds, []byte("other: keep-me\nchaos_openai: "+testAPIKey+"\n"), 0o600)).To(Succeed())
		a := startAgent(env)
		init := a.initialize()
		Expect(init["agentCapabilities"]).To(HaveKeyWithValue("auth", map[string]any{"logout": map[string]any{}}))
		Expect(init["authMethods"]).To(HaveLen(1), "no terminal method for a client without terminal auth")
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(a.result(a.request("logout", map[string]any{}))).To(BeEmpty())
		Expect(os.ReadFile(creds)).To(Equal([]byte("other: keep-me\n")))
		e := a.errorOf(a.prompt(sid, "again"))
		Expect(e["code"]).To(Equal(-32000.0))
		Expect(a.errorOf(a.request("session/new", map[string]any{"cwd": cwd}))["code"]).To(Equal(-32000.0))
		Expect(fake.Requests()).To(HaveLen(1))
		a.finish()
	})

	It("logout with the TypeScript SDK client; a key from the environment is not pretended forgotten", Label("node"), func() {
		Expect(os.WriteFile(creds, []byte("chaos_openai: "+testAPIKey+"\n"), 0o600)).To(Succeed())
		run := runTSClient(env, stdioArgs("logout", cwd)...)
		Expect(run.Result["logout"]).To(BeEmpty())
		Expect(run.Result["rejectedPrompt"]).To(HaveKeyWithValue("code", -32000.0))
		Expect(run.Result["rejectedNew"]).To(HaveKeyWithValue("code", -32000.0))

		a := startAgent(agentEnv(fake))
		a.initialize()
		e := a.errorOf(a.request("logout", map[string]any{}))
		Expect(e["message"]).To(ContainSubstring("env IAC_CODE_API_KEY"))
		Expect(e["message"]).NotTo(ContainSubstring(testAPIKey))
		a.finish()
	})
})
