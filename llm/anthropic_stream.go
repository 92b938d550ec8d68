package llm

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Block kinds of a streamed answer.
const (
	anOther uint8 = iota
	anText
	anThinking
	anToolUse
)

type anBlock struct {
	kind  uint8
	call  int    // tool call index
	sig   string // thinking signature
	args  bool   // input_json_delta seen
	input string // input given whole in content_block_start
}

// anStream is the state of one streamed answer.
type anStream struct {
	out func(Event)
	// more is the Buffered of the events of the SSE event being decoded.
	more   bool
	blocks []anBlock
	nCalls int
	stop   string
	done   bool

	input, cacheRead, cacheWrite, output, thought int64
	gotUsage                                      bool
	slab                                          textSlab
}

// decodeAnthropicStream reads Messages API SSE events and emits Events. It
// returns nil only after message_stop.
func decodeAnthropicStream(body io.Reader, emit func(Event)) error {
	return decodeAnthropicStreamText(body, emit, false)
}

// decodeAnthropicStreamText is decodeAnthropicStream passing delta text
// that aliases the read buffer when borrow is set (BorrowText).
func decodeAnthropicStreamText(body io.Reader, emit func(Event), borrow bool) error {
	s := &anStream{out: emit}
	s.slab.borrow = borrow
	err := readSSE(body, func(event, data []byte, buffered bool) (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		s.more = buffered
		return s.event(data)
	})
	if err != nil && err != io.EOF {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("anthropic: %w: %w", ErrStreamInterrupted, err)
	}
	if !s.done {
		return fmt.Errorf("anthropic: %w: stream ended without message_stop: %w", ErrStreamInterrupted, io.ErrUnexpectedEOF)
	}
	if s.gotUsage {
		emit(Event{Type: EventUsage, Usage: Usage{
			InputTokens:       s.input + s.cacheRead + s.cacheWrite,
			OutputTokens:      s.output,
			ThoughtTokens:     s.thought,
			CachedReadTokens:  s.cacheRead,
			CachedWriteTokens: s.cacheWrite,
		}})
	}
	emit(Event{Type: EventStop, StopReason: s.stopReason()})
	return nil
}

// emit passes ev on with the Buffered of the event being decoded.
func (s *anStream) emit(ev Event) {
	ev.Buffered = s.more
	s.out(ev)
}

func (s *anStream) event(data []byte) (done bool, err error) {
	root := parseJSON(data)
	if !root.IsObject() {
		return false, errors.New("anthropic: stream event is not a JSON object")
	}
	var typ, index, delta, block, message, usage, apiErr gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "index":
			index = v
		case "delta":
			delta = v
		case "content_block":
			block = v
		case "message":
			message = v
		case "usage":
			usage = v
		case "error":
			apiErr = v
		}
		return true
	})
	switch typ.Str {
	case "content_block_delta":
		s.delta(s.block(index), delta)
	case "content_block_start":
		s.start(index, block)
	case "content_block_stop":
		s.blockStop(s.block(index))
	case "message_start":
		s.setUsage(message.Get("usage"))
	case "message_delta":
		if r := delta.Get("stop_reason"); r.Type == gjson.String {
			s.stop = stopReasonString(r.Str)
		}
		s.setUsage(usage)
	case "message_stop":
		s.done = true
		return true, nil
	case "error":
		return false, anthropicStreamError(apiErr)
	}
	// ping and unknown events are ignored.
	return false, nil
}

func (s *anStream) block(index gjson.Result) *anBlock {
	i := int(index.Int())
	if i < 0 || i >= len(s.blocks) {
		return nil
	}
	return &s.blocks[i]
}

