package actors

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/actors/sysprompt"
)

var _ = Describe("the turn's system prompt", func() {
	It("reads AGENTS.md when the session opens, and gives each model call the stable part and the mode's rules", func() {
		p := &scriptedProvider{}
		p.then(say("one")).then(say("two"))
		cwd, err := filepath.EvalSymlinks(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(cwd, "AGENTS.md"), []byte("Use tabs.\n"), 0o644)).To(Succeed())
		h := newHarness(p)
		defer h.close()
		sid := h.newSession(cwd)
		// Before any prompt: what /status reports.
		Eventually(func() []string {
			if in := h.srv.deps.projects.For(cwd).Loaded(); in != nil {
				return in.Paths()
			}
			return nil
		}).Should(Equal([]string{filepath.Join(cwd, "AGENTS.md")}))
		s := &session{deps: h.srv.deps}
		s.meta.Cwd = cwd
		Expect(s.loadedInstructions().Paths()).To(Equal([]string{filepath.Join(cwd, "AGENTS.md")}))

		prompt := func(text string) {
			id := h.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": text}}})
			Expect(h.result(id)["stopReason"]).To(Equal("end_turn"))
		}
		prompt("a")
		h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))
		prompt("b")
		reqs := p.requests()
		Expect(reqs).To(HaveLen(2))
		Expect(reqs[0].System).To(ContainSubstring("Use tabs."))
		Expect(reqs[1].System).To(Equal(reqs[0].System))
		Expect(reqs[0].SystemTurn).To(HavePrefix(sysprompt.EnvironmentHeading))
		Expect(reqs[0].SystemTurn).To(ContainSubstring("Mode: default."))
		Expect(reqs[1].SystemTurn).To(ContainSubstring("Mode: plan."))
		Expect(reqs[0].SystemTurn).To(ContainSubstring("- Working directory: " + cwd))
	})
})
