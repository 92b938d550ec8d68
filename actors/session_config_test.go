package actors

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("changing a session's mode and model", func() {
	// optionUpdates are the mode and config option updates of session sid
	// that h received.
	optionUpdates := func(h *harness, sid string) []map[string]any {
		var out []map[string]any
		for _, f := range h.out.all() {
			if f["method"] != "session/update" {
				continue
			}
			params := f["params"].(map[string]any)
			u := params["update"].(map[string]any)
			if params["sessionId"] == sid && (u["sessionUpdate"] == "current_mode_update" || u["sessionUpdate"] == "config_option_update") {
				out = append(out, u)
			}
		}
		return out
	}
	current := func(id string) func(u map[string]any) any {
		return func(u map[string]any) any {
			for _, o := range u["configOptions"].([]any) {
				if o.(map[string]any)["id"] == id {
					return o.(map[string]any)["currentValue"]
				}
			}
			return nil
		}
	}

	It("tells every client of the session the same with /mode and /model as with session/set_config_option", func() {
		s := newSessionHarness(&scriptedProvider{}, GinkgoT().TempDir(), func(c *Config) { c.Models = []string{"m", "m2"} })
		defer s.close()
		a, b := s.connect(), s.connect()
		cwd := GinkgoT().TempDir()
		open := func() string {
			sid := a.result(a.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))["sessionId"].(string)
			b.result(b.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}))
			return sid
		}
		bySlash, byOption := open(), open()

		Expect(a.result(a.call("session/prompt", textPrompt(bySlash, "/mode plan")))).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(a.result(a.call("session/prompt", textPrompt(bySlash, "/model m2")))).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(a.result(a.call("session/prompt", textPrompt(bySlash, "/model m2")))).To(HaveKeyWithValue("stopReason", "end_turn"), "no change, nothing told")
		for _, set := range [][2]string{{"mode", "plan"}, {"model", "m2"}, {"model", "m2"}} {
			res := a.result(a.call("session/set_config_option", map[string]any{"sessionId": byOption, "configId": set[0], "value": set[1]}))
			Expect(res["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", set[0]), HaveKeyWithValue("currentValue", set[1]))))
		}

		want := HaveExactElements(
			And(HaveKeyWithValue("sessionUpdate", "current_mode_update"), HaveKeyWithValue("currentModeId", "plan")),
			And(HaveKeyWithValue("sessionUpdate", "config_option_update"), WithTransform(current("mode"), Equal("plan")),
				WithTransform(current("model"), Equal("m"))),
			And(HaveKeyWithValue("sessionUpdate", "config_option_update"), WithTransform(current("model"), Equal("m2"))),
		)
		for _, h := range []*harness{a, b} {
			Eventually(func() []map[string]any { return optionUpdates(h, bySlash) }, 2*time.Second).Should(want)
			Eventually(func() []map[string]any { return optionUpdates(h, byOption) }, 2*time.Second).Should(want)
			Consistently(func() []map[string]any { return optionUpdates(h, byOption) }, 50*time.Millisecond).
				Should(Equal(optionUpdates(h, bySlash)), "the same updates either way")
		}
	})

	It("tells the clients before it answers: session/set_mode, session/set_config_option, and /mode, whose answer ends its turn", func() {
		h := newHarnessWith(Config{Models: []string{"m", "m2"}}, &scriptedProvider{})
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		// before reports whether an update of kind comes after the last
		// answer h got but before the answer to id.
		before := func(id float64, kind string) bool {
			seen := false
			for _, f := range h.out.all() {
				switch {
				case f["id"] == id && f["method"] == nil:
					return seen
				case f["id"] != nil && f["method"] == nil:
					seen = false // an answer to an earlier request
				case f["method"] == "session/update":
					seen = seen || f["params"].(map[string]any)["update"].(map[string]any)["sessionUpdate"] == kind
				}
			}
			return false
		}
		id := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		h.result(id)
		Expect(before(id, "current_mode_update")).To(BeTrue())
		Expect(before(id, "config_option_update")).To(BeTrue())
		id = h.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "m2"})
		h.result(id)
		Expect(before(id, "config_option_update")).To(BeTrue())
		id = h.call("session/prompt", textPrompt(sid, "/mode default"))
		Expect(h.result(id)).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(before(id, "current_mode_update")).To(BeTrue())
		Expect(before(id, "config_option_update")).To(BeTrue())
		Expect(before(id, "agent_message_chunk")).To(BeTrue())
		e := h.errorOf(h.call("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "nope"}))
		Expect(e["code"]).To(BeEquivalentTo(-32602))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "/model nope")))).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(h.out.allUpdates()[len(h.out.allUpdates())-1]["content"]).To(HaveKeyWithValue("text", ContainSubstring(`Unknown model "nope"`)))
	})

	It("serves the unstable session/set_model as the model option: {} after the update, the next call on that model", func() {
		p := (&scriptedProvider{}).then(say("ok"))
		h := newHarnessWith(Config{Models: []string{"m", "m2"}}, p)
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		id := h.call("session/set_model", map[string]any{"sessionId": sid, "modelId": "m2"})
		Expect(h.result(id)).To(BeEmpty())
		updates := optionUpdates(h, sid)
		Expect(updates).To(HaveLen(1))
		Expect(updates[0]).To(WithTransform(current("model"), Equal("m2")))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "hi")))).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(p.requests()[0].Model).To(Equal("m2"))

		for _, bad := range []map[string]any{{"sessionId": sid, "modelId": "nope"}, {"sessionId": sid}} {
			e := h.errorOf(h.call("session/set_model", bad))
			Expect(e["code"]).To(BeEquivalentTo(-32602))
			Expect(e["data"]).To(HaveKey("modelId"))
		}
		Expect(h.errorOf(h.call("session/set_model", map[string]any{"sessionId": "gone", "modelId": "m"}))["code"]).
			To(BeEquivalentTo(-32002), "an unknown session, as for the other session methods")
		Expect(optionUpdates(h, sid)).To(HaveLen(1), "a refused choice tells nothing")
	})
})
