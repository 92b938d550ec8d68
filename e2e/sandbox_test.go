package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// The Landlock sandbox, driven by a hostile model: what an approved
// command (default mode, allow_once) or any command (bypass) can reach.
// With IAC_CODE_SANDBOX=off the same commands reach it all, which shows
// the specs can fail. IAC_CODE_LABEL_FILTER=sandbox runs these alone.
var _ = Describe("sandbox", Label("e2e", "sandbox"), func() {
	const sshKey = "-----BEGIN OPENSSH PRIVATE KEY----- sandbox-test-key"
	const stateSecret = "state-secret-of-the-server"
	var (
		fake                         *llmtest.Server
		cwd, sibling, home, stateDir string
		listener                     net.Listener
		connects                     atomic.Int32
	)
	BeforeEach(func() {
		if st := sandbox.Probe(sandbox.Settings{Mode: sandbox.On}); st.ABI == 0 {
			Skip("the kernel has no Landlock: " + st.Reason)
		}
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd, sibling, home, stateDir = sandboxMachine(sshKey)
		Expect(os.WriteFile(filepath.Join(stateDir, "planted.txt"), []byte(stateSecret+"\n"), 0o600)).To(Succeed())
		// A tiny Go module and a Node "test", for the toolchain run.
		proj := filepath.Join(cwd, "proj")
		Expect(os.MkdirAll(proj, 0o755)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(proj, "go.mod"), []byte("module example.com/proj\n\ngo 1.21\n"), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(proj, "main.go"), []byte("package main\n\nfunc main() { println(\"built-and-ran\") }\n"), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name":"proj","version":"1.0.0","private":true,`+
			`"scripts":{"test":"node -e \"require('fs').writeFileSync('node-ok.txt', require('os').tmpdir())\""}}`), 0o644)).To(Succeed())

		var err error
		listener, err = net.Listen("tcp4", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		connects.Store(0)
		go func() {
			for {
				c, err := listener.Accept()
				if err != nil {
					return
				}
				connects.Add(1)
				c.Close()
			}
		}()
		DeferCleanup(listener.Close)
	})

	// start runs a server with the sandbox setting and network off; the
	// go command's build cache is the test's own (warm), made writable
	// with IAC_CODE_SANDBOX_WRITE, as an operator would.
	start := func(sandboxMode, permMode string) (*agent, string) {
		goCache, err := exec.Command("go", "env", "GOCACHE").Output()
		Expect(err).NotTo(HaveOccurred())
		cache := strings.TrimSpace(string(goCache))
		a := startAgent(agentEnv(fake, "HOME="+home, "IAC_CODE_HOME="+stateDir, "IAC_CODE_SANDBOX="+sandboxMode,
			"IAC_CODE_SANDBOX_NETWORK=off", "GOCACHE="+cache, "IAC_CODE_SANDBOX_WRITE="+cache, "GOFLAGS=-mod=mod",
			"GOTOOLCHAIN=local", "GOPROXY=off"))
		init := a.initialize()
		meta, _ := init["_meta"].(map[string]any)
		Expect(meta).To(HaveKey("sandbox"))
		if sandboxMode == "off" {
			Expect(meta["sandbox"]).To(HaveKeyWithValue("mode", "off"))
		} else {
			Expect(meta["sandbox"]).To(And(HaveKeyWithValue("mode", "landlock"), HaveKeyWithValue("network", false),
				HaveKeyWithValue("abi", BeNumerically(">=", 1))))
		}
		sid := a.newSession(cwd)
		if permMode != "default" {
			Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": permMode}))).To(BeEmpty())
		}
		return a, sid
	}

	// runAll has the model run the commands as concurrent bash calls,
	// answers the permission requests with allow_once in default mode
	// (checking they say the command is sandboxed), and returns each
	// call's result by id.
	runAll := func(a *agent, sid, permMode string, sandboxed bool, cmds [][2]string) map[string]string {
		var calls []llmtest.ToolCall
		for _, c := range cmds {
			args, _ := json.Marshal(map[string]any{"command": c[1], "timeout": 60})
			calls = append(calls, llmtest.ToolCall{ID: c[0], Name: "bash", Arguments: string(args)})
		}
		fake.Script(llmtest.Reply{ToolCalls: calls}, llmtest.Reply{Text: "done"})
		id := a.prompt(sid, "go")
		if permMode == "default" {
			for i := range cmds {
				req := a.serverRequest("session/request_permission", i)
				tc := req["params"].(map[string]any)["toolCall"].(map[string]any)
				if sandboxed {
					Expect(tc["title"]).To(HavePrefix("Run (sandboxed): "))
					Expect(tc["_meta"]).To(HaveKeyWithValue("sandbox", HaveKeyWithValue("mode", "landlock")))
				} else {
					Expect(tc["title"]).NotTo(ContainSubstring("sandboxed"))
					Expect(tc).NotTo(HaveKey("_meta"))
				}
				a.answer(req["id"], allow("allow_once"))
			}
		}
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		out := map[string]string{}
		for _, c := range cmds {
			out[c[0]] = toolResultFor(fake, c[0])
		}
		return out
	}

	DescribeTable("what a command reaches",
		func(sandboxMode, permMode string) {
			sandboxed := sandboxMode != "off"
			a, sid := start(sandboxMode, permMode)
			outside := filepath.Join(os.TempDir(), fmt.Sprintf("iac-sbx-outside-%d-%d", os.Getpid(), GinkgoRandomSeed()))
			DeferCleanup(func() { _ = os.Remove(outside) })
			port := listener.Addr().(*net.TCPAddr).Port
			serverPID := strconv.Itoa(a.cmd.Process.Pid)
			res := runAll(a, sid, permMode, sandboxed, [][2]string{
				{"ssh", "cat ~/.ssh/id_ed25519"},
				{"state", "cat " + filepath.Join(stateDir, "planted.txt")},
				{"tmp", "echo x > " + outside + " && echo wrote-outside"},
				{"cwd", `echo hi > made.txt && cat made.txt && echo "tmpdir=$TMPDIR" && echo t > "$TMPDIR/t" && cat "$TMPDIR/t"`},
				{"sibling", "ls " + sibling},
				{"net", "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(port) + " && echo connected"},
				{"bg", "(cat ~/.ssh/id_ed25519) & wait $!; echo \"background-exit=$?\"; setsid -w cat ~/.ssh/id_ed25519; echo \"setsid-exit=$?\""},
				{"signal", "kill -0 " + serverPID + " && echo may-signal"},
				// counted, not shown: the key must not reach the wire
				{"environ", "tr '\\0' '\\n' < /proc/" + serverPID + "/environ | grep -c '^IAC_CODE_API_KEY='"},
				{"toolchain", "cd proj && go build -o app . && ./app && git init -q && git status --short && npm test --silent && cat node-ok.txt"},
			})

			for k, v := range res {
				fmt.Fprintf(GinkgoWriter, "--- %s:\n%s\n", k, v)
			}
			// What works either way.
			Expect(res["cwd"]).To(ContainSubstring("[stdout]\nhi\n"), res["cwd"])
			Expect(res["cwd"]).To(ContainSubstring("[exit code: 0]"))
			Expect(res["toolchain"]).To(ContainSubstring("built-and-ran"), res["toolchain"])
			Expect(res["toolchain"]).To(ContainSubstring("?? "), "git status lists the untracked files: "+res["toolchain"])
			Expect(res["toolchain"]).To(HaveSuffix("[exit code: 0]"), res["toolchain"])

			if !sandboxed {
				Expect(res["ssh"]).To(ContainSubstring(sshKey))
				Expect(res["state"]).To(ContainSubstring(stateSecret))
				Expect(res["tmp"]).To(ContainSubstring("wrote-outside"))
				Expect(res["sibling"]).To(ContainSubstring("their-file.txt"))
				Expect(res["net"]).To(ContainSubstring("connected"))
				Eventually(connects.Load).Should(BeNumerically(">=", 1))
				Expect(res["bg"]).To(ContainSubstring(sshKey))
				Expect(res["bg"]).To(ContainSubstring("setsid-exit=0"))
				Expect(res["signal"]).To(ContainSubstring("may-signal"))
				Expect(res["environ"]).To(ContainSubstring("[stdout]\n1\n"), "the server's environment, through /proc")
				a.finish()
				return
			}
			denied := func(id string) {
				GinkgoHelper()
				Expect(res[id]).To(ContainSubstring("Permission denied"), id+": "+res[id])
				Expect(res[id]).NotTo(ContainSubstring("[exit code: 0]"), id)
			}
			denied("ssh")
			Expect(res["ssh"]).NotTo(ContainSubstring(sshKey))
			denied("state")
			Expect(res["state"]).NotTo(ContainSubstring(stateSecret))
			denied("tmp")
			Expect(outside).NotTo(BeAnExistingFile())
			denied("sibling")
			Expect(res["sibling"]).NotTo(ContainSubstring("their-file.txt"))
			Expect(res["net"]).To(ContainSubstring("Permission denied"), res["net"])
			Expect(res["net"]).NotTo(ContainSubstring("connected"))
			Consistently(connects.Load, "200ms").Should(BeZero(), "the listener saw a connection")
			Expect(res["bg"]).To(ContainSubstring("Permission denied"))
			Expect(res["bg"]).To(ContainSubstring("background-exit=1"))
			Expect(res["bg"]).To(ContainSubstring("setsid-exit=1"), "a process that leaves the group stays in the sandbox")
			Expect(res["bg"]).NotTo(ContainSubstring(sshKey))
			Expect(res["signal"]).To(ContainSubstring("Operation not permitted"), res["signal"])
			Expect(res["signal"]).NotTo(ContainSubstring("may-signal"))
			Expect(res["environ"]).To(ContainSubstring("Permission denied"), res["environ"])
			// TMPDIR is the session's own directory, not /tmp; it goes
			// when the session does.
			var tmpdir string
			for _, line := range strings.Split(res["cwd"], "\n") {
				if v, ok := strings.CutPrefix(line, "tmpdir="); ok {
					tmpdir = v
				}
			}
			Expect(tmpdir).To(HavePrefix(filepath.Join(os.TempDir(), "iac-code-session-")))
			Expect(tmpdir).To(BeADirectory())
			// npm ran with its cache and os.tmpdir() in the session's TMPDIR.
			Expect(res["toolchain"]).To(ContainSubstring(tmpdir))
			a.finish()
			Expect(tmpdir).NotTo(BeAnExistingFile(), "the session's TMPDIR outlives the session")
		},
		Entry("sandboxed, default mode after allow_once", "auto", "default"),
		Entry("sandboxed, bypass mode", "on", "bypass"),
		Entry("IAC_CODE_SANDBOX=off, default mode after allow_once", "off", "default"),
		Entry("IAC_CODE_SANDBOX=off, bypass mode", "off", "bypass"),
	)

	It("kill -9 of the server from a sandboxed command fails; the server goes on", func() {
		a, sid := start("auto", "bypass")
		res := runAll(a, sid, "bypass", true, [][2]string{{"kill", "kill -9 " + strconv.Itoa(a.cmd.Process.Pid) + "; echo after-kill"}})
		Expect(res["kill"]).To(ContainSubstring("Operation not permitted"), res["kill"])
		Expect(res["kill"]).To(ContainSubstring("after-kill"))
		a.finish() // the server is alive and exits cleanly
	})

	DescribeTable("a sub-agent's bash is inside the sandbox",
		func(sandboxMode string, readable bool) {
			a, sid := start(sandboxMode, "bypass")
			fake.Script(
				toolCallReply("ag", "agent", map[string]any{"prompt": "read the key", "description": "read key", "subagent_type": "explore"}),
				toolCallReply("sub", "bash", map[string]any{"command": "cat ~/.ssh/id_ed25519"}),
				llmtest.Reply{Text: "sub-agent done"},
				llmtest.Reply{Text: "done"},
			)
			Expect(a.result(a.prompt(sid, "go"))["stopReason"]).To(Equal("end_turn"))
			if readable {
				Expect(toolResultFor(fake, "sub")).To(ContainSubstring(sshKey))
			} else {
				Expect(toolResultFor(fake, "sub")).To(ContainSubstring("Permission denied"))
				Expect(toolResultFor(fake, "sub")).NotTo(ContainSubstring(sshKey))
			}
			a.finish()
		},
		Entry("sandboxed", "auto", false),
		Entry("IAC_CODE_SANDBOX=off", "off", true),
	)

	DescribeTable("a stdio MCP server is inside the sandbox",
		func(sandboxMode string, readable bool) {
			a, _ := start(sandboxMode, "bypass")
			sid, states := a.newMCPSession(cwd, testServer("t"))
			Expect(stateOf(states, "t")).To(HaveKeyWithValue("status", "connected"))
			Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))).To(BeEmpty())
			key := filepath.Join(home, ".ssh", "id_ed25519")
			fake.Script(toolCallReply("m1", "mcp__t__read_path", map[string]any{"path": key}),
				toolCallReply("m2", "mcp__t__write_note", map[string]any{"text": "from-mcp"}),
				llmtest.Reply{Text: "done"})
			id := a.prompt(sid, "read it")
			Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
			if readable {
				Expect(toolResultFor(fake, "m1")).To(ContainSubstring(sshKey))
			} else {
				Expect(toolResultFor(fake, "m1")).To(ContainSubstring("permission denied"))
				Expect(toolResultFor(fake, "m1")).NotTo(ContainSubstring(sshKey))
			}
			// its working directory (the cwd) stays writable
			Expect(os.ReadFile(filepath.Join(cwd, "note.txt"))).To(Equal([]byte("from-mcp")))
			a.finish()
		},
		Entry("sandboxed", "auto", false),
		Entry("IAC_CODE_SANDBOX=off", "off", true),
	)

	Describe("on a kernel without Landlock (hidden by the test build)", func() {
		noLandlock := func(mode string) (*agent, string) {
			a := startAgent(agentEnv(fake, "HOME="+home, "IAC_CODE_HOME="+stateDir, "IAC_CODE_SANDBOX="+mode,
				"IAC_CODE_E2E_NO_LANDLOCK=1"))
			init := a.initialize()
			Expect(init["_meta"]).To(HaveKeyWithValue("sandbox", HaveKeyWithValue("reason", ContainSubstring("Landlock hidden"))))
			sid := a.newSession(cwd)
			Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))).To(BeEmpty())
			return a, sid
		}
		It("on: the start-up log says so and a command fails with the reason, never run", func() {
			a, sid := noLandlock("on")
			Expect(a.stderr.String()).To(ContainSubstring(`"level":"error"`))
			Expect(a.stderr.String()).To(ContainSubstring("IAC_CODE_SANDBOX=on but the sandbox cannot be set up"))
			res := runAll(a, sid, "bypass", false, [][2]string{{"c", "touch ran.txt"}})
			Expect(res["c"]).To(ContainSubstring("sandbox: IAC_CODE_SANDBOX=on but Landlock hidden"))
			Expect(res["c"]).To(ContainSubstring("the command was not run"))
			Expect(filepath.Join(cwd, "ran.txt")).NotTo(BeAnExistingFile())
			a.finish()
		})
		It("auto: one warning at start, and commands run as without the sandbox", func() {
			a, sid := noLandlock("auto")
			Expect(strings.Count(a.stderr.String(), "no sandbox: the kernel has no Landlock")).To(Equal(1))
			res := runAll(a, sid, "bypass", false, [][2]string{{"c", "cat ~/.ssh/id_ed25519"}})
			Expect(res["c"]).To(ContainSubstring(sshKey))
			a.finish()
		})
	})
})
