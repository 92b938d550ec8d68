package actors

import (
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

var _ = Describe("a streaming model call", func() {
	var (
		sent  []map[string]any
		shown []int
		call  *modelCall
	)
	textsOf := func(frames []map[string]any) []string {
		var out []string
		for _, f := range frames {
			u := f["params"].(map[string]any)["update"].(map[string]any)
			out = append(out, u["sessionUpdate"].(string)[6:9]+":"+u["content"].(map[string]any)["text"].(string))
		}
		return out
	}
	texts := func() []string { return textsOf(sent) }
	decode := func(data []byte) map[string]any {
		var m map[string]any
		Expect(json.Unmarshal(data, &m)).To(Succeed())
		return m
	}
	BeforeEach(func() {
		sent, shown = nil, nil
		call = newModelCall("s1", true, func(data []byte, n int) {
			sent = append(sent, decode(data))
			shown = append(shown, n)
		})
	})
	replay := func(from, to int) []map[string]any {
		var out []map[string]any
		for _, f := range call.shownFrames(from, to) {
			m := decode(f)
			Expect(m["params"].(map[string]any)["update"]).To(HaveKeyWithValue("messageId", call.messageID))
			out = append(out, m)
		}
		return out
	}
	delta := func(typ llm.EventType, text string, buffered bool) {
		call.add(llm.Event{Type: typ, Text: text, Buffered: buffered})
	}

	It("sends a delta at once unless the next one is already received, then joins them by kind", func() {
		delta(llm.EventTextDelta, "a", false)
		Expect(texts()).To(Equal([]string{"mes:a"}))
		delta(llm.EventTextDelta, "b", true)
		delta(llm.EventTextDelta, "c", true)
		Expect(texts()).To(HaveLen(1), "held while more is buffered")
		delta(llm.EventThinkingDelta, "t", true)
		delta(llm.EventTextDelta, "d", false)
		Expect(texts()).To(Equal([]string{"mes:a", "mes:bc", "tho:t", "mes:d"}))
		Expect(shown).To(Equal([]int{1, 3, 4, 5}), "how far the shown text goes with each chunk")
		Expect(textsOf(replay(0, 3))).To(Equal([]string{"mes:abc"}), "the text shown up to a chunk, from the assembler")
		Expect(textsOf(replay(1, 5))).To(Equal([]string{"mes:bc", "tho:t", "mes:d"}))
		call.add(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{OutputTokens: 4}})
		call.add(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
		r := call.take()
		Expect(r.msg.TextOf()).To(Equal("abcd"))
		Expect(r.usage.OutputTokens).To(Equal(int64(4)))
		Expect(r.stop).To(Equal(llm.StopEndTurn))
		Expect(textsOf(replay(2, 5))).To(Equal([]string{"mes:c", "tho:t", "mes:d"}), "and from the taken message")
	})

	It("replays a long text in chunks of at most 64 KiB, cut between characters", func() {
		for range 30000 {
			delta(llm.EventTextDelta, "é€", true)
		}
		call.end()
		total := 0
		var joined string
		for _, t := range textsOf(replay(0, shown[len(shown)-1])) {
			Expect(len(t) - 4).To(BeNumerically("<=", maxMergedChunk))
			joined += t[4:]
			total++
		}
		Expect(total).To(BeNumerically(">=", 2))
		Expect(joined).To(Equal(strings.Repeat("é€", 30000)))
	})

	It("sends what is held when taken (a cancel), and nothing after", func() {
		delta(llm.EventTextDelta, "seen ", true)
		r := call.take()
		Expect(texts()).To(Equal([]string{"mes:seen "}))
		Expect(r.msg.TextOf()).To(Equal("seen "))
		delta(llm.EventTextDelta, "late", false)
		call.end()
		Expect(texts()).To(HaveLen(1))
	})

	It("keeps a joined chunk under 64 KiB of text", func() {
		for range 10000 {
			delta(llm.EventTextDelta, "0123456789", true)
		}
		call.end()
		total := 0
		for _, f := range sent {
			n := len(f["params"].(map[string]any)["update"].(map[string]any)["content"].(map[string]any)["text"].(string))
			Expect(n).To(BeNumerically("<=", maxMergedChunk+10))
			total += n
		}
		Expect(total).To(Equal(100000))
		Expect(len(sent)).To(BeNumerically(">=", 2))
	})

	It("builds a frame in one given back once written, never in one still held", func() {
		var frames [][]byte
		call.send = func(data []byte, _ int) { frames = append(frames, data) }
		written := func(i int) { Frame{Data: frames[i], pool: call.frames}.Written() }
		delta(llm.EventTextDelta, "first", false)
		delta(llm.EventTextDelta, "second", false)
		Expect(&frames[1][0]).NotTo(BeIdenticalTo(&frames[0][0]), "the first is still held")
		written(0)
		delta(llm.EventTextDelta, "third", false)
		Expect(&frames[2][0]).To(BeIdenticalTo(&frames[0][0]), "the first came back")
		Expect(decode(frames[1])["params"]).To(HaveKeyWithValue("update", HaveKeyWithValue("content", HaveKeyWithValue("text", "second"))))
		Expect(decode(frames[2])["params"]).To(HaveKeyWithValue("update", HaveKeyWithValue("content", HaveKeyWithValue("text", "third"))))
		written(1)
		delta(llm.EventTextDelta, strings.Repeat("long ", 100), false)
		Expect(&frames[3][0]).NotTo(BeIdenticalTo(&frames[1][0]), "too small for it")
		call.take()
		written(3)
		Expect(call.frames.get(1)).To(BeNil(), "nothing is kept once the call is over")
	})

	It("keeps at most maxFreeFrames given back, the larger ones", func() {
		pool := &framePool{}
		for i := range maxFreeFrames + 1 {
			pool.put(make([]byte, 0, 100+i))
		}
		pool.put(make([]byte, 0, 50))
		pool.put(make([]byte, 0, 2*maxScratch))
		var caps []int
		for b := pool.get(0); b != nil; b = pool.get(0) {
			caps = append(caps, cap(b))
		}
		Expect(caps).To(HaveLen(maxFreeFrames))
		for _, c := range []int{100, 50, 2 * maxScratch} {
			Expect(caps).NotTo(ContainElement(c), "the smallest and the too large are let go")
		}
		Expect(pool.get(0)).To(BeNil())
	})

	It("streams nothing of a summary or a sub-agent's answer, but keeps it", func() {
		call.stream = false
		delta(llm.EventTextDelta, "summary", false)
		Expect(sent).To(BeEmpty())
		r := call.take()
		Expect(r.msg.TextOf()).To(Equal("summary"))
	})
})

var _ = Describe("chunk frames of a session with one client", func() {
	It("can be given back once written", func() {
		p := &scriptedProvider{}
		h := newHarness(p)
		defer h.close()
		sid := h.newSession(GinkgoT().TempDir())
		p.then(say("one ", "two ", "three"))
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "hi")))["stopReason"]).To(Equal("end_turn"))
		chunks, givable := h.out.chunkFrames()
		Expect(chunks).To(Equal(3))
		Expect(givable).To(Equal(3))
	})
})

