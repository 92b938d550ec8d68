package actors

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A pod drains (a rolling update): its running turns pause (PauseTurns,
// with a short budget: the turn is cut mid-reply) and its connections are
// closed, each once its drain is answered (Conn.Close), while a client
// still loads a session of that pod. Every load is answered before the
// connection goes: by the session's actor, or by the session opened anew
// once the pausing actor is gone.
var _ = Describe("a pod draining while a connection loads a session", func() {
	var (
		s   *sessionHarness
		p   *scriptedProvider
		cwd string
	)
	BeforeEach(func() {
		p = &scriptedProvider{}
		s = newSessionHarness(p, GinkgoT().TempDir(), nil)
		DeferCleanup(s.close)
		cwd = GinkgoT().TempDir()
	})
	load := func(g *harness, sid string) float64 {
		return g.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}})
	}
	// pausing opens a session on h whose turn runs, g one of its clients
	// (the paused actor waits for it to hear it left), and starts the
	// pause; the pause's answer comes on the channel.
	pausing := func(round int, h, g *harness) (string, chan []string) {
		GinkgoHelper()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		g.result(load(g, sid))
		p.then(hangAfter("cut "))
		h.call("session/prompt", textPrompt(sid, "long"))
		Eventually(func() string { return agentText(h.out.updates()) }, 5*time.Second).Should(Equal("cut "), "round %d", round)
		paused := make(chan []string, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			paused <- s.srv.PauseTurns(ctx, nil)
		}()
		return sid, paused
	}

	It("answers every load of a burst once before the connection's drain is over", func() {
		for round := 0; round < 10; round++ {
			h, g := s.connect(), s.connect()
			sid, paused := pausing(round, h, g)
			var loads []float64
			for range 30 {
				loads = append(loads, load(g, sid))
			}
			g.conn.Close(5 * time.Second)
			Eventually(paused, 5*time.Second).Should(Receive(), "round %d", round)
			Expect(unanswered(g, loads)()).To(BeEmpty(), "round %d: answered before the connection went", round)
			for _, id := range loads {
				Expect(answersTo(g, id)).To(Equal(1), "round %d: load %v answered once", round, id)
			}
			h.conn.Close(5 * time.Second)
		}
	})

	It("answers a load that reached the pausing actor as it stopped before the connection's drain is over", func() {
		for round := 0; round < 60; round++ {
			h, g := s.connect(), s.connect()
			sid, paused := pausing(round, h, g)
			// The load and the drain reach the pausing actor at different
			// points of its end, round after round.
			time.Sleep(time.Duration(round%6) * 300 * time.Microsecond)
			id := load(g, sid)
			time.Sleep(time.Duration(round%5) * 200 * time.Microsecond)
			g.conn.Close(5 * time.Second)
			Eventually(paused, 5*time.Second).Should(Receive(), "round %d", round)
			Expect(answersTo(g, id)).To(Equal(1), "round %d: answered once, before the connection went", round)
			h.conn.Close(5 * time.Second)
		}
	})
})
