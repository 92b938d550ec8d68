package protocol

import (
	"bytes"
	"fmt"
	"strconv"
)

// JSON-RPC 2.0 and ACP error codes.
const (
	CodeParseError       = -32700
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeRequestCancelled = -32800
	CodeAuthRequired     = -32000
	CodeResourceNotFound = -32002
	// Server-defined codes (JSON-RPC's server error range; the ACP schema
	// allows any other integer).
	CodeSessionInUse = -32010 // the session is open in (or was taken over by) another iac-code process
	CodeLimit        = -32011 // a server limit was reached (sessions, descriptors)
)

// Error is a JSON-RPC error object. It also implements the error interface so
// handlers can return it directly.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// NewError builds an error object with optional data.
func NewError(code int, message string, data any) *Error {
	return &Error{Code: code, Message: message, Data: data}
}

// ErrParse is the answer to a line that is not JSON.
func ErrParse(detail string) *Error {
	return NewError(CodeParseError, "Parse error", map[string]string{"error": detail})
}

// ErrInvalidRequest is the answer to JSON that is not a JSON-RPC request.
func ErrInvalidRequest(detail string) *Error {
	return NewError(CodeInvalidRequest, "Invalid request", map[string]string{"error": detail})
}

// ErrMethodNotFound is the answer to an unknown method.
func ErrMethodNotFound(method string) *Error {
	return NewError(CodeMethodNotFound, "Method not found", map[string]string{"method": method})
}

// ErrInvalidParams reports bad parameters; data names the offending field(s).
func ErrInvalidParams(data any) *Error {
	return NewError(CodeInvalidParams, "Invalid params", data)
}

// ErrSessionNotFound is the answer to a session id that names no session
// the caller may use: unknown, deleted, or another person's (the same
// answer, so that a refusal tells nothing). It is the protocol's -32002
// Resource not found with data.sessionId (the TypeScript SDK's
// RequestError.sessionNotFound); data.session_id, iac-code's answer before
// 0.2 (with -32602), stays beside it for clients that read it.
func ErrSessionNotFound(sessionID string) *Error {
	return NewError(CodeResourceNotFound, "Session not found",
		map[string]string{"sessionId": sessionID, "session_id": "Session not found"})
}

// ErrSessionInUse: another iac-code process holds the session: two editor
// windows on one IAC_CODE_HOME (pid, when known), or another pod on the
// shared store (its incarnation id). Nothing was changed.
func ErrSessionInUse(sessionID string, pid int, incarnation string) *Error {
	data := map[string]any{"reason": "session_in_use", "sessionId": sessionID}
	msg := "Session is open in another iac-code process" + holder(data, pid, incarnation)
	return NewError(CodeSessionInUse, msg+"; close it there (or wait until it is idle) and try again", data)
}

// ErrSessionTurnElsewhere: another iac-code process on the same home holds
// the session because a turn is running there (between turns it lets go at
// once). Nothing was changed.
func ErrSessionTurnElsewhere(sessionID string, pid int) *Error {
	data := map[string]any{"reason": "session_turn_running", "sessionId": sessionID}
	msg := "Session is open in another iac-code process" + holder(data, pid, "") + " and a turn is running there"
	return NewError(CodeSessionInUse, msg+"; wait for that turn to end (or cancel it there) and try again", data)
}

// ErrSessionTakenOver: while this process had the session open, the shared
// store handed it to another process (this one stopped renewing its hold in
// time: a network partition, a stall). Nothing of the request was saved
// from then on, and the session writes nothing more here until it is taken
// back: the next request does that, with what the other process wrote, or
// answers ErrSessionInUse while that process still holds it.
func ErrSessionTakenOver(sessionID string, pid int, incarnation string) *Error {
	data := map[string]any{"reason": "session_taken_over", "sessionId": sessionID}
	msg := "Session was taken over by another iac-code process" + holder(data, pid, incarnation)
	return NewError(CodeSessionInUse, msg+"; what followed was not saved. Try again to continue from what that process saved", data)
}

// ErrSessionHolderGone: the request went to the pod holding the session
// (the client's pod shares it from there) and that pod stopped or died
// before answering. Whether it was done is unknown; loading the session
// again continues it from what was saved.
func ErrSessionHolderGone(sessionID, incarnation string) *Error {
	data := map[string]any{"reason": "session_holder_gone", "sessionId": sessionID}
	msg := "The iac-code process holding the session went away" + holder(data, 0, incarnation)
	return NewError(CodeSessionInUse, msg+" before answering; load the session again to continue from what it saved", data)
}

// holder names a session's holding process in data and as " (…)" for the
// message; "" when unknown.
func holder(data map[string]any, pid int, incarnation string) string {
	switch {
	case incarnation != "":
		data["incarnation"] = incarnation
		return " (incarnation " + incarnation + ")"
	case pid > 0:
		data["pid"] = pid
		return " (pid " + strconv.Itoa(pid) + ")"
	}
	return ""
}

// ErrLimit: a server limit refused the request; reason names it.
func ErrLimit(message, reason string, limit int) *Error {
	return NewError(CodeLimit, message, map[string]any{"reason": reason, "limit": limit})
}

