// Package acpclient is the load generator's side of ACP: a stdio client
// (NDJSON over the server's stdin/stdout) and an HTTP+SSE client (POST /acp,
// GET /acp event streams with Last-Event-ID, DELETE /acp), both written for
// low overhead per message so that the client is not the bottleneck.
package acpclient

import (
	"bytes"
	"fmt"
	"strconv"

	// go-json: decoding the responses with encoding/json (its validity scan
	// and reflection) was ~6 % of acp-bench's CPU in churn.
	json "github.com/goccy/go-json"
)

// Kind is what a server→client JSON-RPC message is.
type Kind uint8

// Kinds of messages.
const (
	KindOther Kind = iota
	// KindUpdate is a session/update notification (the hot path: it is
	// recognised without decoding).
	KindUpdate
	KindResponse
	KindRequest
	KindNotification
)

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s %s", e.Code, e.Message, e.Data)
}

// Msg is a classified message. Data is the raw message.
type Msg struct {
	Kind   Kind
	ID     int64 // numeric id of a response or request; -1 otherwise
	Method string
	Result json.RawMessage
	Err    *RPCError
	Data   []byte
}

var (
	updateKey = []byte(`"method":"session/update"`)
	chunkKey  = []byte(`"agent_message_chunk"`)
)

// Parse classifies one message. A session/update is recognised by a byte
// search alone; everything else is decoded (rare: responses and requests).
func Parse(data []byte) Msg {
	if bytes.Contains(data, updateKey) {
		return Msg{Kind: KindUpdate, ID: -1, Method: "session/update", Data: data}
	}
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	m := Msg{ID: -1, Data: data}
	if err := json.Unmarshal(data, &env); err != nil {
		return m
	}
	m.Method, m.Result, m.Err = env.Method, env.Result, env.Error
	if id, err := strconv.ParseInt(string(bytes.TrimSpace(env.ID)), 10, 64); err == nil {
		m.ID = id
	}
	hasID := len(env.ID) > 0 && string(env.ID) != "null"
	switch {
	case env.Method != "" && hasID:
		m.Kind = KindRequest
	case env.Method != "":
		m.Kind = KindNotification
	case hasID || env.Error != nil:
		m.Kind = KindResponse
	}
	return m
}

// IsMessageChunk reports an agent_message_chunk update.
func IsMessageChunk(data []byte) bool { return bytes.Contains(data, chunkKey) }

// Request encodes a JSON-RPC request.
func Request(id int64, method string, params any) []byte {
	b, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params})
	if err != nil {
		panic(err)
	}
	return b
}

// Initialize is the initialize request with id.
func Initialize(id int64) []byte {
	return Request(id, "initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": false, "writeTextFile": false}, "terminal": false},
		"clientInfo":         map[string]string{"name": "acp-bench", "version": "1"},
	})
}

// NewSession is session/new for cwd.
func NewSession(id int64, cwd string) []byte {
	return Request(id, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
}

// Prompt is a one-text-block session/prompt.
func Prompt(id int64, sessionID, text string) []byte {
	return Request(id, "session/prompt", map[string]any{
		"sessionId": sessionID,
		"prompt":    []map[string]string{{"type": "text", "text": text}},
	})
}

// CloseSession is session/close.
func CloseSession(id int64, sessionID string) []byte {
	return Request(id, "session/close", map[string]string{"sessionId": sessionID})
}

// SessionID reads result.sessionId of a session/new response.
func SessionID(result json.RawMessage) (string, error) {
	var r struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(result, &r); err != nil || r.SessionID == "" {
		return "", fmt.Errorf("no sessionId in %s", result)
	}
	return r.SessionID, nil
}

// StopReason reads result.stopReason of a session/prompt response.
func StopReason(result json.RawMessage) string {
	var r struct {
		StopReason string `json:"stopReason"`
	}
	_ = json.Unmarshal(result, &r)
	return r.StopReason
}
