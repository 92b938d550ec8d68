package llm

import (
	"io"
	"testing"
)

// pieces is a reader returning one piece per Read, as a socket returns what
// has arrived.
type pieces []string

func (p *pieces) Read(b []byte) (int, error) {
	if len(*p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, (*p)[0])
	(*p)[0] = (*p)[0][n:]
	if (*p)[0] == "" {
		*p = (*p)[1:]
	}
	return n, nil
}

func TestReadSSETellsWhetherTheNextEventIsBuffered(t *testing.T) {
	body := pieces{
		"data: A\n\ndata: B\n\ndata: C-starts", // C is incomplete: reading it waits
		"-and-ends\n\n",
		"data: D\r\n\r\n",
	}
	type got struct {
		data string
		more bool
	}
	var evs []got
	err := readSSE(&body, func(_, data []byte, more bool) (bool, error) {
		evs = append(evs, got{string(data), more})
		return false, nil
	})
	if err != io.EOF {
		t.Fatal(err)
	}
	want := []got{{"A", true}, {"B", false}, {"C-starts-and-ends", false}, {"D", false}}
	if len(evs) != len(want) {
		t.Fatalf("%+v", evs)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
}

func TestDecodedEventsCarryBuffered(t *testing.T) {
	chunk := func(text string) string {
		return `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + text + `"},"finish_reason":null}]}` + "\n\n"
	}
	finish := `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	body := pieces{chunk("a") + chunk("b"), chunk("c"), finish + "data: [DONE]\n\n"}
	var texts []string
	var buffered []bool
	err := decodeOpenAIStream(&body, func(ev Event) {
		if ev.Type == EventTextDelta {
			texts = append(texts, ev.Text)
			buffered = append(buffered, ev.Buffered)
		}
		if ev.Type == EventStop && ev.Buffered {
			t.Error("the stop event says more is buffered")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) != 3 || !buffered[0] || buffered[1] || buffered[2] {
		t.Fatalf("texts %q buffered %v, want a (buffered), b, c", texts, buffered)
	}
}
