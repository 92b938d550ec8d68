package llm

import (
	"strconv"

	"github.com/iac-code/iac-code/protocol"
)

// body encodes the call as the request body the SDK's NewStreaming sends:
// the bytes of ChatCompletionNewParams.MarshalJSON for call.params(), with
// the "stream":true NewStreaming adds last (TestOpenAIBodyIsTheSDKs holds
// the two equal).
//
// Why not the SDK's encoder: it walks the params by reflection and
// re-scans (compacts) every nested value's encoding at every level, so the
// system prompt and the tool definitions are scanned several times per
// call: ~0.1 ms of CPU per model call for a first prompt with the
// built-in tools, 10 % of a churn cycle. The body is a handful of fixed
// shapes, appended here in one pass; strings are escaped by
// protocol.AppendJSONString, whose escaping is the SDK's (encoding/json
// without HTML escaping). What is rare and whose encoding is
// the SDK's own business — extra fields, merged and encoded with sjson
// (top-level thinking switches, an assistant message's reasoning_content)
// — is still encoded by the SDK. Everything else the SDK does (base URL,
// auth, headers, errors, the response) it still does.
func (c *openAICall) body() ([]byte, error) {
	if c.extras != nil {
		b, err := c.params().MarshalJSON()
		if err != nil {
			return nil, err
		}
		return withStream(b), nil
	}
	n := 112 + len(c.model)
	for i := range c.messages {
		n += c.messages[i].sizeHint()
	}
	for _, t := range c.tools {
		n += len(t) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"messages":[`...)
	for i := range c.messages {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = c.messages[i].appendJSON(b); err != nil {
			return nil, err
		}
	}
	b = append(b, `],"model":`...)
	b = protocol.AppendJSONString(b, c.model)
	if c.maxTokens > 0 {
		if c.maxCompletion {
			b = append(b, `,"max_completion_tokens":`...)
		} else {
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, c.maxTokens, 10)
	}
	if c.effort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = protocol.AppendJSONString(b, string(c.effort))
	}
	b = append(b, `,"stream_options":{"include_usage":true}`...)
	if len(c.tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range c.tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, t...) // compact: json.Marshal's output
		}
		b = append(b, ']')
	}
	return append(b, `,"stream":true}`...), nil
}

// withStream adds "stream":true to the encoded object b as NewStreaming
// does (option.WithJSONSet: sjson appends a field that is not there yet
// before the closing brace). b is the SDK's encoding of the params: an
// object that never holds "stream" (the provider does not set it).
func withStream(b []byte) []byte {
	b = b[:len(b)-1] // '}'
	return append(b, `,"stream":true}`...)
}

// sizeHint is about the length of the message's encoding.
func (m *openAIMessage) sizeHint() int {
	n := 64 + len(m.text) + len(m.toolCallID)
	for _, p := range m.parts {
		n += 40 + len(p.text) + len(p.imageURL)
	}
	for _, tc := range m.toolCalls {
		n += 80 + len(tc.id) + len(tc.name) + len(tc.args)
	}
	return n
}

// appendJSON appends the message as the SDK encodes it (fields in the
// order of its types).
func (m *openAIMessage) appendJSON(b []byte) ([]byte, error) {
	switch m.role {
	case "system", "tool":
		b = append(b, `{"content":`...)
		b = protocol.AppendJSONString(b, m.text)
		if m.role == "tool" {
			b = append(b, `,"tool_call_id":`...)
			b = protocol.AppendJSONString(b, m.toolCallID)
		}
		b = append(b, `,"role":"`...)
		b = append(b, m.role...)
		return append(b, `"}`...), nil
	case "assistant":
		if m.reasoning != "" {
			enc, err := m.param().MarshalJSON()
			return append(b, enc...), err
		}
		b = append(b, '{')
		if !m.noContent {
			b = append(b, `"content":`...)
			b = protocol.AppendJSONString(b, m.text)
			b = append(b, ',')
		}
		if len(m.toolCalls) > 0 {
			b = append(b, `"tool_calls":[`...)
			for i, tc := range m.toolCalls {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = protocol.AppendJSONString(b, tc.id)
				b = append(b, `,"function":{"arguments":`...)
				b = protocol.AppendJSONString(b, tc.args)
				b = append(b, `,"name":`...)
				b = protocol.AppendJSONString(b, tc.name)
				b = append(b, `},"type":"function"}`...)
			}
			b = append(b, "],"...)
		}
		return append(b, `"role":"assistant"}`...), nil
	}
	b = append(b, `{"content":`...)
	if m.parts == nil {
		b = protocol.AppendJSONString(b, m.text)
	} else {
		b = append(b, '[')
		for i, p := range m.parts {
			if i > 0 {
				b = append(b, ',')
			}
			if p.imageURL != "" {
				b = append(b, `{"image_url":{"url":`...)
				b = protocol.AppendJSONString(b, p.imageURL)
				b = append(b, `},"type":"image_url"}`...)
			} else {
				b = append(b, `{"text":`...)
				b = protocol.AppendJSONString(b, p.text)
				b = append(b, `,"type":"text"}`...)
			}
		}
		b = append(b, ']')
	}
	return append(b, `,"role":"user"}`...), nil
}
