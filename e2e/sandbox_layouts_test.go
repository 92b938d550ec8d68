package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// tsServer is a TypeScript MCP server as the MCP quickstart lays it out:
// build/index.js run by node, its dependencies in node_modules at the
// package root (the official SDK and zod, copied from the e2e harness's
// npm install). Its one tool, read_path, answers a file's text or the
// error reading it.
const tsServer = `import { readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "weather", version: "1.0.0" });
server.registerTool("read_path", { description: "Reads a file", inputSchema: { path: z.string() } }, async ({ path }) => {
  try {
    return { content: [{ type: "text", text: readFileSync(path, "utf8") }] };
  } catch (err) {
    return { content: [{ type: "text", text: String(err.message) }], isError: true };
  }
});
await server.connect(new StdioServerTransport());
`

// pyServer is a stdlib-only MCP server (newline-delimited JSON-RPC over
// stdio) in a package installed into a venv the way pip's editable
// install does it: a .pth in site-packages points at src/.
const pyServer = `import json, sys

TOOL = {"name": "read_path", "description": "Reads a file",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}


def answer(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "pysrv", "version": "1.0.0"}}
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        try:
            with open(params["arguments"]["path"]) as f:
                return {"content": [{"type": "text", "text": f.read()}]}
        except OSError as err:
            return {"content": [{"type": "text", "text": str(err)}], "isError": True}
    if method == "ping":
        return {}
    return None


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg:
            continue
        res = answer(msg)
        out = {"jsonrpc": "2.0", "id": msg["id"]}
        if res is None:
            out["error"] = {"code": -32601, "message": "method not found"}
        else:
            out["result"] = res
        print(json.dumps(out), flush=True)
`

