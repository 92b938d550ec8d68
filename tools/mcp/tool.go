package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools"
)

// Tool is one tool of an MCP server offered to the model under a public
// name (mcp__<server>__<tool>). It reaches its server at run time: a call
// after the server went away is an error result.
type Tool struct {
	public   string
	server   *Server
	remote   string
	desc     string
	schema   json.RawMessage
	readOnly bool
	timeout  time.Duration
}

// ProgressInterval is the shortest time between two progress updates of a
// call shown to the client.
const ProgressInterval = 100 * time.Millisecond

// DefaultCallTimeout bounds one tool call (IAC_CODE_MCP_TOOL_TIMEOUT).
const DefaultCallTimeout = 600 * time.Second

// NewTool makes the tool t of srv known to the model as public.
func NewTool(public string, srv *Server, t *sdk.Tool, timeout time.Duration) *Tool {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	return &Tool{public: public, server: srv, remote: t.Name, desc: desc, schema: inputSchema(t.InputSchema),
		readOnly: ReadOnly(t.Annotations), timeout: timeout}
}

// ReadOnly reads a tool's annotations, which are hints from the server,
// not guarantees: read-only when readOnlyHint is true and destructiveHint
// is not true. Such a tool runs without asking.
func ReadOnly(a *sdk.ToolAnnotations) bool {
	return a != nil && a.ReadOnlyHint && (a.DestructiveHint == nil || !*a.DestructiveHint)
}

// inputSchema is the server's input schema as a JSON object schema; a
// missing or unusable one is the empty object schema.
func inputSchema(s any) json.RawMessage {
	empty := json.RawMessage(`{"type":"object","properties":{}}`)
	if s == nil {
		return empty
	}
	var obj map[string]any
	raw, err := json.Marshal(s)
	if err != nil || json.Unmarshal(raw, &obj) != nil || obj == nil {
		return empty
	}
	if _, ok := obj["type"]; !ok {
		obj["type"] = "object"
		raw, _ = json.Marshal(obj)
	}
	return raw
}

func (t *Tool) Name() string            { return t.public }
func (t *Tool) Description() string     { return t.desc }
func (t *Tool) Schema() json.RawMessage { return t.schema }
func (t *Tool) Kind() tools.Kind        { return tools.KindOther }
func (t *Tool) ReadOnly() bool          { return t.readOnly }

// Server is the server the tool belongs to.
func (t *Tool) Server() *Server { return t.server }

// Remote is the tool's name on its server.
func (t *Tool) Remote() string { return t.remote }

// Prepare checks the arguments once, strictly: a JSON object without a
// duplicate key at any depth, so that every parser reads them alike. The
// call then sends those very bytes (numbers keep their precision): exactly
// what was shown as rawInput and asked about.
func (t *Tool) Prepare(_ *tools.Env, input json.RawMessage) (tools.Call, error) {
	args := json.RawMessage(`{}`)
	if trimmed := bytes.TrimSpace(input); len(trimmed) > 0 && string(trimmed) != "null" {
		var check map[string]any
		if err := protocol.UnmarshalStrict(trimmed, &check); err != nil {
			var se *protocol.StrictError
			reason := err.Error()
			if errors.As(err, &se) {
				reason = se.Reason
			}
			return nil, &tools.InputError{Tool: t.public, Reason: reason}
		}
		args = append(json.RawMessage(nil), trimmed...)
	}
	title := tools.Title(t.server.Name(), 100) + ": " + tools.Title(t.remote, 200)
	return &tools.FuncCall{TitleText: title, RunFunc: func(ctx context.Context, progress func(string)) tools.Result {
		return t.run(ctx, args, progress)
	}}, nil
}

func (t *Tool) run(ctx context.Context, args json.RawMessage, progress func(string)) tools.Result {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var onProgress func(Progress)
	if progress != nil {
		// At most one update per ProgressInterval reaches the client (as
		// for bash output); the final result follows anyway.
		var mu sync.Mutex
		var last time.Time
		onProgress = func(p Progress) {
			mu.Lock()
			due := time.Since(last) >= ProgressInterval
			if due {
				last = time.Now()
			}
			mu.Unlock()
			if due {
				progress(progressText(p))
			}
		}
	}
	res, err := t.server.Call(ctx, t.remote, args, onProgress)
	switch {
	case errors.Is(err, ErrNotConnected):
		return tools.Errorf(fmt.Sprintf("MCP server '%s' is not connected; tool '%s' is unavailable.", t.server.Name(), t.remote))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return tools.Errorf(fmt.Sprintf("MCP tool '%s' of server '%s' timed out after %s.", t.remote, t.server.Name(), t.timeout))
	case ctx.Err() != nil:
		return tools.Errorf("MCP call cancelled.")
	case err != nil:
		return tools.Errorf(fmt.Sprintf("MCP tool '%s' of server '%s' failed: %v", t.remote, t.server.Name(), err))
	}
	return ToResult(res)
}

func progressText(p Progress) string {
	text := fmt.Sprintf("Progress: %g", p.Progress)
	if p.Total > 0 {
		text = fmt.Sprintf("Progress: %g/%g", p.Progress, p.Total)
	}
	if p.Message != "" {
		text += " — " + p.Message
	}
	return text
}

// MaxNameLen is the longest tool name model APIs accept.
const MaxNameLen = 64

var unsafeRun = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// Ref names a tool of a server.
type Ref struct{ Server, Tool string }

// PublicNames gives each tool its name for the model:
// mcp__<server>__<tool>, each run of characters outside [A-Za-z0-9_]
// replaced by "_"; a name over 64 characters is cut and suffixed with a
// short hash of the server and tool; names that still collide are all
// suffixed. The result is in the order of refs and does not depend on
// which other servers exist, except for collisions.
func PublicNames(refs []Ref) []string {
	out := make([]string, len(refs))
	count := map[string]int{}
	for i, r := range refs {
		out[i] = baseName(r)
		count[out[i]]++
	}
	for i, r := range refs {
		if count[out[i]] > 1 {
			out[i] = suffixed(out[i], r)
		}
	}
	return out
}

func baseName(r Ref) string {
	name := "mcp__" + unsafeRun.ReplaceAllString(r.Server, "_") + "__" + unsafeRun.ReplaceAllString(r.Tool, "_")
	if len(name) > MaxNameLen {
		return suffixed(name, r)
	}
	return name
}

// suffixed appends _<8 hex of sha256(server, tool)>, cutting name so that
// the whole fits MaxNameLen.
func suffixed(name string, r Ref) string {
	sum := sha256.Sum256([]byte(r.Server + "\x00" + r.Tool))
	h := "_" + hex.EncodeToString(sum[:4])
	if len(name) > MaxNameLen-len(h) {
		name = name[:MaxNameLen-len(h)]
	}
	return name + h
}