// ErrTokenBudget: the principal's token budget for period ("day" or
// "month") is used up; the prompt was refused before the model was called.
// resetAt (RFC 3339, UTC) is when the budget resets.
func ErrTokenBudget(period string, limit, used int64, resetAt string) *Error {
	return NewError(CodeLimit, fmt.Sprintf("Token budget exceeded: %d of %d tokens used this %s; it resets at %s",
		used, limit, period, resetAt), map[string]any{"reason": ReasonTokenBudget, "period": period, "limit": limit,
		"used": used, "resetAt": resetAt})
}

// ReasonTokenBudget is the data.reason of ErrTokenBudget.
const ReasonTokenBudget = "token_budget_exceeded"

// ErrInternal reports a server-side failure; errorID lets an operator find the log line.
func ErrInternal(detail, errorID string) *Error {
	return NewError(CodeInternalError, "Internal error: "+detail, map[string]string{"error": detail, "error_id": errorID})
}

// Message is any JSON-RPC 2.0 message. Which kind it is follows from the
// fields present: a request has a method and an id, a notification a method
// and no id, a response an id and a result or an error.
type Message struct {
	JSONRPC string     `json:"jsonrpc"`
	ID      RawMessage `json:"id,omitempty"`
	Method  string     `json:"method,omitempty"`
	Params  RawMessage `json:"params,omitempty"`
	Result  RawMessage `json:"result,omitempty"`
	Error   *Error     `json:"error,omitempty"`
	// Traceparent is a W3C trace context that came beside the message (an
	// HTTP request's traceparent header), never on the wire itself.
	Traceparent string `json:"-"`
}

// IsRequest reports a method call that expects an answer.
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports a method call without an id.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports an answer to one of our requests.
func (m *Message) IsResponse() bool { return m.Method == "" && m.ID != nil }

var nullID = RawMessage("null")

// Decode parses one JSON-RPC message. A non-nil error is ready to be sent back
// with id null (or with the id, when one could be read). Ids are re-encoded
// (see CanonicalID), never passed through raw.
func Decode(data []byte) (*Message, *Error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, ErrParse("empty message")
	}
	if data[0] == '[' {
		if !Valid(data) {
			return nil, ErrParse("invalid JSON")
		}
		return nil, NewError(CodeInvalidRequest, "JSON-RPC batches are not supported", nil)
	}
	if data[0] != '{' {
		if !Valid(data) {
			return nil, ErrParse("invalid JSON")
		}
		return nil, ErrInvalidRequest("a JSON-RPC message must be an object")
	}
	var m Message
	if err := Unmarshal(data, &m); err != nil {
		if !Valid(data) {
			if tooDeep(data) {
				// Well-formed as far as we can tell, only deeper than the
				// decoder goes: the request still gets its answer.
				return &Message{ID: PeekID(data)}, ErrInvalidRequest("JSON nested deeper than 10000 levels")
			}
			return nil, ErrParse("invalid JSON")
		}
		m.ID = CanonicalID(m.ID)
		return &m, ErrInvalidRequest(err.Error())
	}
	if m.JSONRPC != "2.0" {
		m.ID = CanonicalID(m.ID)
		return &m, ErrInvalidRequest(`"jsonrpc" must be "2.0"`)
	}
	if m.ID != nil {
		if m.ID = CanonicalID(m.ID); m.ID == nil {
			return &m, ErrInvalidRequest("id must be a number, a string or null")
		}
	}
	if m.Method == "" && m.ID == nil {
		return &m, ErrInvalidRequest("missing method")
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return &m, ErrInvalidRequest("a response needs a result or an error")
	}
	return &m, nil
}

func validID(id RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		return true
	case c == 'n':
		return bytes.Equal(id, nullID)
	case c == '-' || (c >= '0' && c <= '9'):
		return true
	}
	return false
}

// IntID returns the id as an integer, for matching answers to our own requests.
func IntID(id RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(id), 10, 64)
	return n, err == nil
}

type resultEnvelope struct {
	JSONRPC string     `json:"jsonrpc"`
	ID      RawMessage `json:"id"`
	Result  any        `json:"result"`
}

type errorEnvelope struct {
	JSONRPC string     `json:"jsonrpc"`
	ID      RawMessage `json:"id"`
	Error   *Error     `json:"error"`
}

type requestEnvelope struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int64  `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type notificationEnvelope struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// EncodeResult encodes a successful response. A nil id is written as null.
func EncodeResult(id RawMessage, result any) []byte {
	if id == nil {
		id = nullID
	}
	if result == nil {
		result = struct{}{}
	}
	return MustMarshal(resultEnvelope{JSONRPC: "2.0", ID: id, Result: result})
}

// EncodeError encodes an error response. A nil id is written as null.
func EncodeError(id RawMessage, e *Error) []byte {
	if id == nil {
		id = nullID
	}
	return MustMarshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: e})
}

// EncodeRequest encodes a server-to-client request with our own integer id.
func EncodeRequest(id int64, method string, params any) []byte {
	return MustMarshal(requestEnvelope{JSONRPC: "2.0", ID: id, Method: method, Params: params})
}

// EncodeNotification encodes a notification.
func EncodeNotification(method string, params any) []byte {
	return MustMarshal(notificationEnvelope{JSONRPC: "2.0", Method: method, Params: params})
}
