package actors

import (
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Messages of the session actor.
type (
	// sessionRequest is a session-scoped JSON-RPC request or notification
	// forwarded by the connection (id nil for notifications).
	sessionRequest struct {
		id     protocol.RawMessage
		method string
		params protocol.RawMessage
	}
	// messageDone records one completed conversation message of a turn.
	messageDone struct{ msg llm.Message }
	// turnFinished ends the running turn: either a stop reason or an error.
	turnFinished struct {
		stopReason string
		usage      llm.Usage
		err        *protocol.Error
	}
	// permissionAsk asks the session (which asks the client, one request at
	// a time) whether a tool call may run.
	permissionAsk struct {
		toolName string
		toolCall protocol.ToolCallUpdate
		replyTo  *actor.PID
	}
	// permissionDecision answers a permissionAsk.
	permissionDecision struct {
		allow bool
		// cancelled: the client cancelled the request; the turn ends cancelled.
		cancelled bool
	}
)

func (*messageDone) IgnoreDeadLetterLogging()        {}
func (*permissionDecision) IgnoreDeadLetterLogging() {}

// Session modes: how much a session may do without asking.
var sessionModes = []protocol.SessionMode{
	{ID: "default", Name: "Default", Description: "Ask before writing files or running commands"},
	{ID: "accept_edits", Name: "Accept edits", Description: "Write files without asking; ask before running commands"},
	{ID: "plan", Name: "Plan", Description: "Read-only tools only"},
	{ID: "bypass", Name: "Bypass permissions", Description: "Never ask"},
}

// session owns one conversation: its history, its settings and at most one
// running turn.
type session struct {
	deps    *Deps
	id      string
	cwd     string
	conn    *actor.PID
	log     zerolog.Logger
	history []llm.Message
	mode    string
	model   string

	turn     *actor.PID
	promptID protocol.RawMessage
	// closeID is the pending session/close answered once the turn ends.
	closeID  protocol.RawMessage
	closing  bool
	draining bool

	// Permission requests are asked one at a time.
	permQueue  []*permissionAsk
	permActive *permissionAsk
	// remembered holds allow_always / reject_always decisions per tool.
	remembered map[string]bool
}

func newSession(deps *Deps, id, cwd string, conn *actor.PID) *session {
	return &session{
		deps:       deps,
		id:         id,
		cwd:        cwd,
		conn:       conn,
		log:        deps.Log.With().Str("session", id).Logger(),
		mode:       "default",
		model:      deps.Config.LLM.Model,
		remembered: map[string]bool{},
	}
}

func newSessionResponse(id string, deps *Deps) protocol.NewSessionResponse {
	return protocol.NewSessionResponse{
		SessionID:     id,
		Modes:         modeState("default"),
		Models:        modelState(deps.Config.LLM.Model),
		ConfigOptions: configOptions("default", deps.Config.LLM.Model),
	}
}

func modeState(current string) *protocol.SessionModeState {
	return &protocol.SessionModeState{CurrentModeID: current, AvailableModes: sessionModes}
}

func modelState(current string) *protocol.SessionModelState {
	return &protocol.SessionModelState{
		CurrentModelID:  current,
		AvailableModels: []protocol.ModelInfo{{ModelID: current, Name: current}},
	}
}

func configOptions(mode, model string) []protocol.SessionConfigOption {
	modeOpts := make([]protocol.ConfigSelectOption, len(sessionModes))
	for i, m := range sessionModes {
		modeOpts[i] = protocol.ConfigSelectOption{Value: m.ID, Name: m.Name, Description: m.Description}
	}
	return []protocol.SessionConfigOption{
		{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: mode, Options: modeOpts},
		{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: model,
			Options: []protocol.ConfigSelectOption{{Value: model, Name: model}}},
	}
}

func (s *session) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *outbound:
		ctx.Send(s.conn, m)
	case *actor.Started:
		s.deps.Metrics.Sessions.Add(1)
	case *actor.Stopped:
		s.deps.Metrics.Sessions.Add(-1)
	case *sessionRequest:
		s.handle(ctx, m)
	case *messageDone:
		s.history = append(s.history, m.msg)
	case *turnFinished:
		s.endTurn(ctx, m)
	case *childCrashed:
		if m.child.Equal(s.turn) {
			errorID := newErrorID()
			s.log.Error().Str("error_id", errorID).Interface("panic", m.reason.value).
				Bytes("stack", m.reason.stack).Msg("turn crashed")
			s.endTurn(ctx, &turnFinished{err: protocol.ErrInternal(fmt.Sprint(m.reason.value), errorID)})
		}
	case *permissionAsk:
		s.askPermission(ctx, m)
	case *clientAnswer:
		s.permissionAnswered(ctx, m)
	case *drain:
		s.draining = true
		if s.turn == nil {
			ctx.Send(s.conn, &sessionIdle{sessionID: s.id})
			return
		}
		ctx.Send(s.turn, &cancelTurn{})
	}
}

