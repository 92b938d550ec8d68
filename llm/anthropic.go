// Anthropic Messages provider (protocol "anthropic"; presets anthropic and
// anthropic_compatible).
//
// SDK decision, measured the same way as for OpenAI (BenchmarkAnthropicStream
// vs BenchmarkAnthropicSDKDecode): requests go through the official SDK,
// github.com/anthropics/anthropic-sdk-go/v2 (typed params, auth headers,
// base URL, error decoding into *anthropic.Error), with its retries off. The
// response stream is read here: the SDK's ssestream/MessageStreamEventUnion
// decoder reflects over every field of every event (see the numbers in the
// benchmark file); the gjson reader in anthropic_stream.go picks the fields
// we use. Requests are built in anthropic_request.go, errors mapped in
// anthropic_errors.go.
//
// Wire details:
//   - thinking blocks are sent back with their signature, redacted_thinking
//     blocks with their data, in the order the turn stored them; a thinking
//     block without a signature (a cancelled stream's partial) is dropped,
//     since the API rejects it;
//   - RoleTool messages become a user message of tool_result blocks;
//     consecutive messages of one role are merged into one;
//   - Request.ThinkingBudget (else Config.ThinkingBudget) > 0 sends
//     thinking {type: enabled, budget_tokens} (at least 1024, and max_tokens
//     is raised above it when needed);
//   - the system prompt's stable start (Request.System) and the last block
//     of the last message carry cache_control breakpoints, so the
//     conversation prefix is cached; Request.SystemTurn is a second system
//     block after the first breakpoint;
//   - the anthropic preset talks the SDK's API version and auth; every other
//     preset (anthropic_compatible servers) gets anthropic-version 2023-06-01
//     and the key in both x-api-key and Authorization, which those servers
//     implement;
//   - a base URL ending in /v1 is accepted (the /v1 is dropped: the client
//     appends /v1/messages).

package llm

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

func init() { Register(ProtocolAnthropic, NewAnthropic) }

// DefaultAnthropicBaseURL is used when Config.BaseURL is empty.
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// Default output caps when neither the request nor the config sets one.
const (
	defaultAnthropicMaxTokens = 16384
	// Compatible servers often cap output at 8K and reject more.
	defaultCompatMaxTokens = 8192
)

type anthropicProvider struct {
	cfg    Config
	svc    anthropic.MessageService
	compat bool
	warm   *warmConns
}

// NewAnthropic builds the Anthropic Messages provider. A missing API key is
// not an error here: Stream reports ErrNoCredentials. The provider does not
// retry; New wraps it in WithRetry.
func NewAnthropic(cfg Config) (Provider, error) {
	cfg = cfg.resolved()
	base := strings.TrimRight(cfg.BaseURL, "/")
	base = strings.TrimSuffix(base, "/v1")
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	compat := cfg.Provider != "anthropic"
	// NewMessageService, unlike anthropic.NewClient, reads no ANTHROPIC_*
	// variables or profile files: only LoadConfig's sources apply.
	hc, warm := newHTTPClient(base + "/")
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
		if compat {
			opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
		}
	}
	if compat {
		opts = append(opts, option.WithHeader("anthropic-version", "2023-06-01"))
	}
	return &anthropicProvider{cfg: cfg, svc: anthropic.NewMessageService(opts...), compat: compat, warm: warm}, nil
}

// Warm implements Warmer.
func (p *anthropicProvider) Warm() {
	if p.cfg.APIKey != "" {
		p.warm.Warm()
	}
}

// Stream implements Provider.
func (p *anthropicProvider) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	if p.cfg.APIKey == "" {
		return ErrNoCredentials
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	params, err := p.params(req)
	if err != nil {
		return err
	}
	return streamCall(ctx, "anthropic", p.cfg.Retry.idleTimeout(), p.warm,
		func(rctx context.Context, resp **http.Response) openedStream {
			return p.svc.NewStreaming(rctx, params, option.WithResponseInto(resp))
		},
		p.requestError,
		func(body io.Reader) error { return decodeAnthropicStreamText(body, emit, borrowsText(ctx)) },
		func(err error) error { return redactErr(err, p.cfg.APIKey) })
}
