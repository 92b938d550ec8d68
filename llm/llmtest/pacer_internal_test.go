package llmtest

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestPacerFlushes(t *testing.T) {
	f := func(int) string { return "x" }
	cases := []struct {
		name  string
		reply Reply
		flush bool
	}{
		{"text", Reply{Text: "a b"}, true},
		{"chunks", Reply{Chunks: 10}, false},
		{"paced chunks", Reply{Chunks: 10, Delay: time.Millisecond}, true},
		{"marked chunks", Reply{Chunks: 10, ChunkFunc: f}, true},
		{"buffered marked chunks", Reply{Chunks: 10, ChunkFunc: f, Buffered: true}, false},
		{"buffered paced chunks", Reply{Chunks: 10, ChunkFunc: f, Buffered: true, Delay: time.Millisecond}, true},
	}
	for _, c := range cases {
		p := newPacer(nil, httptest.NewRecorder(), httptest.NewRequest("POST", "/", nil), &c.reply)
		if p.flush != c.flush {
			t.Errorf("%s: flush %v, want %v", c.name, p.flush, c.flush)
		}
	}
}
