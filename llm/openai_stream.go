package llm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// oaStream is the state of one streamed answer.
type oaStream struct {
	out func(Event)
	// more is the Buffered of the events of the SSE event being decoded.
	more     bool
	calls    []int // OpenAI tool call index -> our index+1 (0 = not started)
	nCalls   int
	finish   string
	usage    Usage
	gotUsage bool
	err      error
	// shapes are the common chunk's bytes around its text, learned from
	// chunks fastChunk took (see shapeChunk): one for text, one for
	// reasoning.
	shapes [2]chunkShape
	// shapesOverlap: an event may match both shapes (takeRun).
	shapesOverlap bool
	// join is where takeRun joins a run's text.
	join []byte
	slab textSlab
}

// decodeOpenAIStream reads SSE events from body and emits Events. It returns
// nil only when the stream carried a finish_reason.
func decodeOpenAIStream(body io.Reader, emit func(Event)) error {
	return decodeOpenAIStreamText(body, emit, false)
}

// decodeOpenAIStreamText is decodeOpenAIStream passing delta text that
// aliases the read buffer when borrow is set (BorrowText).
func decodeOpenAIStreamText(body io.Reader, emit func(Event), borrow bool) error {
	return decodeOpenAIStreamWith(body, emit, borrow, true)
}

// decodeOpenAIStreamWith is decodeOpenAIStreamText taking runs of the
// common chunk straight from the read buffer (takeRun) when runs is set;
// it is false only in the tests that compare both ways.
func decodeOpenAIStreamWith(body io.Reader, emit func(Event), borrow, runs bool) error {
	s := &oaStream{out: emit}
	s.slab.borrow = borrow
	var fast sseFastPath
	if runs {
		fast = s.takeRun
	}
	err := readSSEWith(body, sseBuffer, sseBehindBuffer, true, fast, func(_, data []byte, buffered bool) (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		s.more = buffered
		return s.event(data)
	})
	s.more = false
	if err == io.EOF {
		err = nil
	}
	return s.finishStream(err)
}

var doneMarker = []byte("[DONE]")

// emit passes ev on with the Buffered of the event being decoded (a
// method, not a wrapping closure: one call less per delta).
func (s *oaStream) emit(ev Event) {
	ev.Buffered = s.more
	s.out(ev)
}

// event handles one non-empty SSE data payload; done reports [DONE]. The common chunk
// (text or reasoning of choice 0, nothing else acted on) takes fastChunk, a
// single strict scan; anything else takes the full gjson path (fullChunk).
func (s *oaStream) event(data []byte) (done bool, err error) {
	if data[0] != '{' && bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		return true, nil
	}
	if s.shapeChunk(data) || s.fastChunk(data) {
		return false, nil
	}
	return false, s.fullChunk(data)
}

// fullChunk reads a chunk with gjson in one pass over the keys we use,
// without decoding the rest.
func (s *oaStream) fullChunk(data []byte) error {
	// root aliases the read buffer: strings kept past this call go through own.
	root := parseJSON(data)
	if !root.IsObject() {
		return errors.New("openai_compatible: stream chunk is not a JSON object")
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			v.ForEach(func(_, c gjson.Result) bool {
				s.choice(c)
				return true
			})
		case "usage":
			if v.IsObject() {
				s.setUsage(v)
			}
		case "error":
			if v.Type != gjson.Null {
				s.err = streamError(v)
				return false
			}
		}
		return true
	})
	return s.err
}

