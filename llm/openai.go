// OpenAI-compatible Chat Completions provider ("openai_compatible").
//
// SDK decision: requests go through the official SDK,
// github.com/openai/openai-go/v3 (typed params, auth, base URL, error
// decoding into *openai.Error). It can carry DeepSeek/Qwen reasoning_content
// both ways: SetExtraFields puts it on assistant messages, and the stream's
// delta fields are read from raw JSON, so no other SDK is needed.
//
// The response stream is decoded here rather than by the SDK's
// ssestream/ChatCompletionChunk path, which measured ~25µs and ~58
// allocations per chunk (reflection over every field). The SSE reader
// (openai_stream.go, openai_fastchunk.go) takes the common text/reasoning
// chunk with one strict hand scan (fastChunk, ~0.35µs) and everything else
// with gjson (already an SDK dependency; ~0.7µs when it walked every chunk):
// ~0.75–1µs and ~1.15 allocations per chunk over HTTP, the one allocation
// being the delta text.
// The request is sent with the SDK's ChatCompletionService.New (its options,
// auth, errors), the body given as bytes; the raw *http.Response is its result.
//
// Per-preset request quirks (see Preset):
//   - output cap: max_completion_tokens for the openai preset and any base
//     URL on api.openai.com (OpenAI's reasoning models reject max_tokens),
//     max_tokens everywhere else (what compatible servers know);
//   - thinking (Request.ThinkingBudget, else Config.ThinkingBudget, > 0):
//     DashScope gets enable_thinking + thinking_budget, OpenAI reasoning
//     models and Gemini reasoning_effort, OpenRouter reasoning.max_tokens,
//     Zhipu thinking.type=enabled; others nothing (the model decides);
//   - reasoning_content (DeepSeek/Qwen) is sent back on the assistant
//     messages of the current turn (after the last user message), where
//     DeepSeek's thinking mode needs it during tool calls, and dropped from
//     earlier turns, which DeepSeek asks clients not to resend;
//   - usage: stream_options.include_usage is always asked for; a server that
//     ignores it and puts usage on a chunk with choices, or sends none, is
//     handled (the last usage seen is reported; none = no EventUsage).
//
// Files: openai.go the provider and its Stream; openai_request.go the call
// built from a Request; openai_body.go its encoding; openai_tools.go the
// tool definitions' cache; openai_errors.go failed requests; openai_stream.go
// and openai_fastchunk.go the response stream.

package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
)

func init() { Register(ProtocolOpenAI, NewOpenAI) }

// DefaultOpenAIBaseURL is used when Config.BaseURL is empty.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// openAIProvider streams Chat Completions. It is safe for concurrent use.
type openAIProvider struct {
	cfg    Config
	preset Preset
	// chat sends the requests, with the SDK options NewOpenAI gives it
	// (base URL, HTTP client, retries, key). Not an openai.Client: its
	// fields are every service of the API, and holding one links all their
	// methods (5.7 MB of text, 9.7 MB of rodata, ~4 MiB more of the binary
	// mapped at start).
	chat openai.ChatCompletionService
	// maxCompletion: send max_completion_tokens instead of max_tokens.
	maxCompletion bool
	tools         toolCache
	warm          *warmConns
}

// maxIdleModelConns bounds the idle connections kept to the model host.
const maxIdleModelConns = 256

// newHTTPClient is the client both providers use, for requests to base,
// and the connections it dials ahead (nil if the default transport is not
// net/http's).
func newHTTPClient(base string) (*http.Client, *warmConns) {
	var transport http.RoundTripper = http.DefaultTransport
	var warm *warmConns
	if t, ok := transport.(*http.Transport); ok {
		t = t.Clone()
		// A server that accepts but never answers fails instead of hanging
		// (the idle timeout usually fires first).
		t.ResponseHeaderTimeout = 10 * time.Minute
		// Every session of the server talks to the same model host: keep a
		// connection per concurrent call for the next one (the default is
		// 2, so most model calls would dial and handshake again).
		t.MaxIdleConnsPerHost = maxIdleModelConns
		if t.DialContext != nil {
			warm = newWarmConns(t.DialContext, base, t.Proxy)
			t.DialContext = dialAhead(warm.DialContext)
		}
		transport = t
	}
	return &http.Client{Transport: transport}, warm
}

