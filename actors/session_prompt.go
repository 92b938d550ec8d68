package actors

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// Messages of the session actor from its running turn.
type (
	// messageDone records one completed conversation message of a turn.
	messageDone struct{ msg llm.Message }
	// toolsStarting asks the session to record that these tool calls of
	// its turn are about to run, permission given (durable turns: a call is
	// never run before its start is in the history); the tool actor asking
	// is answered toolsStartRecorded once written (not at all when the write
	// was refused: the turn is then cancelled, see stopWriting).
	toolsStarting struct {
		ids, names []string
	}
	toolsStartRecorded struct{}
	// toolResultDone records the result of one tool call of the turn when
	// it ended; the turn asking is answered toolResultRecorded once it is
	// (not when the write was refused: a holder that lost the session asks
	// the model nothing more, see stopWriting).
	toolResultDone     struct{ result llm.Block }
	toolResultRecorded struct{}
	// turnFinished ends the running turn: either a stop reason or an error.
	turnFinished struct {
		stopReason string
		usage      llm.Usage
		err        *protocol.Error
	}
)

func (*messageDone) IgnoreDeadLetterLogging()        {}
func (*toolsStartRecorded) IgnoreDeadLetterLogging() {}
func (*toolResultDone) IgnoreDeadLetterLogging()     {}
func (*toolResultRecorded) IgnoreDeadLetterLogging() {}

var slashCommands = []protocol.AvailableCommand{
	{Name: "compact", Description: "Summarize the conversation so far to free context"},
	{Name: "clear", Description: "Start over with an empty context (history stays on disk)"},
}

func (s *session) prompt(ctx actor.Context, r *sessionRequest) {
	if c := s.clients.find(r.conn); c != nil {
		s.conn, s.who = c.pid, c.who // a queued or held prompt is answered to its sender
	}
	var p protocol.PromptRequest
	if err := protocol.Unmarshal(r.params, &p); err != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
		return
	}
	if len(p.Prompt) == 0 {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"prompt": "prompt must not be empty"}))
		return
	}
	if s.turn.running() || s.mcp.held != nil {
		s.enqueuePrompt(ctx, r) // session_queue.go
		return
	}
	if !s.deps.hasCredentials() {
		s.respondError(ctx, r.id, s.deps.errAuthRequired())
		return
	}
	blocks, bad := promptBlocks(p.Prompt, s.deps.Config.MaxImageBytes)
	if bad != nil {
		s.respondError(ctx, r.id, bad)
		return
	}
	user := llm.Message{Role: llm.RoleUser, Content: blocks, ID: uuid.NewString()}
	if s.localCommand(ctx, r, &user) {
		return
	}
	s.startPrompt(ctx, r, &user, false)
}

// startPrompt runs the prompt r whose user message is user: /compact and
// /clear, else a turn. expanded: user is not what the client typed (an MCP
// prompt's messages), so every client is shown it.
func (s *session) startPrompt(ctx actor.Context, r *sessionRequest, user *llm.Message, expanded bool) {
	command := slashCommand(user)
	if command == "clear" {
		s.echoPrompt(ctx, user, expanded)
		s.append(store.CompactionEntry("(The user cleared the conversation; nothing before this point is relevant.)", s.store.LastSeq()))
		if s.lease.fenced != nil {
			s.respondError(ctx, r.id, s.lease.fenced)
			return
		}
		s.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text("Context cleared.")})
		s.syncStore()
		s.respond(ctx, r.id, protocol.PromptResponse{StopReason: protocol.StopEndTurn, Usage: promptUsage(llm.Usage{})})
		return
	}
	if command == "" && s.holdPrompt(r) {
		return // answered once the MCP servers are up (session_mcp.go)
	}
	if limit := s.deps.Config.MaxTurnsPerUser; !s.deps.turns.acquire(s.owner, limit) {
		s.respondError(ctx, r.id, errTooManyTurns(limit))
		return
	}
	s.countTurn()
	var client string
	if c := s.clients.find(r.conn); c != nil {
		client = c.who.client
	}
	// The prompt is the slot's from here: a panic writing it (the session
	// crashing) answers it (crashing), as one in its turn does.
	turnID := s.turn.claim(turnPrompt{id: r.id, conn: r.conn, client: client})
	s.inHand.handedOff(r)
	s.clearInterrupted()
	s.echoPrompt(ctx, user, expanded)
	firstSeq := s.store.LastSeq() + 1
	if command == "" {
		s.record(ctx, *user)
		if s.lease.fenced != nil {
			s.releaseTurnCount()
			s.turn.end()
			s.respondError(ctx, r.id, s.lease.fenced)
			return
		}
	}
	opts := s.turnOptions(turnID)
	opts.compactOnly = command == "compact"
	if s.deps.Trace != nil {
		opts.trace = promptTraceParent(r)
		if s.deps.Trace.CapturesContent() {
			opts.prompt = user.TextOf()
		}
	}
	s.spawnTurn(ctx, opts)
	s.beginTurn(r.id, client, firstSeq)
	s.markTurn(true)
}

