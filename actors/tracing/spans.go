package tracing

import (
	"context"
	"encoding/json"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Attribute names of the OpenTelemetry GenAI semantic conventions (and
// enduser.id), in one place.
const (
	attrOperation     = attribute.Key("gen_ai.operation.name")
	attrProvider      = attribute.Key("gen_ai.provider.name")
	attrRequestModel  = attribute.Key("gen_ai.request.model")
	attrConversation  = attribute.Key("gen_ai.conversation.id")
	attrAgentName     = attribute.Key("gen_ai.agent.name")
	attrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	attrToolName      = attribute.Key("gen_ai.tool.name")
	attrToolCallID    = attribute.Key("gen_ai.tool.call.id")
	attrToolType      = attribute.Key("gen_ai.tool.type")
	attrToolArguments = attribute.Key("gen_ai.tool.call.arguments")
	attrToolResult    = attribute.Key("gen_ai.tool.call.result")
	attrInputMessages = attribute.Key("gen_ai.input.messages")
	attrEndUser       = attribute.Key("enduser.id")
	attrErrorType     = attribute.Key("error.type")
)

// Operation names (gen_ai.operation.name), also the spans' first word.
const (
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// Tracer makes the spans of turns, model calls and tool calls. Its methods
// are meant for a nil receiver too: tracing off, they return their context
// unchanged and a nil *Span, whose methods do nothing.
type Tracer struct {
	tr      trace.Tracer
	capture bool
}

// Span is one span being recorded; nil when tracing is off.
type Span struct{ s trace.Span }

// Turn is what an invoke_agent span says about a prompt turn.
type Turn struct {
	SessionID string
	Principal string
	Model     string
	// Agent names a sub-agent type ("" for the session's own turn).
	Agent string
	// Prompt is the user's text, recorded only with content capture on.
	Prompt string
}

var propagator = propagation.TraceContext{}

// WithParent is ctx under the remote span a W3C traceparent (and
// tracestate) names; ctx itself when traceparent is empty or invalid.
func WithParent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// StartTurn starts the invoke_agent span of a prompt turn under ctx's span
// (the client's traceparent, or a tool call for a sub-agent).
func (t *Tracer) StartTurn(ctx context.Context, turn Turn) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	name := OpInvokeAgent
	attrs := []attribute.KeyValue{attrOperation.String(OpInvokeAgent), attrConversation.String(turn.SessionID),
		attrRequestModel.String(turn.Model), attrEndUser.String(turn.Principal)}
	if turn.Agent != "" {
		name += " " + turn.Agent
		attrs = append(attrs, attrAgentName.String(turn.Agent))
	}
	if t.capture && turn.Prompt != "" {
		attrs = append(attrs, attrInputMessages.String(userMessage(turn.Prompt)))
	}
	ctx, s := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, &Span{s}
}

// EndTurn ends a turn's span with its stop reason (or error) and the
// tokens of all its model calls.
func (s *Span) EndTurn(stopReason string, input, output int64, errMsg string) {
	if s == nil {
		return
	}
	s.s.SetAttributes(attrInputTokens.Int64(input), attrOutputTokens.Int64(output))
	if stopReason != "" {
		s.s.SetAttributes(attrFinishReasons.StringSlice([]string{stopReason}))
	}
	if errMsg != "" {
		s.s.SetStatus(codes.Error, errMsg)
		s.s.SetAttributes(attrErrorType.String("turn_failed"))
	}
	s.s.End()
}

// StartChat starts the span of one model call ("chat {model}").
func (t *Tracer) StartChat(ctx context.Context, provider, model, sessionID string) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, s := t.tr.Start(ctx, OpChat+" "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrOperation.String(OpChat), attrProvider.String(providerName(provider)),
		attrRequestModel.String(model), attrConversation.String(sessionID)))
	return ctx, &Span{s}
}

// EndChat ends a model call's span: its tokens, its finish reason, its
// error (err) if it failed.
func (s *Span) EndChat(input, output int64, finishReason string, err error) {
	if s == nil {
		return
	}
	s.s.SetAttributes(attrInputTokens.Int64(input), attrOutputTokens.Int64(output))
	if finishReason != "" {
		s.s.SetAttributes(attrFinishReasons.StringSlice([]string{finishReason}))
	}
	if err != nil {
		s.s.SetStatus(codes.Error, err.Error())
		s.s.SetAttributes(attrErrorType.String(errorType(err)))
	}
	s.s.End()
}

// StartTool starts the span of one tool call ("execute_tool {tool}");
// arguments are recorded only with content capture on.
func (t *Tracer) StartTool(ctx context.Context, name, callID, sessionID string, arguments []byte) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attrOperation.String(OpExecuteTool), attrToolName.String(name),
		attrToolCallID.String(callID), attrToolType.String("function"), attrConversation.String(sessionID)}
	if t.capture && len(arguments) > 0 {
		attrs = append(attrs, attrToolArguments.String(string(arguments)))
	}
	ctx, s := t.tr.Start(ctx, OpExecuteTool+" "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, &Span{s}
}

// EndTool ends a tool call's span; result is recorded only with content
// capture on (t is the tracer that started the span).
func (s *Span) EndTool(t *Tracer, result string, isError bool) {
	if s == nil {
		return
	}
	if t != nil && t.capture {
		s.s.SetAttributes(attrToolResult.String(result))
	}
	if isError {
		s.s.SetStatus(codes.Error, "tool call failed")
		s.s.SetAttributes(attrErrorType.String("tool_error"))
	}
	s.s.End()
}

// Traceparent is the W3C traceparent of ctx's span ("" without one), for
// carrying a trace to another pod.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// providerName is gen_ai.provider.name for a provider preset key: the
// convention's well-known names where one exists, else the key.
func providerName(key string) string {
	switch key {
	case "gemini":
		return "gcp.gemini"
	case "":
		return "openai"
	}
	return key
}

// errorType is a low-cardinality error.type for a failed model call.
func errorType(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "context canceled"):
		return "cancelled"
	case strings.Contains(msg, "deadline exceeded"), strings.Contains(msg, "timeout"):
		return "timeout"
	}
	return "model_error"
}

// userMessage is gen_ai.input.messages for one user text.
func userMessage(text string) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	b, _ := json.Marshal([]message{{Role: "user", Parts: []part{{Type: "text", Content: text}}}})
	return string(b)
}

// CapturesContent reports whether spans carry prompt text, tool arguments
// and results (IAC_CODE_OTEL_CAPTURE_CONTENT=true).
func (t *Tracer) CapturesContent() bool { return t != nil && t.capture }