var _ = Describe("the running message a session keeps for a load", func() {
	It("keeps a frame between two chunks of a call in its place, and of the chunks only how far they went", func() {
		s := &session{}
		s.turn.run(nil)
		s.turn.soFar.active = &ActiveTurn{}
		var call *modelCall
		call = newModelCall("s1", true, func(data []byte, shown int) {
			s.keepSoFar(&outbound{frame: Frame{Data: data}, call: call, shown: shown})
		})
		notice := protocol.EncodeChunkNotification("s1", protocol.UpdateAgentMessageChunk, "[notice]")
		call.add(llm.Event{Type: llm.EventTextDelta, Text: "one "})
		call.add(llm.Event{Type: llm.EventTextDelta, Text: "two "})
		s.keepSoFar(&outbound{frame: Frame{Data: notice}})
		call.add(llm.Event{Type: llm.EventTextDelta, Text: "three"})
		Expect(s.turn.soFar.entries).To(HaveLen(3), "the first two chunks are one entry")
		Expect(s.turn.soFar.bytes).To(Equal(len(notice)), "no chunk frame is kept")

		replay := func() string {
			var text string
			for _, e := range s.turn.soFar.entries {
				frames := [][]byte{e.frame}
				if e.call != nil {
					frames = e.call.shownFrames(e.from, e.to)
				}
				for _, f := range frames {
					var m struct {
						Params struct {
							Update struct {
								Content struct{ Text string } `json:"content"`
							} `json:"update"`
						} `json:"params"`
					}
					Expect(json.Unmarshal(f, &m)).To(Succeed())
					text += m.Params.Update.Content.Text + "|"
				}
			}
			return text
		}
		Expect(replay()).To(Equal("one two |[notice]|three|"))
		call.take()
		Expect(replay()).To(Equal("one two |[notice]|three|"), "the same from the taken message")
		s.messageRecorded(&llm.Message{})
		Expect(s.turn.soFar.entries).To(BeEmpty())
	})
})
