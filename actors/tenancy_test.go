package actors

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// as is another connection of the harness's server, of principal user.
func (h *harness) as(user string) *harness {
	out := &recorder{}
	o := &harness{srv: h.srv, out: out, provider: h.provider,
		conn: h.srv.ConnectAs(user+"-conn", Identity{Principal: user, Remote: "127.0.0.1:1"}, out)}
	o.result(o.call("initialize", map[string]any{"protocolVersion": 1}))
	return o
}

var _ = Describe("sessions of several principals", func() {
	It("lists the caller's only, answers another's as not found, keeps each cwd in its workspace root", func() {
		root := GinkgoT().TempDir()
		for _, u := range []string{"alice", "bob"} {
			Expect(os.MkdirAll(filepath.Join(root, u), 0o755)).To(Succeed())
		}
		h := newHarnessWith(Config{WorkspaceRoot: filepath.Join(root, "{user}"), MaxTurnsPerUser: 1}, &scriptedProvider{})
		defer h.close()
		alice, bob := h.as("alice"), h.as("bob")
		defer alice.conn.Close(time.Second)
		defer bob.conn.Close(time.Second)

		sid := alice.result(alice.call("session/new", map[string]any{"cwd": filepath.Join(root, "alice"), "mcpServers": []any{}}))["sessionId"].(string)
		Expect(alice.result(alice.call("session/list", map[string]any{}))["sessions"]).To(HaveLen(1))
		Expect(bob.result(bob.call("session/list", map[string]any{}))["sessions"]).To(BeEmpty())

		for _, m := range []string{"session/load", "session/resume", "session/fork", "session/prompt", "session/set_mode", "session/delete"} {
			params := map[string]any{"sessionId": sid, "cwd": filepath.Join(root, "bob"), "mcpServers": []any{}, "modeId": "plan",
				"prompt": []any{map[string]any{"type": "text", "text": "hi"}}}
			theirs := bob.errorOf(bob.call(m, params))
			params["sessionId"] = "no-such-session"
			none := bob.errorOf(bob.call(m, params))
			// the same answer, naming the id asked for (which the caller knows)
			Expect(theirs["data"]).To(HaveKeyWithValue("sessionId", sid), m)
			none["data"].(map[string]any)["sessionId"] = sid
			Expect(theirs).To(Equal(none), m)
		}
		// the owner's session was not disturbed: it takes a prompt
		Expect(alice.result(alice.call("session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "hi"}}}))).To(HaveKeyWithValue("stopReason", "end_turn"))

		bad := bob.errorOf(bob.call("session/new", map[string]any{"cwd": filepath.Join(root, "alice"), "mcpServers": []any{}}))
		Expect(bad["code"]).To(BeEquivalentTo(-32602))
		Expect(bad["message"]).To(ContainSubstring("workspace root " + filepath.Join(root, "bob")))
		link := filepath.Join(root, "bob", "escape")
		Expect(os.Symlink(filepath.Join(root, "alice"), link)).To(Succeed())
		Expect(bob.errorOf(bob.call("session/new", map[string]any{"cwd": link, "mcpServers": []any{}}))["code"]).To(BeEquivalentTo(-32602))
	})

	It("counts running prompts per principal over its connections", func() {
		release := make(chan struct{})
		p := (&scriptedProvider{}).then(func(ctx context.Context, emit func(llm.Event)) error {
			emit(llm.Event{Type: llm.EventTextDelta, Text: "slow"})
			select {
			case <-release:
			case <-ctx.Done():
			}
			emit(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
			return nil
		})
		h := newHarnessWith(Config{MaxTurnsPerUser: 1}, p)
		defer h.close()
		a1, a2, b := h.as("alice"), h.as("alice"), h.as("bob")
		cwd := GinkgoT().TempDir()
		newIn := func(x *harness) string {
			return x.result(x.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		}
		s1, s2, sb := newIn(a1), newIn(a2), newIn(b)
		prompt := func(x *harness, sid string) float64 {
			return x.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "go"}}})
		}
		running := prompt(a1, s1)
		Eventually(func() []map[string]any { return a1.out.updates() }, 5*time.Second).
			Should(ContainElement(HaveKeyWithValue("sessionUpdate", "agent_message_chunk")), "the turn runs")
		e := a2.errorOf(prompt(a2, s2))
		Expect(e["code"]).To(BeEquivalentTo(-32011))
		Expect(e["message"]).To(ContainSubstring("limit 1"))
		Expect(b.result(prompt(b, sb))).To(HaveKeyWithValue("stopReason", "end_turn"), "another principal is not held")
		close(release)
		Expect(a1.result(running)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(a2.result(prompt(a2, s2))).To(HaveKeyWithValue("stopReason", "end_turn"), "the slot came back")
	})
})

var _ = Describe("the defaults of new sessions per principal", func() {
	It("keeps each principal's last choice for its own new sessions: alice's choice leaves bob's and the home's defaults", func() {
		home := GinkgoT().TempDir()
		h := newHarnessWith(Config{Home: home}, &scriptedProvider{})
		defer h.close()
		booleans := map[string]any{"protocolVersion": 1,
			"clientCapabilities": map[string]any{"session": map[string]any{"configOptions": map[string]any{"boolean": map[string]any{}}}}}
		connect := func(user string) *harness {
			out := &recorder{}
			x := &harness{srv: h.srv, out: out, provider: h.provider,
				conn: h.srv.ConnectAs(user+"-conn", Identity{Principal: user, Remote: "127.0.0.1:1"}, out)}
			DeferCleanup(func() { x.conn.Close(time.Second) })
			x.result(x.call("initialize", booleans))
			return x
		}
		h.result(h.call("initialize", booleans))
		alice, bob := connect("alice"), connect("bob")
		cwd := GinkgoT().TempDir()
		autoCompact := func(x *harness) any {
			res := x.result(x.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
			for _, o := range res["configOptions"].([]any) {
				if o.(map[string]any)["id"] == "auto_compact" {
					return o.(map[string]any)["currentValue"]
				}
			}
			Fail("no auto_compact option")
			return nil
		}
		set := func(x *harness, on bool) {
			sid := x.result(x.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
			x.result(x.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "auto_compact", "type": "boolean", "value": on}))
		}
		Expect([]any{autoCompact(alice), autoCompact(bob), autoCompact(h)}).To(Equal([]any{true, true, true}))

		set(alice, false)
		Expect(autoCompact(alice)).To(BeFalse(), "alice's choice is her default")
		Expect(autoCompact(bob)).To(BeTrue(), "bob's default is unchanged")
		Expect(autoCompact(h)).To(BeTrue(), "the default principal's too")

		set(h, false) // the home's own user (stdio, shared token): sessionDefaults, bob's fallback
		set(bob, true)
		Expect([]any{autoCompact(alice), autoCompact(bob), autoCompact(h)}).To(Equal([]any{false, true, false}))
		set(alice, true)
		Expect([]any{autoCompact(alice), autoCompact(bob), autoCompact(h)}).To(Equal([]any{true, true, false}))

		data, err := os.ReadFile(filepath.Join(home, llm.SettingsFile))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(And(ContainSubstring("sessionDefaults:\n    auto_compact: \"false\""),
			ContainSubstring("principalDefaults:\n    alice:\n        auto_compact: \"true\"\n    bob:\n        auto_compact: \"true\"")))
	})
})

// gatedStat is the real store whose Stat of one session waits for a gate:
// a slow ownership read (a database round trip in cluster mode), for
// latency only.
type gatedStat struct {
	store.Store
	id      string
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStat) Stat(id string) (store.Meta, error) {
	if id == g.id {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.Store.Stat(id)
}

// newGatedHarness is a harness on a gatedStat store; release opens its
// gate (once).
func newGatedHarness() (*harness, *gatedStat, func()) {
	st, err := store.New(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	gated := &gatedStat{Store: st, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	var once sync.Once
	return newHarnessOn(gated, Config{}, &scriptedProvider{}), gated, func() { once.Do(func() { close(gated.gate) }) }
}

// loadBehindRead loads a closed session of h whose owner read waits for
// gated's gate; it returns once the read is under way.
func (h *harness) loadBehindRead(gated *gatedStat) (stored string, load float64) {
	cwd := GinkgoT().TempDir()
	stored = h.newSession(cwd)
	h.result(h.call("session/close", map[string]any{"sessionId": stored}))
	gated.id = stored
	load = h.call("session/load", map[string]any{"sessionId": stored, "cwd": cwd, "mcpServers": []any{}})
	Eventually(gated.entered, 5*time.Second).Should(Receive(), "the load reads the owner")
	return stored, load
}

var _ = Describe("a slow ownership read", func() {
	It("holds only the requests naming that session: the others are served meanwhile, the held ones after it in order", func() {
		h, gated, release := newGatedHarness()
		defer h.close()
		defer release()
		cwd := GinkgoT().TempDir()
		live := h.newSession(cwd)
		stored := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
		h.result(h.call("session/close", map[string]any{"sessionId": stored}))
		gated.id = stored // set before the load's read, which the channel orders

		load := h.call("session/load", map[string]any{"sessionId": stored, "cwd": cwd, "mcpServers": []any{}})
		Eventually(gated.entered, 5*time.Second).Should(Receive(), "the load reads the owner")
		setMode := h.call("session/set_mode", map[string]any{"sessionId": stored, "modeId": "plan"})

		Expect(h.result(h.call("session/prompt", textPrompt(live, "hi")))).To(HaveKeyWithValue("stopReason", "end_turn"),
			"another session's prompt is answered while the read waits")
		Expect(h.result(h.call("session/list", map[string]any{}))["sessions"]).To(HaveLen(2))
		Consistently(func() []map[string]any {
			return []map[string]any{h.out.response(load), h.out.response(setMode)}
		}, 100*time.Millisecond).Should(Equal([]map[string]any{nil, nil}), "both wait for the read")

		release()
		Expect(h.result(load)).To(HaveKey("modes"))
		Expect(h.result(setMode)).To(BeEmpty(), "run after the load, on the loaded session (not not found)")
		at := func(id float64) int {
			for i, f := range h.out.all() {
				if f["id"] == id && f["method"] == nil {
					return i
				}
			}
			return -1
		}
		Expect(at(load)).To(BeNumerically("<", at(setMode)))
	})
})

var _ = Describe("a connection closed while an ownership read waits", func() {
	It("answers the load and the prompt queued behind it before it goes (stdin EOF right after the last line)", func() {
		h, gated, release := newGatedHarness()
		defer h.srv.Shutdown()
		defer release()
		stored, load := h.loadBehindRead(gated)
		prompt := h.call("session/prompt", textPrompt(stored, "hi"))
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			h.conn.Close(5 * time.Second)
		}()
		Consistently(closed, 100*time.Millisecond).ShouldNot(BeClosed(), "the close waits for the read")
		release()
		Eventually(closed, 5*time.Second).Should(BeClosed())
		Expect(h.out.response(load)).To(HaveKey("result"), "the load is answered")
		res := h.out.response(prompt)
		Expect(res).To(HaveKey("result"), "the prompt is answered")
		Expect(res["result"]).To(HaveKeyWithValue("stopReason", BeElementOf("end_turn", "cancelled")))
	})
})

// countedStat is the real store whose Stat waits for a gate and counts the
// reads under way (the most seen at once).
type countedStat struct {
	store.Store
	gate           chan struct{}
	mu             sync.Mutex
	inFlight, most int
}

func (c *countedStat) Stat(id string) (store.Meta, error) {
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.mu.Unlock()
	<-c.gate
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return c.Store.Stat(id)
}

func (c *countedStat) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight, c.most
}

var _ = Describe("ownership reads of one connection", func() {
	It("run at most 4 at once; the others wait their turn and every load is answered", func() {
		st, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		counted := &countedStat{Store: st, gate: make(chan struct{})}
		h := newHarnessOn(counted, Config{}, &scriptedProvider{})
		defer h.close()
		var once sync.Once
		release := func() { once.Do(func() { close(counted.gate) }) }
		defer release()
		h.result(h.call("initialize", map[string]any{"protocolVersion": 1}))
		cwd := GinkgoT().TempDir()
		var loads []float64
		for i := range 12 {
			loads = append(loads, h.call("session/load", map[string]any{"sessionId": "made-up-" + itoa(i), "cwd": cwd, "mcpServers": []any{}}))
		}
		inFlight := func() int { n, _ := counted.counts(); return n }
		Eventually(inFlight, 5*time.Second).Should(Equal(4))
		Consistently(inFlight, 100*time.Millisecond).Should(Equal(4), "the others wait")
		Expect(h.out.response(loads[0])).To(BeNil())
		release()
		for i, id := range loads {
			Expect(h.errorOf(id)["data"]).To(HaveKeyWithValue("sessionId", "made-up-"+itoa(i)))
		}
		_, most := counted.counts()
		Expect(most).To(Equal(4))
	})
})

var _ = Describe("$/cancel_request of a prompt waiting for an ownership read", func() {
	It("answers it cancelled at once, and it never runs", func() {
		h, gated, release := newGatedHarness()
		defer h.close()
		defer release()
		stored, load := h.loadBehindRead(gated)
		prompt := h.call("session/prompt", textPrompt(stored, "hi"))
		kept := h.call("session/prompt", textPrompt(stored, "kept"))
		h.notify("$/cancel_request", map[string]any{"requestId": prompt})
		Expect(h.result(prompt)).To(HaveKeyWithValue("stopReason", "cancelled"), "answered while the read waits")
		Expect(h.out.response(load)).To(BeNil())

		release()
		Expect(h.result(load)).To(HaveKey("modes"))
		Expect(h.result(kept)).To(HaveKeyWithValue("stopReason", "end_turn"), "the other prompt runs")
		Expect(h.provider.requests()).To(HaveLen(1), "the cancelled prompt never ran")
		answers := 0
		for _, f := range h.out.all() {
			if f["id"] == prompt && f["method"] == nil {
				answers++
			}
		}
		Expect(answers).To(Equal(1))
	})
})

// gatedListDelete is the real store whose ListOwned and Delete wait for a
// gate: session/list and session/delete, served off the connection's
// goroutine, still under way.
type gatedListDelete struct {
	store.Store
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedListDelete) ListOwned(owner, cwd, cursor string, limit int) ([]store.Meta, string, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.ListOwned(owner, cwd, cursor, limit)
}

func (g *gatedListDelete) Delete(id string) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.Store.Delete(id)
}

var _ = Describe("a connection closed while a session/list and a session/delete are served off it", func() {
	It("answers both before it goes", func() {
		st, err := store.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		gated := &gatedListDelete{Store: st, entered: make(chan struct{}, 2), gate: make(chan struct{})}
		h := newHarnessOn(gated, Config{}, &scriptedProvider{})
		defer h.srv.Shutdown()
		var once sync.Once
		release := func() { once.Do(func() { close(gated.gate) }) }
		defer release()
		sid := h.newSession(GinkgoT().TempDir())
		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		list := h.call("session/list", map[string]any{})
		del := h.call("session/delete", map[string]any{"sessionId": sid})
		for range 2 {
			Eventually(gated.entered, 5*time.Second).Should(Receive())
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			h.conn.Close(5 * time.Second)
		}()
		Consistently(closed, 100*time.Millisecond).ShouldNot(BeClosed(), "the close waits for them")
		release()
		Eventually(closed, 5*time.Second).Should(BeClosed())
		Expect(h.out.response(list)).To(HaveKey("result"))
		Expect(h.out.response(del)).To(HaveKey("result"))
	})
})
