//go:build e2etest

// Test-only hooks, compiled in only with -tags e2etest (the e2e suite builds
// the binary that way). The shipped binary has none of this.
package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// panicMarker in the last user message makes the chaos provider panic inside
// the turn; any other prompt is served by the real OpenAI-compatible provider.
const panicMarker = "__panic_turn__"

func init() {
	// chaos_<format> wraps the real provider of that wire format.
	for key, preset := range map[string]string{"chaos_openai": "openai_compatible", "chaos_anthropic": "anthropic_compatible"} {
		llm.Register(key, func(cfg llm.Config) (llm.Provider, error) {
			cfg.Provider = preset
			inner, err := llm.New(cfg)
			if err != nil {
				return nil, err
			}
			return &chaosProvider{inner: inner}, nil
		})
	}
	tools.RegisterExtra(panicTool{})
	if os.Getenv("IAC_CODE_E2E_NO_LANDLOCK") == "1" {
		sandbox.HideLandlock() // a kernel without Landlock, on this one
	}
}

type chaosProvider struct{ inner llm.Provider }

func (p *chaosProvider) Stream(ctx context.Context, req *llm.Request, emit func(llm.Event)) error {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleUser &&
		strings.Contains(req.Messages[n-1].TextOf(), panicMarker) {
		panic("chaos provider: panic requested by the test")
	}
	return p.inner.Stream(ctx, req, emit)
}

// panicTool panics when run, to prove a crashing tool fails only its call.
type panicTool struct{}

func (panicTool) Name() string        { return "test_panic" }
func (panicTool) Description() string { return "test-only tool that panics" }
func (panicTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{}}`)
}
func (panicTool) Kind() tools.Kind { return tools.KindOther }
func (panicTool) ReadOnly() bool   { return true }
func (panicTool) Prepare(*tools.Env, json.RawMessage) (tools.Call, error) {
	return &tools.FuncCall{TitleText: "Test panic", RunFunc: func(context.Context, func(string)) tools.Result {
		panic("test_panic tool: panic requested by the test")
	}}, nil
}