func (s *session) respond(ctx actor.Context, id protocol.RawMessage, result any) {
	if id == nil {
		return
	}
	ctx.Send(s.conn, &outbound{frame: Frame{Data: protocol.EncodeResult(id, result), SessionID: s.id}})
}

func (s *session) respondError(ctx actor.Context, id protocol.RawMessage, e *protocol.Error) {
	if id == nil {
		return
	}
	ctx.Send(s.conn, &outbound{frame: Frame{Data: protocol.EncodeError(id, e), SessionID: s.id}})
}

func (s *session) handle(ctx actor.Context, r *sessionRequest) {
	switch r.method {
	case protocol.MethodSessionPrompt:
		s.prompt(ctx, r)
	case protocol.MethodSessionCancel:
		if s.turn != nil {
			ctx.Send(s.turn, &cancelTurn{})
		}
		s.respond(ctx, r.id, struct{}{})
	case protocol.MethodSessionClose:
		s.closing = true
		if s.turn == nil {
			s.respond(ctx, r.id, struct{}{})
			ctx.Stop(ctx.Self())
			return
		}
		s.closeID = r.id
		ctx.Send(s.turn, &cancelTurn{})
	case protocol.MethodSessionSetMode:
		var p protocol.SetModeRequest
		if err := protocol.Unmarshal(r.params, &p); err != nil || !validMode(p.ModeID) {
			s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"modeId": "unknown mode"}))
			return
		}
		s.mode = p.ModeID
		s.respond(ctx, r.id, struct{}{})
	case protocol.MethodSessionSetConfig:
		s.setConfig(ctx, r)
	}
}

func validMode(id string) bool {
	for _, m := range sessionModes {
		if m.ID == id {
			return true
		}
	}
	return false
}

func (s *session) setConfig(ctx actor.Context, r *sessionRequest) {
	var p protocol.SetConfigOptionRequest
	var value string
	if err := protocol.Unmarshal(r.params, &p); err != nil || protocol.Unmarshal(p.Value, &value) != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "a string value is required"}))
		return
	}
	switch {
	case p.ConfigID == "mode" && validMode(value):
		s.mode = value
	case p.ConfigID == "model" && value == s.model:
	default:
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"configId": "unknown config option or value"}))
		return
	}
	s.respond(ctx, r.id, protocol.SetConfigOptionResponse{ConfigOptions: configOptions(s.mode, s.model)})
}