func (s *oaStream) choice(c gjson.Result) {
	var index int64
	var delta, finish gjson.Result
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "delta":
			delta = v
		case "finish_reason":
			finish = v
		}
		return true
	})
	if index != 0 {
		return // we ask for one choice
	}
	var content, reasoning, toolCalls gjson.Result
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			content = v
		case "reasoning_content":
			reasoning = v
		case "reasoning": // vLLM, OpenRouter
			if reasoning.Type != gjson.String {
				reasoning = v
			}
		case "tool_calls":
			toolCalls = v
		}
		return true
	})
	if t := own(reasoning); t != "" {
		s.emit(Event{Type: EventThinkingDelta, Text: t})
	}
	if t := own(content); t != "" {
		s.emit(Event{Type: EventTextDelta, Text: t})
	}
	if toolCalls.IsArray() {
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			s.toolCall(tc)
			return true
		})
	}
	if finish.Type == gjson.String && finish.Str != "" {
		s.finish = finishReason(finish.Str)
	}
}

func (s *oaStream) toolCall(tc gjson.Result) {
	var index int64
	var id, fn gjson.Result
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v.Int()
		case "id":
			id = v
		case "function":
			fn = v
		}
		return true
	})
	var name, args gjson.Result
	fn.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "name":
			name = v
		case "arguments":
			args = v
		}
		return true
	})
	idx := int(index)
	if idx < 0 || idx > 1<<10 {
		idx = 0
	}
	for len(s.calls) <= idx {
		s.calls = append(s.calls, 0)
	}
	if s.calls[idx] == 0 {
		s.nCalls++
		s.calls[idx] = s.nCalls
		callID := own(id)
		if callID == "" {
			callID = "call_" + strconv.Itoa(s.nCalls-1)
		}
		s.emit(Event{Type: EventToolCallStart, Index: s.nCalls - 1, ID: callID, Name: own(name)})
	}
	if a := own(args); a != "" {
		s.emit(Event{Type: EventToolCallArgs, Index: s.calls[idx] - 1, ArgsDelta: a})
	}
}

func (s *oaStream) setUsage(u gjson.Result) {
	s.gotUsage = true
	s.usage = Usage{
		InputTokens:      u.Get("prompt_tokens").Int(),
		OutputTokens:     u.Get("completion_tokens").Int(),
		ThoughtTokens:    u.Get("completion_tokens_details.reasoning_tokens").Int(),
		CachedReadTokens: u.Get("prompt_tokens_details.cached_tokens").Int(),
	}
	if s.usage.CachedReadTokens == 0 {
		s.usage.CachedReadTokens = u.Get("prompt_cache_hit_tokens").Int() // DeepSeek
	}
}

// streamError maps an in-stream {"error":{...}} (OpenRouter, proxies).
func streamError(v gjson.Result) error {
	msg := v.String()
	if v.IsObject() {
		msg = v.Get("message").String()
	}
	status := 500
	if n := v.Get("code"); n.Exists() {
		if c, err := strconv.Atoi(n.String()); err == nil && c >= 400 && c < 600 {
			status = c
		}
	}
	return &APIError{Status: status, Message: strings.Clone(msg)}
}

func finishReason(r string) string {
	for _, known := range [...]string{"stop", "tool_calls", "function_call", "length", "content_filter"} {
		if r == known {
			return known
		}
	}
	return strings.Clone(r)
}

// finishStream emits the closing events, or fails a stream cut short.
func (s *oaStream) finishStream(err error) error {
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("openai_compatible: %w: %w", ErrStreamInterrupted, err)
	}
	if s.finish == "" {
		return fmt.Errorf("openai_compatible: %w: stream ended without finish_reason: %w", ErrStreamInterrupted, io.ErrUnexpectedEOF)
	}
	for i := range s.nCalls {
		s.emit(Event{Type: EventToolCallEnd, Index: i})
	}
	if s.gotUsage {
		s.emit(Event{Type: EventUsage, Usage: s.usage})
	}
	s.emit(Event{Type: EventStop, StopReason: s.stopReason()})
	return nil
}

func (s *oaStream) stopReason() StopReason {
	switch {
	case s.finish == "tool_calls" || s.finish == "function_call" || s.nCalls > 0:
		return StopToolUse
	case s.finish == "length":
		return StopMaxTokens
	case s.finish == "content_filter":
		return StopRefusal
	default:
		return StopEndTurn
	}
}
