package protocol

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// MCP server transports of the McpServer union.
const (
	McpStdio = "stdio"
	McpHTTP  = "http"
	McpSSE   = "sse"
)

// McpServerConfig is one validated entry of `mcpServers` (session/new, load,
// resume, fork): a stdio server (Command, Args, Env) or an HTTP/SSE one
// (URL, Headers).
type McpServerConfig struct {
	Type    string
	Name    string
	Command string
	Args    []string
	Env     []NameValue
	URL     string
	Headers []NameValue
}

// NameValue is an EnvVariable or an HttpHeader.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Equal reports whether two entries describe the same server.
func (c *McpServerConfig) Equal(o *McpServerConfig) bool {
	return c.Type == o.Type && c.Name == o.Name && c.Command == o.Command && c.URL == o.URL &&
		slices.Equal(c.Args, o.Args) && slices.Equal(c.Env, o.Env) && slices.Equal(c.Headers, o.Headers)
}

// mcpServerJSON is an entry as sent; raw members keep "absent", "null" and
// "wrong type" apart.
type mcpServerJSON struct {
	Type    RawMessage `json:"type"`
	Name    RawMessage `json:"name"`
	Command RawMessage `json:"command"`
	Args    RawMessage `json:"args"`
	Env     RawMessage `json:"env"`
	URL     RawMessage `json:"url"`
	Headers RawMessage `json:"headers"`
}

// MaxMcpServers bounds the entries of one mcpServers list: every stdio entry
// is a process (and a process group) for as long as the session lives.
const MaxMcpServers = 64

// ParseMcpServers validates the `mcpServers` member of a session request.
// Missing or null is an empty list. An entry without `type` (or "stdio")
// needs name and command (args and env may be absent or null); "http" and
// "sse" need name and an http(s) url (headers may be absent or null).
// Anything else is a -32602 error whose data names the entry
// (`mcpServers[1] ("docs"): url is required`). Two entries with one name:
// the later wins, and warnings says so.
func ParseMcpServers(raw RawMessage) (servers []McpServerConfig, warnings []string, e *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil, nil
	}
	var entries []RawMessage
	if raw[0] != '[' || Unmarshal(raw, &entries) != nil {
		return nil, nil, mcpError("mcpServers must be an array of MCP server entries")
	}
	if len(entries) > MaxMcpServers {
		return nil, nil, mcpError(fmt.Sprintf("at most %d MCP servers per session (got %d)", MaxMcpServers, len(entries)))
	}
	index := map[string]int{}
	for i, entry := range entries {
		s, err := parseMcpServer(entry)
		if err != "" {
			where := "mcpServers[" + strconv.Itoa(i) + "]"
			if s.Name != "" {
				where += " (" + strconv.Quote(s.Name) + ")"
			}
			return nil, nil, mcpError(where + ": " + err)
		}
		if at, dup := index[s.Name]; dup {
			warnings = append(warnings, fmt.Sprintf("mcpServers[%d] (%q) replaces an earlier entry of the same name", i, s.Name))
			servers[at] = s
			continue
		}
		index[s.Name] = len(servers)
		servers = append(servers, s)
	}
	return servers, warnings, nil
}

func mcpError(msg string) *Error {
	return ErrInvalidParams(map[string]string{"mcpServers": msg})
}

// parseMcpServer returns the entry and, when it is invalid, why (the entry
// then carries whatever name could be read, for the message).
func parseMcpServer(raw RawMessage) (McpServerConfig, string) {
	var s McpServerConfig
	var j mcpServerJSON
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || Unmarshal(t, &j) != nil {
		return s, "an entry must be a JSON object"
	}
	name, ok := optString(j.Name)
	s.Name = name
	switch {
	case !ok:
		return s, "name must be a string"
	case strings.TrimSpace(name) == "":
		return s, "name is required"
	case strings.ContainsRune(name, 0):
		return s, "name must not contain NUL"
	}
	typ, ok := optString(j.Type)
	if !ok {
		return s, "type must be a string"
	}
	if typ == "" {
		typ = McpStdio
	}
	s.Type = typ
	switch typ {
	case McpStdio:
		cmd, ok := optString(j.Command)
		if !ok {
			return s, "command must be a string"
		}
		if strings.TrimSpace(cmd) == "" {
			return s, "command is required"
		}
		s.Command = cmd
		if args := bytes.TrimSpace(j.Args); !isNull(args) {
			if args[0] != '[' || Unmarshal(args, &s.Args) != nil {
				return s, "args must be an array of strings"
			}
		}
		var bad string
		if s.Env, bad = parsePairs(j.Env, "env"); bad != "" {
			return s, bad
		}
		for _, v := range append([]string{cmd}, s.Args...) {
			if strings.ContainsRune(v, 0) {
				return s, "command and args must not contain NUL"
			}
		}
		for _, kv := range s.Env {
			if kv.Name == "" || strings.ContainsAny(kv.Name, "=\x00") || strings.ContainsRune(kv.Value, 0) {
				return s, fmt.Sprintf("env: invalid variable %q", kv.Name)
			}
		}
	case McpHTTP, McpSSE:
		u, ok := optString(j.URL)
		if !ok {
			return s, "url must be a string"
		}
		if u == "" {
			return s, "url is required"
		}
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return s, "url must be an absolute http or https URL"
		}
		s.URL = u
		var bad string
		if s.Headers, bad = parsePairs(j.Headers, "headers"); bad != "" {
			return s, bad
		}
		for _, h := range s.Headers {
			if !httpguts.ValidHeaderFieldName(h.Name) {
				return s, fmt.Sprintf("headers: invalid header name %q", h.Name)
			}
			if !httpguts.ValidHeaderFieldValue(h.Value) {
				return s, fmt.Sprintf("headers: the value of %q has characters a header cannot carry", h.Name)
			}
		}
	default:
		return s, fmt.Sprintf("unknown type %q (supported: stdio, http, sse)", typ)
	}
	return s, ""
}

// optString reads an optional string member: absent or null is "".
func optString(raw RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", true
	}
	var s string
	if Unmarshal(raw, &s) != nil || raw[0] != '"' {
		return "", false
	}
	return s, true
}

// parsePairs reads an optional array of {name, value} objects.
func parsePairs(raw RawMessage, member string) ([]NameValue, string) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, ""
	}
	var items []RawMessage
	if raw[0] != '[' || Unmarshal(raw, &items) != nil {
		return nil, member + " must be an array of {name, value} objects"
	}
	out := make([]NameValue, 0, len(items))
	for _, it := range items {
		var p struct {
			Name  RawMessage `json:"name"`
			Value RawMessage `json:"value"`
		}
		if t := bytes.TrimSpace(it); len(t) == 0 || t[0] != '{' || Unmarshal(t, &p) != nil {
			return nil, member + " must be an array of {name, value} objects"
		}
		name, okName := optString(p.Name)
		value, okValue := optString(p.Value)
		if !okName || !okValue || isNull(p.Name) || isNull(p.Value) {
			return nil, member + ": each item needs a string name and a string value"
		}
		out = append(out, NameValue{Name: name, Value: value})
	}
	return out, ""
}

func isNull(raw RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}
