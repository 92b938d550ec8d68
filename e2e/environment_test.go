package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// Editors start agents with thin environments: avante.nvim gives PATH and
// the provider's configured env only (lua/avante/libs/acp_client.lua), a
// registry launcher little more. These specs run the binary that way, in a
// private mount namespace whose password database (/etc/passwd, read
// through nsswitch "files") says where the user's home is, or that the user
// has none, so that no spec touches the real home.

// inPasswdNamespace runs bin args in a new mount namespace where
// /etc/passwd is passwd and nsswitch reads only files. Root only (the
// specs skip elsewhere).
func inPasswdNamespace(passwd string, args ...string) *exec.Cmd {
	dir := GinkgoT().TempDir()
	pw := filepath.Join(dir, "passwd")
	ns := filepath.Join(dir, "nsswitch.conf")
	Expect(os.WriteFile(pw, []byte(passwd), 0o644)).To(Succeed())
	Expect(os.WriteFile(ns, []byte("passwd: files\ngroup: files\n"), 0o644)).To(Succeed())
	script := `mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/nsswitch.conf && shift 2 && exec "$@"`
	return exec.Command("unshare", append([]string{"-m", "sh", "-c", script, "sh", pw, ns, binPath}, args...)...)
}

// passwdWithRootHome is a password database whose root entry has home.
func passwdWithRootHome(home string) string {
	return "root:x:0:0:root:" + home + ":/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
}

// passwdWithoutUs lists other users only.
const passwdWithoutUs = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"

// pathOnly is `env -i PATH=…`.
func pathOnly(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=50"}, extra...)
}

func requireMountNamespaces() {
	if os.Geteuid() != 0 {
		Skip("needs root for a private mount namespace with its own /etc/passwd")
	}
	if err := exec.Command("unshare", "-m", "true").Run(); err != nil {
		Skip("no mount namespaces here: " + err.Error())
	}
}

var _ = Describe("starting with an editor's thin environment", Label("e2e", "environment"), func() {
	var (
		fake *llmtest.Server
		home string
	)
	BeforeEach(func() {
		requireMountNamespaces()
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home = GinkgoT().TempDir()
	})

	// sessionsUnder lists the session files kept under the state root.
	sessionsUnder := func(root string) []string {
		var files []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.Contains(p, "sessions") {
				files = append(files, p)
			}
			return nil
		})
		return files
	}

	It("serves a prompt with only PATH (env -i): the home comes from the password database", func() {
		// A user who ran `iac-code login` and wrote settings.yml: the key
		// and the model are under ~/.iac-code, the editor passes nothing.
		state := filepath.Join(home, ".iac-code")
		Expect(os.MkdirAll(state, 0o700)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(state, "settings.yml"), []byte("activeProvider: openai_compatible\nproviders:\n  openai_compatible:\n    model: test-model\n    apiBase: "+fake.URL()+"\n"), 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(state, ".credentials.yml"), []byte("openai_compatible: "+testAPIKey+"\n"), 0o600)).To(Succeed())
		fake.Script(llmtest.Reply{Text: "hello from a thin environment"})

		a := startAgentCmd(inPasswdNamespace(passwdWithRootHome(home), "acp"), pathOnly())
		a.initialize()
		sid := a.newSession(GinkgoT().TempDir())
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(fake.Requests()[0].Header.Get("Authorization")).To(Equal("Bearer " + testAPIKey))
		Expect(sessionsUnder(state)).NotTo(BeEmpty(), "the session is kept under the passwd home's .iac-code")
		a.finish()
	})

	It("serves a prompt with avante.nvim's environment: PATH plus the provider's configured env", func() {
		fake.Script(llmtest.Reply{Text: "hello, avante"})
		env := pathOnly("IAC_CODE_API_KEY="+testAPIKey, "IAC_CODE_PROVIDER=openai_compatible",
			"IAC_CODE_BASE_URL="+fake.URL(), "IAC_CODE_MODEL=test-model")
		a := startAgentCmd(inPasswdNamespace(passwdWithRootHome(home), "acp"), env)
		a.initialize()
		sid := a.newSession(GinkgoT().TempDir())
		Expect(a.result(a.prompt(sid, "hi"))["stopReason"]).To(Equal("end_turn"))
		Expect(sessionsUnder(filepath.Join(home, ".iac-code"))).NotTo(BeEmpty())
		a.finish()
	})

	It("without any home answers initialize, then names IAC_CODE_HOME in every answer (stdio)", func() {
		a := startAgentCmd(inPasswdNamespace(passwdWithoutUs, "acp"), pathOnly("IAC_CODE_API_KEY="+testAPIKey))
		res := a.initialize()
		Expect(res).To(HaveKeyWithValue("protocolVersion", 1.0))
		for _, method := range []string{"session/new", "session/list"} {
			e := a.errorOf(a.request(method, map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))
			Expect(e["code"]).To(Equal(-32603.0))
			Expect(e["message"]).To(ContainSubstring("IAC_CODE_HOME"))
			Expect(e["data"]).To(HaveKeyWithValue("reason", "no_home"))
		}
		Expect(a.stderr.String()).To(ContainSubstring("IAC_CODE_HOME"))
		Expect(a.cmd.ProcessState).To(BeNil(), "still running")
		a.finish()
	})

	It("without any home serves HTTP: initialize answered, session/new names IAC_CODE_HOME", func() {
		port := freePort()
		a := startHTTPAgentCmd(inPasswdNamespace(passwdWithoutUs, "acp", "--transport", "http", "--port", port),
			pathOnly("IAC_CODE_API_KEY="+testAPIKey), "", port)
		r := a.do(http.MethodPost, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`))
		Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		a.check.ServerSent(r.body)
		conn := r.header.Get("Acp-Connection-Id")
		s := a.stream(conn)
		a.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": GinkgoT().TempDir(), "mcpServers": []any{}}))
		evs := s.until("session/new answer", respTo(2))
		e := evs[len(evs)-1].msg["error"].(map[string]any)
		Expect(e["code"]).To(Equal(-32603.0))
		Expect(e["message"]).To(ContainSubstring("IAC_CODE_HOME"))
		Expect(e["data"]).To(HaveKeyWithValue("reason", "no_home"))
		Expect(a.stderr.String()).To(ContainSubstring("IAC_CODE_HOME"))
		Expect(a.check.Violations()).To(BeEmpty())
		raw, _ := json.Marshal(evs[len(evs)-1].msg)
		Expect(string(raw)).NotTo(ContainSubstring(testAPIKey))
		a.sigterm(time.Minute)
	})
})
