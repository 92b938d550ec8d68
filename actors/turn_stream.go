package actors

import (
	"sync"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// maxMergedChunk bounds the text of one chunk notification made of several
// deltas (see modelCall.add).
const maxMergedChunk = 64 << 10

// maxScratch bounds the notification buffer a model call keeps between
// notifications (a single long delta may need more, once).
const maxScratch = 2 * maxMergedChunk

// modelCall is one streaming model call. Its reader goroutine (the
// provider's emit) assembles the answer and sends its text to the client
// as it comes, without a message to the turn actor per token: the turn
// takes the message once, at the end of the call or when it cancels it.
//
// Deltas of one kind that arrive together (llm.Event.Buffered: the next
// event is already received) go out as one chunk notification: while the
// server keeps up with the model each delta is its own chunk, and a
// backlog (a model faster than the client, the store or the machine)
// costs one message per socket read, not one per token.
type modelCall struct {
	sessionID string
	// messageID is the messageId of the answer's chunks (and of the
	// message kept in the history).
	messageID string
	// stream: text is shown to the client (not a compaction summary, not a
	// sub-agent's answer); send hands it a notification and how far the
	// call's shown text goes with it (shown).
	stream bool
	send   func(data []byte, shown int)

	mu  sync.Mutex
	asm llm.Assembler
	// kind and chunk are the notification being joined ("": none).
	kind  string
	chunk protocol.ChunkNotification
	// scratch is the buffer notifications are built in, reused (each is
	// sent as an exact-size copy, made in a frame given back when there
	// is one: frames).
	scratch []byte
	frames  *framePool
	// taken: the turn has the message; nothing more is added or sent.
	taken bool
	// shown is how many bytes of text and thinking the call has sent (in
	// the notifications sent so far), joining the bytes of the chunk being
	// joined once it is sent. The text itself is kept once, by the
	// assembler, then by the taken message (shownFrames).
	shown, joining int
	// takenContent is the taken message's content.
	takenContent []llm.Block
}

func newModelCall(sessionID string, stream bool, send func([]byte, int)) *modelCall {
	return &modelCall{sessionID: sessionID, messageID: uuid.NewString(), stream: stream, send: send, frames: &framePool{}}
}

// add handles one provider event (the reader goroutine).
func (c *modelCall) add(ev llm.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken {
		return
	}
	// The assembler keeps every block in stream order (several signed
	// thinking blocks, redacted thinking, tool calls) for the next call.
	c.asm.Add(ev)
	var kind string
	switch ev.Type {
	case llm.EventTextDelta:
		kind = protocol.UpdateAgentMessageChunk
	case llm.EventThinkingDelta:
		kind = protocol.UpdateAgentThoughtChunk
	}
	if kind != "" && ev.Text != "" && c.stream {
		if kind != c.kind || c.chunk.Len() > maxMergedChunk {
			c.flushLocked()
			c.kind = kind
			c.chunk = protocol.StartMessageChunkIn(c.scratch, c.sessionID, kind, c.messageID)
		}
		if ev.PlainText {
			c.chunk.AppendPlain(ev.Text)
		} else {
			c.chunk.Append(ev.Text)
		}
		c.joining += len(ev.Text)
	}
	if !ev.Buffered {
		c.flushLocked()
	}
}

func (c *modelCall) flushLocked() {
	if c.kind != "" {
		b := c.chunk.End()
		frame := c.frames.get(len(b))
		if frame == nil {
			frame = make([]byte, 0, len(b))
		}
		frame = append(frame, b...)
		if cap(b) <= maxScratch {
			c.scratch = b[:0]
		}
		c.shown += c.joining
		c.joining = 0
		c.send(frame, c.shown)
		c.kind = ""
	}
}

// end sends what is still joined (the reader goroutine, when the call
// returned: after an error or a cancel no event says so).
func (c *modelCall) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.taken {
		c.flushLocked()
	}
}

// callResult is what the turn takes of a model call.
type callResult struct {
	msg   llm.Message
	usage llm.Usage
	stop  llm.StopReason
}

// take ends the call for the turn: the message so far (all of it, or what
// the client was sent of a cancelled or failed answer: a joined chunk
// still pending is sent first), its usage and stop reason. Nothing is
// added or sent after; the assembler's blocks are let go.
func (c *modelCall) take() callResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.taken {
		c.flushLocked()
		c.taken = true
		c.frames.close()
	}
	r := callResult{msg: c.asm.Message(), stop: c.asm.StopReason()}
	r.msg.ID = c.messageID
	r.usage, _ = c.asm.Usage()
	c.asm = llm.Assembler{}
	c.takenContent = r.msg.Content
	return r
}

