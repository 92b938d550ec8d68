package actors

import (
	"context"

	"github.com/iac-code/iac-code/actors/tracing"
	"github.com/iac-code/iac-code/protocol"
)

// startSpan starts the turn's invoke_agent span (tracing on) and returns
// the context the turn's model and tool calls run under.
func (t *turn) startSpan() context.Context {
	parent := t.opts.trace
	if parent == nil {
		parent = context.Background()
	}
	if t.deps.Trace == nil {
		return parent
	}
	model := t.model
	if model == "" {
		model = t.deps.llmConfig().Model
	}
	ctx, span := t.deps.Trace.StartTurn(parent, tracing.Turn{SessionID: t.sessionID, Principal: t.budget.owner,
		Model: model, Agent: t.subagent, Prompt: t.opts.prompt})
	t.span = span
	return ctx
}

// endSpans ends the running model call's span (cancelled) and the turn's.
func (t *turn) endSpans(stopReason string, err *protocol.Error) {
	if t.chat != nil {
		t.chat.EndChat(0, 0, "", context.Canceled)
		t.chat = nil
	}
	if t.span == nil {
		return
	}
	msg := ""
	if err != nil {
		msg = err.Message
	}
	t.span.EndTurn(stopReason, t.usage.InputTokens, t.usage.OutputTokens, msg)
	t.span = nil
}

// promptTraceParent is the context under the client's trace of a prompt
// request: a W3C traceparent in the request's _meta (ACP's convention),
// else the one its HTTP request carried (also across a pod hop).
func promptTraceParent(r *sessionRequest) context.Context {
	var p struct {
		Meta struct {
			Traceparent string `json:"traceparent"`
			Tracestate  string `json:"tracestate"`
		} `json:"_meta"`
	}
	if len(r.params) > 0 && protocol.Unmarshal(r.params, &p) == nil && p.Meta.Traceparent != "" {
		return tracing.WithParent(context.Background(), p.Meta.Traceparent, p.Meta.Tracestate)
	}
	return tracing.WithParent(context.Background(), r.traceparent, "")
}