func (s *anStream) start(index, cb gjson.Result) {
	i := int(index.Int())
	if i < 0 || i > 1<<12 {
		return
	}
	for len(s.blocks) <= i {
		s.blocks = append(s.blocks, anBlock{})
	}
	b := &s.blocks[i]
	*b = anBlock{}
	switch cb.Get("type").Str {
	case "text":
		b.kind = anText
		if t := own(cb.Get("text")); t != "" {
			s.emit(Event{Type: EventTextDelta, Text: t})
		}
	case "thinking":
		b.kind = anThinking
		if t := own(cb.Get("thinking")); t != "" {
			s.emit(Event{Type: EventThinkingDelta, Text: t})
		}
		b.sig = own(cb.Get("signature"))
	case "redacted_thinking":
		if d := own(cb.Get("data")); d != "" {
			s.emit(Event{Type: EventRedactedThinking, Text: d})
		}
	case "tool_use":
		b.kind = anToolUse
		b.call = s.nCalls
		s.nCalls++
		id := own(cb.Get("id"))
		if id == "" {
			id = "toolu_" + strconv.Itoa(b.call)
		}
		s.emit(Event{Type: EventToolCallStart, Index: b.call, ID: id, Name: own(cb.Get("name"))})
		if in := cb.Get("input"); in.IsObject() && strings.TrimSpace(in.Raw) != "{}" {
			b.input = strings.Clone(in.Raw)
		}
	}
}

func (s *anStream) delta(b *anBlock, d gjson.Result) {
	if b == nil {
		return
	}
	var typ, text, thinking, sig, partial gjson.Result
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "text":
			text = v
		case "thinking":
			thinking = v
		case "signature":
			sig = v
		case "partial_json":
			partial = v
		}
		return true
	})
	switch typ.Str {
	case "text_delta":
		if t := s.slab.own(text); t != "" {
			s.emit(Event{Type: EventTextDelta, Text: t})
		}
	case "thinking_delta":
		if t := s.slab.own(thinking); t != "" {
			s.emit(Event{Type: EventThinkingDelta, Text: t})
		}
	case "signature_delta":
		b.sig += own(sig)
	case "input_json_delta":
		if b.kind == anToolUse {
			if a := own(partial); a != "" {
				b.args = true
				s.emit(Event{Type: EventToolCallArgs, Index: b.call, ArgsDelta: a})
			}
		}
	}
}

func (s *anStream) blockStop(b *anBlock) {
	if b == nil {
		return
	}
	switch b.kind {
	case anThinking:
		if b.sig != "" {
			s.emit(Event{Type: EventThinkingSignature, Text: b.sig})
		}
	case anToolUse:
		if !b.args && b.input != "" {
			// A server that sent the input whole in content_block_start.
			s.emit(Event{Type: EventToolCallArgs, Index: b.call, ArgsDelta: b.input})
		}
		s.emit(Event{Type: EventToolCallEnd, Index: b.call})
	}
	b.kind = anOther
}

// setUsage reads message_start's usage, then message_delta's cumulative
// counts (a field absent from a message_delta keeps its earlier value).
func (s *anStream) setUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	s.gotUsage = true
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			if v.Type == gjson.Number {
				s.input = v.Int()
			}
		case "cache_read_input_tokens":
			if v.Type == gjson.Number {
				s.cacheRead = v.Int()
			}
		case "cache_creation_input_tokens":
			if v.Type == gjson.Number {
				s.cacheWrite = v.Int()
			}
		case "output_tokens":
			if v.Type == gjson.Number {
				s.output = v.Int()
			}
		case "output_tokens_details":
			if t := v.Get("thinking_tokens"); t.Type == gjson.Number {
				s.thought = t.Int()
			}
		}
		return true
	})
}

func stopReasonString(r string) string {
	for _, known := range [...]string{"end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "model_context_window_exceeded"} {
		if r == known {
			return known
		}
	}
	return strings.Clone(r)
}

func (s *anStream) stopReason() StopReason {
	switch s.stop {
	case "max_tokens", "model_context_window_exceeded":
		return StopMaxTokens
	case "refusal":
		return StopRefusal
	case "tool_use":
		return StopToolUse
	}
	if s.nCalls > 0 {
		return StopToolUse
	}
	return StopEndTurn
}
