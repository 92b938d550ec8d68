package llm

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// The allocation guards of issue 30: what one streamed model delta costs to
// decode, pinned at its value, so that a change adding an allocation per
// delta fails here with the number (and one removing one asks for the pin to
// follow). Measured as the difference between a stream of 2n and one of n
// deltas, so the per-stream cost (buffers, the final usage) cancels out.
const (
	allocsPerOpenAIDelta    = 0
	allocsPerAnthropicDelta = 0
)

func TestAllocsPerDeltaDecoded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation guard")
	}
	for _, c := range []struct {
		name, path, body string
		decode           func(io.Reader, func(Event)) error
		pin              int
	}{
		{"openai", "/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, decodeOpenAIStream, allocsPerOpenAIDelta},
		{"anthropic", "/messages", `{"model":"m","max_tokens":10,"stream":true,"messages":[]}`, decodeAnthropicStream, allocsPerAnthropicDelta},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 2000
			per := (decodeAllocs(t, c.path, c.body, 2*n, c.decode) - decodeAllocs(t, c.path, c.body, n, c.decode)) / n
			checkPin(t, "one "+c.name+" delta decoded", per, c.pin)
		})
	}
}

// decodeAllocs is the allocations of decoding a recorded stream of chunks
// text deltas, the recording read from memory.
func decodeAllocs(t *testing.T, path, body string, chunks int, decode func(io.Reader, func(Event)) error) float64 {
	srv := llmtest.Start(t)
	srv.SetDefault(llmtest.Reply{Chunks: chunks, ChunkText: "token "})
	data := recordStream(t, srv, path, body)
	r := bytes.NewReader(data)
	seen := 0 // bytes of text: the decoder may join deltas
	emit := func(e Event) {
		if e.Type == EventTextDelta {
			seen += len(e.Text)
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		r.Reset(data)
		seen = 0
		if err := decode(r, emit); err != nil {
			t.Fatal(err)
		}
	})
	if seen != chunks*len("token ") {
		t.Fatalf("decoded %d bytes of text of %d", seen, chunks*len("token "))
	}
	return allocs
}

// checkPin fails when the measured allocations per event, rounded, are not
// the pinned figure: more is a regression, fewer is a gain the pin must
// record so that it cannot drift back up unseen.
func checkPin(t *testing.T, what string, per float64, pin int) {
	t.Helper()
	if got := int(math.Round(per)); got != pin {
		t.Errorf("%s: %.2f allocations, pinned at %d: a change moved the cost per event; if it is meant to, set the pin to %d (a rise wants its profile, docs/performance.md)", what, per, pin, got)
	}
	t.Logf("%s: %.2f allocations (pinned at %d)", what, per, pin)
}

// recordStream is the body of srv's answer to a streaming request.
func recordStream(t *testing.T, srv *llmtest.Server, path, body string) []byte {
	t.Helper()
	res, err := http.Post(srv.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return data
}