// tsPackage lays out the TypeScript server under dir; the entry runs it
// as its quickstart says: node /path/weather/build/index.js.
func tsPackage(dir string) map[string]any {
	Expect(os.MkdirAll(filepath.Join(dir, "build"), 0o755)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"weather","version":"1.0.0","type":"module","private":true,`+
		`"dependencies":{"@modelcontextprotocol/sdk":"*","zod":"*"}}`), 0o644)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "build", "index.js"), []byte(tsServer), 0o644)).To(Succeed())
	// Hard links where the file system allows (fast), else a copy.
	// "/." : the contents, also when node_modules is a symlink.
	src, dst := filepath.Join(nodeDir, "node_modules")+"/.", filepath.Join(dir, "node_modules")
	if exec.Command("cp", "-al", src, dst).Run() != nil {
		Expect(os.RemoveAll(dst)).To(Succeed())
		out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}
	return map[string]any{"name": "weather", "command": "node", "args": []string{filepath.Join(dir, "build", "index.js")}, "env": []any{}}
}

// venvPackage lays out the Python server as a project with a venv under
// dir (python3 -m venv, offline: no pip) and a console script in the
// venv's bin, which the entry runs: /path/pysrv/.venv/bin/pysrv-mcp.
func venvPackage(dir string) map[string]any {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		Skip("no /usr/bin/python3 for a venv")
	}
	venv := filepath.Join(dir, ".venv")
	Expect(os.MkdirAll(filepath.Join(dir, "src", "pysrv"), 0o755)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "pyproject.toml"), []byte("[project]\nname = \"pysrv\"\nversion = \"1.0.0\"\n"), 0o644)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "src", "pysrv", "__init__.py"), []byte(pyServer), 0o644)).To(Succeed())
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		Skip("python3 -m venv does not work here: " + string(out))
	}
	site, err := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	Expect(err).NotTo(HaveOccurred())
	Expect(site).To(HaveLen(1))
	Expect(os.WriteFile(filepath.Join(site[0], "pysrv.pth"), []byte(filepath.Join(dir, "src")+"\n"), 0o644)).To(Succeed())
	script := filepath.Join(venv, "bin", "pysrv-mcp")
	Expect(os.WriteFile(script, []byte("#!"+filepath.Join(venv, "bin", "python")+"\nfrom pysrv import main\nmain()\n"), 0o755)).To(Succeed())
	return map[string]any{"name": "pysrv", "command": script, "args": []string{}, "env": []any{}}
}

// sandboxMachine lays out what the sandbox specs protect, under a temp
// dir: the session's cwd, a sibling workspace with a file of its own, a
// home with an SSH key (sshKey) and the server's state.
func sandboxMachine(sshKey string) (cwd, sibling, home, stateDir string) {
	root, err := filepath.EvalSymlinks(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	cwd, sibling = filepath.Join(root, "work", "ws"), filepath.Join(root, "work", "other")
	home, stateDir = filepath.Join(root, "home"), filepath.Join(root, "state")
	for _, d := range []string{cwd, sibling, filepath.Join(home, ".ssh"), stateDir} {
		Expect(os.MkdirAll(d, 0o700)).To(Succeed())
	}
	Expect(os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte(sshKey+"\n"), 0o600)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(sibling, "their-file.txt"), []byte("theirs\n"), 0o600)).To(Succeed())
	return cwd, sibling, home, stateDir
}

// MCP servers installed the way their quickstarts install them start
// inside the sandbox: it grants their package root (node_modules, the
// venv and the project), not the home they live in, not ~/.ssh, not
// another workspace. (uv and uvx are not installable on this machine: no
// PyPI; their command lines are covered by tools/mcp's unit tests.)
var _ = Describe("sandbox: MCP servers as users install them", Label("e2e", "sandbox", "mcp"), func() {
	const sshKey = "-----BEGIN OPENSSH PRIVATE KEY----- layout-test-key"
	var (
		fake                         *llmtest.Server
		cwd, sibling, home, stateDir string
	)
	BeforeEach(func() {
		if st := sandbox.Probe(sandbox.Settings{Mode: sandbox.On}); st.ABI == 0 {
			Skip("the kernel has no Landlock: " + st.Reason)
		}
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd, sibling, home, stateDir = sandboxMachine(sshKey)
	})

	DescribeTable("starts under the sandbox, its tools offered, and reads its package but not ~/.ssh or another workspace",
		func(layout func(string) map[string]any, dir, ownFile, mode string) {
			entry := layout(filepath.Join(home, dir))
			name := entry["name"].(string)
			a := startAgent(agentEnv(fake, "HOME="+home, "IAC_CODE_HOME="+stateDir, "IAC_CODE_SANDBOX="+mode))
			a.initialize()
			sid, states := a.newMCPSession(cwd, entry)
			Expect(stateOf(states, name)).To(HaveKeyWithValue("status", "connected"), "stderr:\n%s", a.stderr)
			Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))).To(BeEmpty())
			tool := "mcp__" + name + "__read_path"
			fake.Script(toolCallReply("own", tool, map[string]any{"path": filepath.Join(home, dir, ownFile)}),
				toolCallReply("key", tool, map[string]any{"path": filepath.Join(home, ".ssh", "id_ed25519")}),
				toolCallReply("other", tool, map[string]any{"path": filepath.Join(sibling, "their-file.txt")}),
				llmtest.Reply{Text: "done"})
			Expect(a.result(a.prompt(sid, "read them"))["stopReason"]).To(Equal("end_turn"))
			Expect(offered(fake.Requests()[0])).To(HaveKey(tool))
			Expect(toolResultFor(fake, "own")).To(ContainSubstring("1.0.0"))
			if mode == "off" {
				// What the sandbox keeps out is there to read: the specs can fail.
				Expect(toolResultFor(fake, "key")).To(ContainSubstring(sshKey))
				Expect(toolResultFor(fake, "other")).To(ContainSubstring("theirs"))
			} else {
				for _, id := range []string{"key", "other"} {
					Expect(toolResultFor(fake, id)).To(MatchRegexp(`(?i)permission denied`), id)
				}
				Expect(toolResultFor(fake, "key")).NotTo(ContainSubstring(sshKey))
				Expect(toolResultFor(fake, "other")).NotTo(ContainSubstring("theirs"))
			}
			Expect(strings.Count(a.stderr.String(), "ERR_MODULE_NOT_FOUND")).To(BeZero())
			a.finish()
		},
		Entry("node ~/mcp/weather/build/index.js, node_modules at the package root", Label("node"), tsPackage, "mcp/weather", "package.json", "on"),
		Entry("a venv's console script ~/pysrv/.venv/bin/pysrv-mcp, the package in the project's src/", venvPackage, "pysrv", "pyproject.toml", "on"),
		Entry("the TypeScript server with IAC_CODE_SANDBOX=off", Label("node"), tsPackage, "mcp/weather", "package.json", "off"),
	)
})
