package actors

import (
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
)

var _ = Describe("a streaming model call", func() {
	var (
		sent []map[string]any
		call *modelCall
	)
	texts := func() []string {
		var out []string
		for _, f := range sent {
			u := f["params"].(map[string]any)["update"].(map[string]any)
			out = append(out, u["sessionUpdate"].(string)[6:9]+":"+u["content"].(map[string]any)["text"].(string))
		}
		return out
	}
	BeforeEach(func() {
		sent = nil
		call = newModelCall("s1", true, func(data []byte) {
			var m map[string]any
			Expect(json.Unmarshal(data, &m)).To(Succeed())
			sent = append(sent, m)
		})
	})
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
		call.add(llm.Event{Type: llm.EventUsage, Usage: llm.Usage{OutputTokens: 4}})
		call.add(llm.Event{Type: llm.EventStop, StopReason: llm.StopEndTurn})
		r := call.take()
		Expect(r.msg.TextOf()).To(Equal("abcd"))
		Expect(r.usage.OutputTokens).To(Equal(int64(4)))
		Expect(r.stop).To(Equal(llm.StopEndTurn))
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

	It("streams nothing of a summary or a sub-agent's answer, but keeps it", func() {
		call.stream = false
		delta(llm.EventTextDelta, "summary", false)
		Expect(sent).To(BeEmpty())
		r := call.take()
		Expect(r.msg.TextOf()).To(Equal("summary"))
	})
})
