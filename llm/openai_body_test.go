package llm

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/sjson"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// bodyCase is a request and the provider settings it is built with.
type bodyCase struct {
	name string
	cfg  Config
	req  *Request
}

func bodyCases() []bodyCase {
	tricky := "a \"q\" \\ <b>&amp; \u2028\u2029 é 😀 \x00\x01\x1f\x7f \b\f\n\r\t \xff\xc3 \xed\xa0\x80 end"
	tools := []ToolSpec{
		{Name: "read", Description: "Reads <a> & b \u2028", InputSchema: []byte(`{ "type": "object",
			"properties": {"path": {"type": "string", "maximum": 1e3}} }`)},
		{Name: "bare"},
		{Name: "empty", Description: "", InputSchema: []byte("  ")},
	}
	conversation := []Message{
		{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}, {Type: BlockText, Text: tricky}}},
		{Role: RoleAssistant, Content: []Block{{Type: BlockThinking, Text: "old thoughts"}, {Type: BlockText, Text: "ok"},
			{Type: BlockToolUse, ToolCallID: "c1", Name: "read", Input: []byte(`{"path": "a<b>"}`)}}},
		{Role: RoleUser, Content: []Block{{Type: BlockToolResult, ToolCallID: "c1", Text: tricky},
			{Type: BlockText, Text: "before"}, {Type: BlockImage, MediaType: "image/png", Data: "AAAA"},
			{Type: BlockText, Text: "after"}, {Type: BlockSummary, Text: "summary"}, {Type: BlockText, Text: "tail"}}},
		{Role: RoleAssistant, Content: []Block{{Type: BlockToolUse, ToolCallID: "", Name: "", Input: nil},
			{Type: BlockToolUse, ToolCallID: "c3", Name: "x", Input: []byte("  ")}}},
		{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/jpeg", Data: "BBBB"}}},
		{Role: RoleAssistant, Content: []Block{{Type: BlockThinking, Text: "now " + tricky},
			{Type: BlockToolUse, ToolCallID: "c4", Name: "read", Input: []byte(`{}`)}}},
		{Role: RoleUser, Content: []Block{{Type: BlockToolResult, ToolCallID: "c4", Text: ""}}},
		{Role: RoleAssistant},
	}
	base := Config{Provider: "openai_compatible", BaseURL: "http://127.0.0.1:1/v1", APIKey: "k", Model: "m"}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	return []bodyCase{
		{"empty", base, &Request{}},
		{"system only", base, &Request{System: tricky}},
		{"system and per-turn system", base, &Request{System: "stable", SystemTurn: tricky}},
		{"per-turn system only", base, &Request{SystemTurn: "turn"}},
		{"short prompt with tools", with(func(c *Config) { c.MaxTokens = 4096 }),
			&Request{System: "You are an agent.", Messages: conversation[:1], Tools: tools}},
		{"conversation", base, &Request{Model: "other <model>", System: "s", Messages: conversation, Tools: tools[:1], MaxTokens: 7}},
		{"openai preset, effort", with(func(c *Config) { c.Provider = "openai"; c.Model = "o3-mini"; c.MaxTokens = 100 }),
			&Request{Messages: conversation, ThinkingBudget: 20000}},
		{"dashscope thinking (extras)", with(func(c *Config) { c.Provider = "dashscope" }),
			&Request{Messages: conversation, Tools: tools, ThinkingBudget: 1000}},
		{"openrouter thinking (extras)", with(func(c *Config) { c.Provider = "openrouter" }),
			&Request{Messages: conversation[:2], ThinkingBudget: 5000}},
	}
}

func newBodyProvider(t *testing.T, cfg Config) *openAIProvider {
	t.Helper()
	p, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.(*openAIProvider)
}