// NewOpenAI builds the OpenAI-compatible provider. A missing API key is not an
// error here: Stream reports ErrNoCredentials so the agent can ask for auth.
// The provider does not retry; New wraps it in WithRetry.
func NewOpenAI(cfg Config) (Provider, error) {
	cfg = cfg.resolved()
	base := cfg.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	preset, _ := cfg.Preset()
	// NewChatCompletionService, unlike openai.NewClient, ignores OPENAI_*
	// environment variables: only LoadConfig's sources configure this provider.
	hc, warm := newHTTPClient(base)
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		// Retries belong to WithRetry, which knows whether output was shown.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	p := &openAIProvider{cfg: cfg, preset: preset, chat: openai.NewChatCompletionService(opts...), warm: warm}
	p.maxCompletion = preset.MaxCompletionTokens || isOpenAIHost(base)
	return p, nil
}

// isOpenAIHost: base is OpenAI's own API (whatever the preset says).
func isOpenAIHost(base string) bool {
	u, err := url.Parse(base)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// thinkingStyle is how the configured server takes reasoning: the
// preset's style, and OpenAI's reasoning_effort for a preset without one
// that talks to OpenAI itself (openai_compatible at api.openai.com, or a
// preset that sends max_completion_tokens). One rule for the request
// (openAIProvider.thinking) and for offering the option (TakesThoughtLevel).
func (c Config) thinkingStyle() (Preset, ThinkingStyle) {
	cfg := c.resolved()
	p, _ := cfg.Preset()
	base := cfg.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	if p.Thinking == ThinkingNone && (p.MaxCompletionTokens || isOpenAIHost(base)) {
		return p, ThinkingEffort
	}
	return p, p.Thinking
}

// Warm implements Warmer.
func (p *openAIProvider) Warm() {
	if p.cfg.HasCredentials() {
		p.warm.Warm()
	}
}

// Stream implements Provider.
func (p *openAIProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	if !p.cfg.HasCredentials() {
		return ErrNoCredentials
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	call, err := p.call(req)
	if err != nil {
		return err
	}
	body, err := call.body()
	if err != nil {
		return err
	}
	return streamCall(ctx, "openai_compatible", p.cfg.Retry.idleTimeout(), p.warm,
		func(rctx context.Context, resp **http.Response) openedStream {
			// The request ChatCompletionService.NewStreaming sends, byte for
			// byte (TestOpenAIRequestOnTheWire): the same path, options and
			// Authorization header, the body encoded already with the
			// "stream":true NewStreaming sets with sjson (see
			// openAICall.body). New with our body as bytes and the raw
			// response asked for sends them as they are: no copy of the body
			// to set a field, no event decoder that is not used.
			_, err := p.chat.New(rctx, bodyGivenParams,
				option.WithRequestBody("application/json", body), option.WithResponseBodyInto(resp))
			return executed{err: err, resp: resp}
		},
		p.requestError,
		func(body io.Reader) error { return decodeOpenAIStreamText(body, emit, borrowsText(ctx)) },
		p.redact)
}

// bodyGivenParams stand for a request whose body option.WithRequestBody
// gives: the SDK encodes them (before the option replaces the encoding) as
// the two bytes {}, where zero params cost a reflection walk over ~40 fields.
var bodyGivenParams = param.Override[openai.ChatCompletionNewParams](json.RawMessage(`{}`))

// executed is a request sent with the SDK's ChatCompletionService.New, as
// an openedStream: its error, and the response body to close.
type executed struct {
	err  error
	resp **http.Response
}

func (e executed) Err() error { return e.err }

func (e executed) Close() error {
	if r := *e.resp; r != nil && r.Body != nil {
		return r.Body.Close()
	}
	return nil
}