func (s *session) prompt(ctx actor.Context, r *sessionRequest) {
	var p protocol.PromptRequest
	if err := protocol.Unmarshal(r.params, &p); err != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
		return
	}
	if len(p.Prompt) == 0 {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"prompt": "prompt must not be empty"}))
		return
	}
	if s.turn != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{
			"prompt": "a prompt is already running in this session; cancel it or wait for its response"}))
		return
	}
	if !s.deps.hasCredentials() {
		s.respondError(ctx, r.id, errAuthRequired())
		return
	}
	user := llm.Message{Role: llm.RoleUser, Content: promptBlocks(p.Prompt)}
	s.history = append(s.history, user)
	s.promptID = r.id
	history := s.history[:len(s.history):len(s.history)] // the turn appends to its own copy
	props := actor.PropsFromProducer(func() actor.Actor {
		return newTurn(s.deps, s.id, s.cwd, s.model, history)
	}, actor.WithReceiverMiddleware(keepStack), actor.WithSupervisor(reportAndStop{}))
	s.turn = ctx.Spawn(props)
}

// promptBlocks turns ACP prompt content into model input. Images and audio
// are not supported by the spec'd capabilities and become text markers.
func promptBlocks(prompt []protocol.ContentBlock) []llm.Block {
	out := make([]llm.Block, 0, len(prompt))
	for _, b := range prompt {
		var text string
		switch b.Type {
		case "text":
			text = b.Text
		case "resource":
			if b.Resource == nil {
				continue
			}
			if b.Resource.Text != "" || b.Resource.Blob == "" {
				text = fmt.Sprintf("<resource uri=%q>\n%s\n</resource>", b.Resource.URI, b.Resource.Text)
			} else {
				text = fmt.Sprintf("[resource: %s (%s, binary)]", b.Resource.URI, b.Resource.MimeType)
			}
		case "resource_link":
			text = fmt.Sprintf("[resource_link: %s <%s>]", b.Name, b.URI)
		case "image":
			text = "[image: " + b.MimeType + "]"
		case "audio":
			text = "[audio: " + b.MimeType + "]"
		default:
			text = "[" + b.Type + "]"
		}
		out = append(out, llm.Block{Type: llm.BlockText, Text: text})
	}
	return out
}

func (s *session) endTurn(ctx actor.Context, m *turnFinished) {
	if s.turn == nil {
		return
	}
	s.turn = nil
	s.closeOpenToolCalls()
	s.dropPermissionAsks()
	if m.err != nil {
		s.respondError(ctx, s.promptID, m.err)
	} else {
		s.respond(ctx, s.promptID, protocol.PromptResponse{StopReason: m.stopReason, Usage: promptUsage(m.usage)})
	}
	s.promptID = nil
	if s.closing {
		s.respond(ctx, s.closeID, struct{}{})
		ctx.Stop(ctx.Self())
	}
	if s.draining {
		ctx.Send(s.conn, &sessionIdle{sessionID: s.id})
	}
}

func promptUsage(u llm.Usage) *protocol.Usage {
	return &protocol.Usage{
		InputTokens:       u.InputTokens,
		OutputTokens:      u.OutputTokens,
		TotalTokens:       u.InputTokens + u.OutputTokens,
		ThoughtTokens:     u.ThoughtTokens,
		CachedReadTokens:  u.CachedReadTokens,
		CachedWriteTokens: u.CachedWriteTokens,
	}
}

// interruptedText is the result recorded for a tool call that never finished.
const interruptedText = "Session interrupted before tool execution completed."

// closeOpenToolCalls gives every tool_use without a result a synthetic error
// result, so the model never sees a tool call without an answer.
func (s *session) closeOpenToolCalls() {
	answered := map[string]bool{}
	for _, m := range s.history {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolResult {
				answered[b.ToolCallID] = true
			}
		}
	}
	var missing []llm.Block
	for _, m := range s.history {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolUse && !answered[b.ToolCallID] {
				missing = append(missing, llm.Block{Type: llm.BlockToolResult, ToolCallID: b.ToolCallID,
					Name: b.Name, Text: interruptedText, IsError: true})
			}
		}
	}
	if len(missing) > 0 {
		s.history = append(s.history, llm.Message{Role: llm.RoleTool, Content: missing})
	}
}