// shownFrames are the chunk notifications of the call's shown text from
// byte from to byte to (session_active.go: what a client loading the
// session during the turn has not seen yet): one per text or thinking
// block, split at maxMergedChunk, with the messageId the live ones had.
func (c *modelCall) shownFrames(from, to int) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var frames [][]byte
	pos := 0
	each := func(t llm.BlockType, text string) {
		start := pos
		pos += len(text)
		lo, hi := max(from, start), min(to, pos)
		if lo >= hi {
			return
		}
		kind := protocol.UpdateAgentMessageChunk
		if t == llm.BlockThinking {
			kind = protocol.UpdateAgentThoughtChunk
		}
		for piece := text[lo-start : hi-start]; piece != ""; {
			n := len(piece)
			if n > maxMergedChunk {
				n = maxMergedChunk
				for n > 0 && !utf8.RuneStart(piece[n]) {
					n--
				}
			}
			chunk := protocol.StartMessageChunkIn(nil, c.sessionID, kind, c.messageID)
			chunk.Append(piece[:n])
			frames = append(frames, chunk.Bytes())
			piece = piece[n:]
		}
	}
	if !c.taken {
		c.asm.EachText(each)
		return frames
	}
	for _, b := range c.takenContent {
		if b.Type == llm.BlockText || b.Type == llm.BlockThinking {
			each(b.Type, b.Text)
		}
	}
	return frames
}

func (t *turn) callModel(ctx actor.Context) {
	limit := t.deps.Config.MaxTurnRequests
	if t.maxCalls > 0 {
		limit = t.maxCalls
	}
	if t.pausing {
		t.pauseNow(ctx) // a step boundary: the next step is for the next holder
		return
	}
	if t.modelCalls >= limit {
		t.finish(ctx, protocol.StopMaxTurnRequests, nil)
		return
	}
	if !t.budget.admit(ctx) {
		return // callModel again once the budget is checked
	}
	if t.needsCompaction() && t.startCompaction(ctx, 3) {
		return
	}
	t.tools = t.currentTools()
	t.stream(ctx, &llm.Request{
		Model:      t.model,
		System:     t.system,
		SystemTurn: t.systemTurn,
		Messages:   t.forModel(t.messages),
		Tools:      t.tools.Defs(),
		MaxTokens:  t.deps.llmConfig().MaxTokens,

		ThinkingBudget: t.thinkingBudget,
	})
}

// onBudgetChecked: under budget, the model call goes; over it, a turn that
// has not called the model yet is refused, and one that has stops with
// what it did so far (its current step, tool results included, is done).
func (t *turn) onBudgetChecked(ctx actor.Context, m *budgetChecked) {
	over := t.budget.checked(m)
	switch {
	case over == nil:
		t.callModel(ctx)
	case t.modelCalls == 0:
		t.finish(ctx, "", errTokenBudget(over))
	default:
		if t.subagent == "" {
			t.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text(budgetStopText(over))})
		}
		t.finish(ctx, protocol.StopMaxTokens, nil)
	}
}

// modelName is the model the turn's calls go to.
func (t *turn) modelName() string {
	if t.model != "" {
		return t.model
	}
	return t.deps.llmConfig().Model
}

// forModel is msgs as the model takes them: images become text markers
// for a model that takes none (the history keeps them).
func (t *turn) forModel(msgs []llm.Message) []llm.Message {
	if t.deps.llmConfig().AcceptsImages(t.model) {
		return msgs
	}
	return llm.ImagesAsText(msgs)
}

// stream starts one model call in a goroutine: it sends the answer's text
// to the client as it comes (see modelCall) and tells the actor when the
// call returned.
func (t *turn) stream(ctx actor.Context, req *llm.Request) {
	t.modelCalls++
	t.streaming = true
	t.gen++
	t.pending = nil
	t.stop = ""

	gen, self, root, provider, runCtx := t.gen, ctx.Self(), ctx.ActorSystem().Root, t.deps.Provider, t.ctx
	to, sid := ctx.Parent(), t.sessionID
	var call *modelCall
	call = newModelCall(sid, !t.compacting && t.subagent == "", func(data []byte, shown int) {
		root.Send(to, &outbound{frame: Frame{Data: data, SessionID: sid, pool: call.frames}, call: call, shown: shown})
	})
	t.call = call
	if t.deps.Trace != nil {
		cfg := t.deps.llmConfig()
		model := req.Model
		if model == "" {
			model = cfg.Model
		}
		runCtx, t.chat = t.deps.Trace.StartChat(runCtx, cfg.Provider, model, sid)
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				root.Send(self, &goroutinePanic{p: recovered(r)})
			}
		}()
		// call.add copies what it keeps of a delta's text.
		err := provider.Stream(llm.BorrowText(runCtx), req, call.add)
		call.end()
		root.Send(self, &streamEnd{gen: gen, err: err})
	}()
}

// currentTools are the turn's own tools plus the MCP tools available now
// (a server that became ready or changed its tools since the last request
// is seen here).
//
// The MCP actor replaces the list whole when a server's tools change, so
// the same list pointer means the same tools: the registry made for it
// (its map, sorted list and definitions) serves every request until then.
func (t *turn) currentTools() *tools.Registry {
	var cur *[]tools.Tool
	if t.mcp != nil {
		cur = t.mcp.p.Load()
	}
	if cur != nil && cur == t.toolsOf && t.tools != nil {
		return t.tools
	}
	var extra []tools.Tool
	if cur != nil {
		for _, tl := range *cur {
			if t.mcpKeep == nil || t.mcpKeep(tl) {
				extra = append(extra, tl)
			}
		}
	}
	t.toolsOf = cur
	return t.base.With(extra...)
}
