package llmtest

import (
	"bytes"
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

// countingWriter counts the writes that reach the connection's side.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.ResponseRecorder.Write(b)
}

func TestBufferedChunksAreWrittenInBatches(t *testing.T) {
	w := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	reply := Reply{Chunks: 5000, ChunkFunc: func(int) string { return "x" }, Buffered: true}
	st := newStreamer(&Server{}, w, httptest.NewRequest("POST", "/", nil), &reply, "id", "m", false)
	st.run()
	st.drain()
	n := w.Body.Len()
	if max := n/batchSize + 4; w.writes > max {
		t.Errorf("%d writes for %d bytes, want at most %d", w.writes, n, max)
	}
	if got := bytes.Count(w.Body.Bytes(), []byte(`{"content":"x"}`)); got != 5000 {
		t.Errorf("%d chunks, want 5000", got)
	}
}
