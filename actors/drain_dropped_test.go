package actors

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store"
)

// A connection's drain (Conn.Close) sent to a session's actor that stops
// without answering it (here: it crashes ending the turn the drain
// cancelled, so the drain it took is never answered) is over once the actor
// is gone: a stopped actor runs no turn of the connection's, and its Close
// does not wait for the timeout.
var _ = Describe("a connection's drain that a session's actor drops as it stops", func() {
	It("is over once the actor is gone, well before the Close timeout", func() {
		p := &scriptedProvider{}
		fs, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		st := &crashingStore{Store: fs}
		h := newHarnessOn(st, Config{}, p)
		DeferCleanup(h.close)

		p.then(hangAfter("working "))
		sid := h.newSession(GinkgoT().TempDir())
		id := h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return agentText(h.out.updates()) }, 5*time.Second).Should(Equal("working "))
		st.arm("Sync") // the cancelled turn's end panics: the drain taken is never answered

		const timeout = 8 * time.Second
		start := time.Now()
		h.conn.Close(timeout)
		Expect(time.Since(start)).To(BeNumerically("<", timeout/2), "the drain ended with the actor, not at the timeout")
		Expect(h.errorOf(id)["code"]).To(Equal(-32603.0), "the prompt was answered by the crashing session")
	})
})
