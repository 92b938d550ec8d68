package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store"
)

// quietAnswers are the session's answers to "is it idle" for: evicting it,
// releasing its lease after SessionRelease, releasing a file store's lock
// between turns, starting the next queued prompt.
type quietAnswers struct{ evict, releaseIdle, releaseBetween, startQueued bool }

func quietOf(s *session) quietAnswers {
	return quietAnswers{
		evict:          s.evictable(),
		releaseIdle:    s.holdsStore() && s.idleReleasable(),
		releaseBetween: s.releasableBetweenTurns(),
		startQueued:    s.queueMayStart(),
	}
}

var _ = Describe("the session's answers to whether it is idle", func() {
	// quietSession is a live session with one client, its store held,
	// nothing running, then changed by set.
	quietSession := func(set func(s *session)) *session {
		st, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		h, err := st.Create(store.Meta{ID: "quiet", Cwd: "/"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(h.Close)
		s := &session{id: "quiet", store: h}
		s.clients.add(client{pid: actor.NewPID("test", "conn-a")})
		if set != nil {
			set(s)
		}
		return s
	}
	req := func() *sessionRequest { return &sessionRequest{method: "session/prompt"} }
	DescribeTable("pinned today (issue 28): four definitions",
		func(set func(s *session), want quietAnswers) {
			Expect(quietOf(quietSession(set))).To(Equal(want))
		},
		Entry("idle, one client", nil, quietAnswers{true, true, true, true}),
		Entry("two clients", func(s *session) { s.clients.add(client{pid: actor.NewPID("test", "conn-b")}) },
			quietAnswers{false, true, true, true}),
		Entry("no client", func(s *session) { s.clients.remove(s.clients.list[0].pid) },
			quietAnswers{false, true, true, true}),
		Entry("a turn runs", func(s *session) { s.turn = actor.NewPID("test", "turn") },
			quietAnswers{false, false, false, false}),
		Entry("a prompt waits for the MCP servers", func(s *session) { s.mcp.held = req() },
			quietAnswers{false, false, false, false}),
		Entry("a start waits for the MCP servers", func(s *session) { s.mcp.pending = []pendingStart{{}} },
			quietAnswers{false, true, false, true}),
		Entry("a prompt queued, no turn", func(s *session) { s.queue.waiting = []*sessionRequest{req()} },
			quietAnswers{false, true, false, true}),
		Entry("the store released", func(s *session) { s.released = true },
			quietAnswers{true, false, false, true}),
		Entry("failed", func(s *session) { s.failed = true },
			quietAnswers{false, false, false, true}),
		Entry("opening (no store yet)", func(s *session) { s.store = nil },
			quietAnswers{true, false, false, true}),
		Entry("closing", func(s *session) { s.closing = true },
			quietAnswers{true, true, false, false}),
		Entry("retiring", func(s *session) { s.retiring = true },
			quietAnswers{false, true, true, true}),
		Entry("handing off", func(s *session) { s.handingOff = []*actor.PID{nil} },
			quietAnswers{true, true, true, false}),
		Entry("an acquire in flight", func(s *session) { s.acq = &acquiring{} },
			quietAnswers{false, true, true, true}),
		Entry("a message waits for the acquire", func(s *session) { s.held = []*heldMessage{{}} },
			quietAnswers{false, true, true, true}),
	)
})
