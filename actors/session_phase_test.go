package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/tools"
)

// lingerTool is a tool that reads a file through the client, then goes on
// for a while after its turn is cancelled (a terminal slow to release):
// the turn waits for it (it talks to the client), the session stays ending.
type lingerTool struct {
	started chan struct{}
	linger  time.Duration
}

func (lingerTool) Name() string            { return "linger" }
func (lingerTool) Description() string     { return "lingers after a cancel" }
func (lingerTool) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (lingerTool) Kind() tools.Kind        { return tools.KindOther }
func (lingerTool) ReadOnly() bool          { return true }
func (t lingerTool) Prepare(*tools.Env, json.RawMessage) (tools.Call, error) {
	return lingerCall{FuncCall: &tools.FuncCall{TitleText: "Linger"}, t: t}, nil
}

type lingerCall struct {
	*tools.FuncCall
	t lingerTool
}

func (c lingerCall) RunVia(ctx context.Context, cl tools.Client, _ func(string)) tools.Result {
	if _, err := cl.ReadTextFile(ctx, "/linger.txt", 0, 0); err != nil {
		return tools.Errorf(err.Error())
	}
	close(c.t.started)
	<-ctx.Done()
	time.Sleep(c.t.linger)
	return tools.Errorf("cancelled")
}

var _ = Describe("a session ending", func() {
	It("answers a hand-off that arrives while it closes, once it stopped (issue 28, defect 3)", func() {
		p := (&scriptedProvider{}).then(callTool("t1", "linger", `{}`))
		tool := lingerTool{started: make(chan struct{}), linger: 1500 * time.Millisecond}
		s := newSessionHarness(p, GinkgoT().TempDir(), nil, tool)
		defer s.close()
		out := &recorder{}
		h := &harness{srv: s.srv, conn: s.srv.Connect(out), out: out, provider: p}
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"fs": map[string]any{"readTextFile": true}}}))
		s.conns = append(s.conns, h)
		sid := h.result(h.call("session/new", map[string]any{"cwd": GinkgoT().TempDir()}))["sessionId"].(string)
		prompt := h.call("session/prompt", textPrompt(sid, "linger"))
		Eventually(func() int { return len(out.requests("fs/read_text_file")) }, 5*time.Second).Should(Equal(1))
		h.answer(out.requests("fs/read_text_file")[0]["id"], map[string]any{"content": "x"})
		Eventually(tool.started, 5*time.Second).Should(BeClosed())
		closed := h.call("session/close", map[string]any{"sessionId": sid})
		// The close reaches the session through its connection, the
		// hand-off straight from the server: the close goes first (the
		// tool lingers 1.5 s after it).
		time.Sleep(300 * time.Millisecond)
		Expect(s.srv.Metrics().Sessions.Load()).To(BeEquivalentTo(1))
		start := time.Now()
		Expect(s.srv.HandOff(sid, 4*time.Second)).To(Succeed())
		Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		h.result(closed)
	})
})

var _ = Describe("the session's phase transitions", func() {
	var (
		s   *session
		log *bytes.Buffer
	)
	BeforeEach(func() {
		log = &bytes.Buffer{}
		s = &session{id: "phases", log: zerolog.New(log)}
	})
	ending := func(why endReason) phase { return phase{kind: phaseEnding, why: why} }

	It("goes opening → live → ending → stopped", func() {
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
		Expect(s.become(ending(endClose))).To(BeTrue())
		Expect(s.become(phase{kind: phaseStopped})).To(BeTrue())
		Expect(log.String()).To(BeEmpty())
	})

	DescribeTable("refuses an illegal transition, logging it as an error",
		func(path []phase, to phase) {
			for _, p := range path {
				Expect(s.become(p)).To(BeTrue())
			}
			before := s.phase
			Expect(s.become(to)).To(BeFalse())
			Expect(s.phase).To(Equal(before))
			Expect(log.String()).To(And(ContainSubstring(`"level":"error"`), ContainSubstring("illegal session phase transition"),
				ContainSubstring(`"from":"`+before.String()+`"`), ContainSubstring(`"to":"`+to.String()+`"`)))
		},
		Entry("stopped → live", []phase{{kind: phaseStopped}}, phase{kind: phaseLive}),
		Entry("opening → ending", nil, ending(endClose)),
		Entry("live → opening", []phase{{kind: phaseLive}}, phase{kind: phaseOpening}),
		Entry("stub → ending", []phase{{kind: phaseStub}}, ending(endClose)),
		Entry("stub → opening", []phase{{kind: phaseStub}}, phase{kind: phaseOpening}),
		Entry("failed → live", []phase{{kind: phaseFailed}}, phase{kind: phaseLive}),
		Entry("ending(close) → live", []phase{{kind: phaseLive}, ending(endClose)}, phase{kind: phaseLive}),
		Entry("ending(close) → ending(hand-off)", []phase{{kind: phaseLive}, ending(endClose)}, ending(endHandOff)),
		Entry("ending(last detach) → ending(close)", []phase{{kind: phaseLive}, ending(endLastDetach)}, ending(endClose)),
		Entry("live → ending without a reason", []phase{{kind: phaseLive}}, phase{kind: phaseEnding}),
		Entry("live → stub", []phase{{kind: phaseLive}}, phase{kind: phaseStub}),
		Entry("ending(hand-off) → stub", []phase{{kind: phaseLive}, ending(endHandOff)}, phase{kind: phaseStub}),
	)

	It("becomes the stub its clients follow it through once paused", func() {
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
		Expect(s.become(ending(endPause))).To(BeTrue())
		Expect(s.become(phase{kind: phaseStub})).To(BeTrue())
		Expect(log.String()).To(BeEmpty())
	})

	It("becomes live (or failed) when its stub takes the session to adopt it", func() {
		Expect(s.become(phase{kind: phaseStub})).To(BeTrue())
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
		t := &session{id: "failed", log: zerolog.New(log)}
		Expect(t.become(phase{kind: phaseStub})).To(BeTrue())
		Expect(t.become(phase{kind: phaseFailed})).To(BeTrue())
		Expect(log.String()).To(BeEmpty())
	})

	It("keeps the askers of a hand-off when the ending becomes a close, and left when it stops", func() {
		asker, left := actor.NewPID("test", "asker"), make(chan struct{})
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
		Expect(s.become(phase{kind: phaseEnding, why: endHandOff, askers: []*actor.PID{asker}, left: left})).To(BeTrue())
		Expect(s.become(ending(endClose))).To(BeTrue())
		Expect(s.phase.askers).To(ConsistOf(asker))
		Expect(s.become(phase{kind: phaseStopped})).To(BeTrue())
		Expect(s.phase.left).To(Equal(left))
	})

	It("serves as live while asked to retire, and goes back to live when refused", func() {
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
		Expect(s.become(ending(endRetire))).To(BeTrue())
		Expect(s.phase.serving()).To(BeTrue())
		Expect(s.phase.lettingGo()).To(BeFalse())
		Expect(s.become(phase{kind: phaseLive})).To(BeTrue())
	})
})
