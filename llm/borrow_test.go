package llm

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// TestBorrowedTextDecodesAsCopied: with BorrowText the decoders pass delta
// text aliasing their read buffer; an emit that copies it gets the events
// of the copying decoders, read in small pieces so the buffer's bytes move
// and are overwritten between events.
func TestBorrowedTextDecodesAsCopied(t *testing.T) {
	srv := llmtest.Start(t)
	var chunks []string
	for i := range 300 {
		chunks = append(chunks, strings.Repeat(string(rune('a'+i%26)), 1+i%40), "é\u2028", `q"\`, "\n")
	}
	srv.SetDefault(llmtest.Reply{Thinking: "think, then think again", TextChunks: chunks})
	for _, c := range []struct {
		name, path, body string
		decode           func(io.Reader, func(Event), bool) error
	}{
		{"openai", "/chat/completions", `{"model":"m","stream":true,"messages":[]}`, decodeOpenAIStreamText},
		{"anthropic", "/messages", `{"model":"m","max_tokens":10,"stream":true,"messages":[]}`, decodeAnthropicStreamText},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := recordStream(t, srv, c.path, c.body)
			run := func(borrow bool) []Event {
				var evs []Event
				var body pieces
				for rest := string(data); rest != ""; {
					n := min(len(rest), 7+len(body)%50)
					body, rest = append(body, rest[:n]), rest[n:]
				}
				err := c.decode(&body, func(ev Event) {
					ev.Text = strings.Clone(ev.Text)
					evs = append(evs, ev)
				}, borrow)
				if err != nil {
					t.Fatal(err)
				}
				return evs
			}
			copied, borrowed := run(false), run(true)
			if len(copied) < len(chunks) || !reflect.DeepEqual(copied, borrowed) {
				t.Fatalf("borrowed text decoded differently:\n%+v\n%+v", borrowed, copied)
			}
		})
	}
}