func (s *session) askPermission(ctx actor.Context, a *permissionAsk) {
	if allow, ok := s.remembered[a.toolName]; ok {
		ctx.Send(a.replyTo, &permissionDecision{allow: allow})
		return
	}
	if s.permActive != nil {
		s.permQueue = append(s.permQueue, a)
		return
	}
	s.permActive = a
	ctx.Send(s.conn, &outboundRequest{
		sessionID: s.id,
		method:    protocol.MethodRequestPermission,
		params: protocol.RequestPermissionRequest{
			SessionID: s.id,
			ToolCall:  a.toolCall,
			Options:   permissionOptions,
		},
		replyTo: ctx.Self(),
		tag:     a,
	})
}

var permissionOptions = []protocol.PermissionOption{
	{OptionID: protocol.AllowOnce, Name: "Allow once", Kind: protocol.AllowOnce},
	{OptionID: protocol.AllowAlways, Name: "Always allow this tool in this session", Kind: protocol.AllowAlways},
	{OptionID: protocol.RejectOnce, Name: "Reject", Kind: protocol.RejectOnce},
	{OptionID: protocol.RejectAlways, Name: "Always reject this tool in this session", Kind: protocol.RejectAlways},
}

// permissionOutcome reads both the schema answer
// {"outcome":{"outcome":"selected","optionId":…}} and the specification's
// legacy {"outcome":"allowed","option_id":…} / {"outcome":"denied"}.
func permissionOutcome(result protocol.RawMessage) (kind string, cancelled bool) {
	var r struct {
		Outcome  protocol.RawMessage `json:"outcome"`
		OptionID string              `json:"option_id"`
	}
	if protocol.Unmarshal(result, &r) != nil || len(r.Outcome) == 0 {
		return protocol.RejectOnce, false
	}
	var legacy string
	if protocol.Unmarshal(r.Outcome, &legacy) == nil {
		switch legacy {
		case "allowed":
			if optionKind(r.OptionID) == protocol.AllowAlways {
				return protocol.AllowAlways, false
			}
			return protocol.AllowOnce, false
		case "cancelled":
			return "", true
		}
		return protocol.RejectOnce, false
	}
	var o struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId"`
	}
	if protocol.Unmarshal(r.Outcome, &o) != nil {
		return protocol.RejectOnce, false
	}
	if o.Outcome == "cancelled" {
		return "", true
	}
	if k := optionKind(o.OptionID); k != "" {
		return k, false
	}
	return protocol.RejectOnce, false
}

func optionKind(optionID string) string {
	for _, o := range permissionOptions {
		if o.OptionID == optionID {
			return o.Kind
		}
	}
	return ""
}

func (s *session) permissionAnswered(ctx actor.Context, m *clientAnswer) {
	a, ok := m.tag.(*permissionAsk)
	if !ok || a != s.permActive {
		return // an answer for a turn that has ended
	}
	s.permActive = nil
	var d permissionDecision
	if m.err != nil {
		s.log.Warn().Int("code", m.err.Code).Str("message", m.err.Message).Msg("permission request failed; treating as reject")
	} else {
		kind, cancelled := permissionOutcome(m.result)
		d.cancelled = cancelled
		d.allow = strings.HasPrefix(kind, "allow_")
		switch kind {
		case protocol.AllowAlways:
			s.remembered[a.toolName] = true
		case protocol.RejectAlways:
			s.remembered[a.toolName] = false
		}
	}
	ctx.Send(a.replyTo, &d)
	s.nextPermission(ctx)
}

func (s *session) nextPermission(ctx actor.Context) {
	for len(s.permQueue) > 0 && s.permActive == nil {
		next := s.permQueue[0]
		s.permQueue = s.permQueue[1:]
		s.askPermission(ctx, next)
	}
}

func (s *session) dropPermissionAsks() {
	s.permQueue = nil
	s.permActive = nil
}