// sdkBody is what the SDK's NewStreaming sends for the call: its encoding
// of the params, and "stream":true set with sjson as NewStreaming does
// (option.WithJSONSet).
func sdkBody(t *testing.T, c *openAICall) []byte {
	t.Helper()
	b, err := c.params().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if b, err = sjson.SetBytes(b, "stream", true); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenAIBodyIsTheSDKs: the provider's own encoding of a request is
// byte for byte the SDK's, for every shape the provider builds and strings
// that need escaping.
func TestOpenAIBodyIsTheSDKs(t *testing.T) {
	for _, tc := range bodyCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := newBodyProvider(t, tc.cfg)
			c, err := p.call(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tc.name, "(extras)") != (c.extras != nil) {
				t.Fatalf("extras %v", c.extras)
			}
			got, err := c.body()
			if err != nil {
				t.Fatal(err)
			}
			if want := sdkBody(t, c); !bytes.Equal(got, want) {
				t.Fatalf("body differs from the SDK's:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestOpenAIBodyRandomStrings compares the encodings over random strings:
// every ASCII byte, invalid UTF-8, separators, multi-byte runes.
func TestOpenAIBodyRandomStrings(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"\u2028", "\u2029", "é", "😀", "\xff", "\xc3", "\xe2\x80", "\xed\xa0\x80", "<", ">", "&", "\"", "\\", "a", " "}
	str := func() string {
		var b strings.Builder
		for range rnd.IntN(40) {
			if rnd.IntN(2) == 0 {
				b.WriteByte(byte(rnd.IntN(128)))
			} else {
				b.WriteString(pieces[rnd.IntN(len(pieces))])
			}
		}
		return b.String()
	}
	p := newBodyProvider(t, Config{Provider: "openai_compatible", BaseURL: "http://127.0.0.1:1/v1", APIKey: "k", Model: "m"})
	for i := range 300 {
		req := &Request{Model: str() + "m", System: str(), Messages: []Message{
			{Role: RoleUser, Content: []Block{{Type: BlockText, Text: str()}, {Type: BlockImage, MediaType: str(), Data: str()}, {Type: BlockText, Text: str()}}},
			{Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: str()}, {Type: BlockToolUse, ToolCallID: str(), Name: str(), Input: []byte(str())}}},
			{Role: RoleUser, Content: []Block{{Type: BlockToolResult, ToolCallID: str(), Text: str()}, {Type: BlockSummary, Text: str()}}},
		}, Tools: []ToolSpec{{Name: str(), Description: str()}}}
		c, err := p.call(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.body()
		if err != nil {
			t.Fatal(err)
		}
		if want := sdkBody(t, c); !bytes.Equal(got, want) {
			t.Fatalf("case %d: body differs from the SDK's:\n got %q\nwant %q", i, got, want)
		}
	}
}

// TestOpenAIRequestOnTheWire: what the model server receives — body and
// headers — is what the SDK sends for its own encoding of the request.
func TestOpenAIRequestOnTheWire(t *testing.T) {
	srv := llmtest.Start(t)
	for _, tc := range bodyCases() {
		t.Run(tc.name, func(t *testing.T) {
			srv.Reset()
			cfg := tc.cfg
			cfg.BaseURL = srv.URL()
			p := newBodyProvider(t, cfg)
			ctx := context.Background()
			if err := p.Stream(ctx, tc.req, func(Event) {}); err != nil {
				t.Fatal(err)
			}
			c, err := p.call(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var resp *http.Response
			st := p.chat.NewStreaming(ctx, c.params(), option.WithResponseInto(&resp))
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = st.Close()
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			ours, sdks := reqs[0], reqs[1]
			if !bytes.Equal(ours.Body, sdks.Body) {
				t.Fatalf("body differs:\nours %s\n sdk %s", ours.Body, sdks.Body)
			}
			if !bytes.Contains(ours.Body, []byte(`"stream":true`)) {
				t.Fatalf("no stream:true in %s", ours.Body)
			}
			if !reflect.DeepEqual(ours.Header, sdks.Header) {
				t.Fatalf("headers differ:\nours %v\n sdk %v", ours.Header, sdks.Header)
			}
		})
	}
}

// TestToolCacheVariants: definitions of one name that differ in
// description or schema each get their own encoding, also when they
// alternate and when more than maxToolVariants of them come and go.
func TestToolCacheVariants(t *testing.T) {
	var c toolCache
	spec := func(i int) ToolSpec {
		return ToolSpec{Name: "read", Description: "reads " + strconv.Itoa(i%3),
			InputSchema: []byte(`{"type":"object","maxProperties":` + strconv.Itoa(i) + `}`)}
	}
	for round := range 3 {
		for i := range 2 * maxToolVariants {
			raw, err := c.get(spec(i))
			if err != nil {
				t.Fatal(err)
			}
			want := `{"function":{"name":"read","description":"reads ` + strconv.Itoa(i%3) +
				`","parameters":{"type":"object","maxProperties":` + strconv.Itoa(i) + `}},"type":"function"}`
			if string(raw) != want {
				t.Fatalf("round %d, variant %d: %s, want %s", round, i, raw, want)
			}
		}
	}
	if n := len(c.m["read"]); n != maxToolVariants || c.n != maxToolVariants {
		t.Fatalf("%d variants kept (count %d), want %d", n, c.n, maxToolVariants)
	}
}