// turnOptions are what a turn of the session numbered turnID starts with:
// the session's settings now, and its history as the model sees it.
func (s *session) turnOptions(turnID int64) turnOptions {
	opts := turnOptions{
		sessionID: s.id, cwd: s.meta.Cwd, dirs: s.meta.AdditionalDirectories, model: s.meta.Model, turnID: turnID,
		mode: s.meta.Mode, thinkingBudget: s.thinkingBudget(), compactionUpdates: s.compactionUpdates,
		noAutoCompact: !s.autoCompact(),
		history:       store.Context(s.entries), tools: s.toolsForMode(),
		jail: s.sandboxJail(), owner: s.owner,
	}
	opts.mcp, opts.mcpKeep = s.mcpTurnTools()
	return opts
}

// spawnTurn runs the turn of opts in the turn slot.
func (s *session) spawnTurn(ctx actor.Context, opts turnOptions) {
	props := actor.PropsFromProducer(func() actor.Actor { return newTurn(s.deps, opts) },
		actor.WithReceiverMiddleware(keepStack), actor.WithSupervisor(reportAndStop{}))
	s.turn.run(ctx.Spawn(props))
}

// slashCommand recognises /compact and /clear typed as the whole prompt.
func slashCommand(m *llm.Message) string {
	text := strings.TrimSpace(m.TextOf())
	for _, c := range slashCommands {
		if text == "/"+c.Name {
			return c.Name
		}
	}
	return ""
}

// toolsForMode: plan mode offers the model read-only tools only; ask_user
// is offered only when the prompt's client shows questions (form
// elicitation): its questions go to that client.
func (s *session) toolsForMode() *tools.Registry {
	caps := s.promptCaps()
	if s.meta.Mode != "plan" && !caps.Elicitation {
		return s.deps.Tools
	}
	var ts []tools.Tool
	for _, t := range s.deps.Tools.List() {
		if s.meta.Mode != "plan" || t.ReadOnly() {
			ts = append(ts, t)
		}
	}
	if caps.Elicitation {
		ts = append(ts, tools.AskUser{})
	}
	return tools.NewRegistry(ts...)
}

// promptBlocks turns ACP prompt content into model input. Images go to the
// model as images (a model that takes none gets a text marker, see
// turn.forModel); audio becomes a text marker. An image that is not
// base64, of a type the providers do not take, or larger than maxImage
// bytes is refused with -32602.
func promptBlocks(prompt []protocol.ContentBlock, maxImage int) ([]llm.Block, *protocol.Error) {
	out := make([]llm.Block, 0, len(prompt))
	images := 0
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
			images++
			if bad := checkImage(b, images, maxImage); bad != "" {
				return nil, protocol.ErrInvalidParams(map[string]string{"prompt": bad})
			}
			out = append(out, llm.Block{Type: llm.BlockImage, MediaType: b.MimeType, Data: b.Data})
			continue
		case "audio":
			text = "[audio: " + b.MimeType + "]"
		default:
			text = "[" + b.Type + "]"
		}
		out = append(out, llm.Block{Type: llm.BlockText, Text: text})
	}
	return out, nil
}

// imageTypes are the image types both providers take.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// DefaultMaxImageBytes caps one prompt image (Config.MaxImageBytes).
const DefaultMaxImageBytes = 5 << 20

// checkImage says what is wrong with the n-th image of a prompt ("" if
// nothing).
func checkImage(b protocol.ContentBlock, n, maxBytes int) string {
	if !slices.Contains(imageTypes, b.MimeType) {
		return fmt.Sprintf("image %d: mimeType %q is not supported (use %s)", n, b.MimeType, strings.Join(imageTypes, ", "))
	}
	size := base64.StdEncoding.DecodedLen(len(b.Data))
	if size > maxBytes+2 { // DecodedLen counts padding as bytes
		return fmt.Sprintf("image %d is about %d bytes; the limit is %d bytes (IAC_CODE_MAX_IMAGE_BYTES)", n, size, maxBytes)
	}
	data, err := base64.StdEncoding.DecodeString(b.Data)
	if err != nil || len(data) == 0 {
		return fmt.Sprintf("image %d: data is not base64", n)
	}
	if len(data) > maxBytes {
		return fmt.Sprintf("image %d is %d bytes; the limit is %d bytes (IAC_CODE_MAX_IMAGE_BYTES)", n, len(data), maxBytes)
	}
	return ""
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
