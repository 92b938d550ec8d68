package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/protocol"
)

// A pod drains: the session paused for it has left, and waits (stopped)
// for its clients to hear so; one of them never answers, so it waits out
// leftHearingWait. A load another connection sends meanwhile reaches the
// stopped actor, which gives it back once gone (attachAgain). The draining
// pod does not open the session anew for it (it would hold the session
// the drain let go of, which must then move again, or be stranded when the
// pod stops): the load is answered as a request for a session that left
// is, "moved", and the client loads it again, from a pod that stays.
var _ = Describe("a load given back to its connection on a draining pod", func() {
	It("is answered moved, and the session is not opened anew on the draining pod", func() {
		p := &scriptedProvider{}
		s := newSessionHarness(p, GinkgoT().TempDir(), nil)
		DeferCleanup(s.close)
		cwd := GinkgoT().TempDir()
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)

		// A client of the session that never hears it left.
		deaf := s.srv.sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
		DeferCleanup(func() { _ = s.srv.sys.Root.StopFuture(deaf).Wait() })
		s.srv.sys.Root.Send(actor.NewPID(s.srv.sys.Address(), sessionActorName(sid)),
			&attach{kind: startLoad, reqID: protocol.RawMessage("1"), cwd: cwd, conn: deaf})

		p.then(hangAfter("cut "))
		h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return agentText(h.out.updates()) }, 5*time.Second).Should(Equal("cut "))
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		Expect(s.srv.PauseTurns(ctx, nil)).To(Equal([]string{sid}))

		g := s.connect()
		start := time.Now()
		load := g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
		Eventually(func() map[string]any { return g.out.response(load) }, leftHearingWait+5*time.Second, 10*time.Millisecond).ShouldNot(BeNil())
		Expect(time.Since(start)).To(BeNumerically(">", leftHearingWait/2), "given back by the stopped actor, once gone")
		Expect(g.out.response(load)).To(HaveKeyWithValue("error", HaveKeyWithValue("data",
			HaveKeyWithValue("session_id", "Session moved to another connection"))), "answered moved, not opened here")
		Consistently(func() int64 { return s.srv.Metrics().Sessions.Load() }, 300*time.Millisecond, 20*time.Millisecond).Should(BeZero(),
			"no session actor on the draining pod")
		Expect(answersTo(g, load)).To(Equal(1))
	})
})
