package actors

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
)

// Slash commands besides /compact and /clear (session_prompt.go): /model
// and /mode change the session as the config options do, /status reports,
// all three answered here without a model call; /init becomes a prompt
// that has the model write AGENTS.md through its tools, so every write
// goes through the normal permissions.

var moreCommands = []protocol.AvailableCommand{
	{Name: "model", Description: "Show the models, or switch to one", Input: &protocol.AvailableCmdInput{Hint: "model name (optional)"}},
	{Name: "mode", Description: "Show the modes, or switch to one", Input: &protocol.AvailableCmdInput{Hint: "mode id (optional)"}},
	{Name: "status", Description: "Provider, model, context use, MCP servers"},
	{Name: "init", Description: "Write an AGENTS.md for this project (asks before writing)"},
}

// initPrompt is what /init asks of the model.
const initPrompt = "Create an AGENTS.md file at the root of this project for coding agents that will work on it. " +
	"First look around: read the README and the build files, list the main directories. Then write AGENTS.md " +
	"with the write_file tool: what the project is, how to build, test and lint it (exact commands), the layout " +
	"of the code, and the conventions a contributor must follow. Keep it short and factual; if an AGENTS.md " +
	"exists already, improve it instead of starting over."

// parseCommand reads "/name rest" from the first text of m ("" when the
// prompt is not a command).
func parseCommand(m *llm.Message) (name, arg string) {
	text := strings.TrimSpace(m.FirstText())
	if !strings.HasPrefix(text, "/") {
		return "", ""
	}
	name, arg, _ = strings.Cut(text[1:], " ")
	return name, strings.TrimSpace(arg)
}

// localCommand answers /model, /mode and /status, and turns /init into its
// prompt; it reports whether the prompt was answered.
func (s *session) localCommand(ctx actor.Context, r *sessionRequest, user *llm.Message) bool {
	name, arg := parseCommand(user)
	switch name {
	case "model":
		s.modelCommand(ctx, r, arg)
	case "mode":
		s.modeCommand(ctx, r, arg)
	case "status":
		s.commandReply(ctx, r, s.status())
	case "init":
		user.Content = []llm.Block{{Type: llm.BlockText, Text: initPrompt}}
		return false
	default:
		if !strings.HasPrefix(name, "mcp__") {
			return false
		}
		s.mcpPromptCommand(ctx, r, user, name, arg) // session_mcp_prompts.go
	}
	return true
}

// commandReply answers a command's prompt with reply, without a model call.
func (s *session) commandReply(ctx actor.Context, r *sessionRequest, reply string) {
	if s.lease.fenced != nil {
		s.respondTo(ctx, r.conn, r.id, nil, s.lease.fenced)
		return
	}
	s.emit(ctx, protocol.ChunkUpdate{SessionUpdate: protocol.UpdateAgentMessageChunk, Content: protocol.Text(reply)})
	s.respondTo(ctx, r.conn, r.id, protocol.PromptResponse{StopReason: protocol.StopEndTurn, Usage: promptUsage(llm.Usage{})}, nil)
}

// modelCommand answers /model: the models, or a switch to one.
func (s *session) modelCommand(ctx actor.Context, r *sessionRequest, name string) {
	if name == "" {
		s.commandReply(ctx, r, "Model: "+s.meta.Model+"\nAvailable: "+strings.Join(s.models(), ", "))
		return
	}
	s.optionCommand(ctx, r, "model", name, "Unknown model %q. Available: %s", s.models())
}

// modeCommand answers /mode: the modes, or a switch to one.
func (s *session) modeCommand(ctx actor.Context, r *sessionRequest, id string) {
	ids := make([]string, len(sessionModes))
	for i, m := range sessionModes {
		ids[i] = m.ID
	}
	if id == "" {
		s.commandReply(ctx, r, "Mode: "+s.meta.Mode+"\nAvailable: "+strings.Join(ids, ", "))
		return
	}
	s.optionCommand(ctx, r, "mode", id, "Unknown mode %q. Available: %s", ids)
}

// optionCommand sets option to value as set_config_option does, answering
// the prompt in text; unknown: the values it takes, in text too.
func (s *session) optionCommand(ctx actor.Context, r *sessionRequest, option, value, unknown string, values []string) {
	name := strings.ToUpper(option[:1]) + option[1:]
	if e := s.chooseOption(ctx, option, value); e != nil && e != s.lease.fenced {
		s.commandReply(ctx, r, fmt.Sprintf(unknown, value, strings.Join(values, ", ")))
		return
	}
	s.commandReply(ctx, r, name+" set to "+value+".") // fenced: commandReply answers so
}

// describeSandbox is the sandbox's _meta entry in words.
func describeSandbox(m map[string]any) string {
	mode := fmt.Sprint(m["mode"])
	if mode == "landlock" {
		return fmt.Sprintf("landlock (ABI %v, network %v)", m["abi"], m["network"])
	}
	if r, ok := m["reason"].(string); ok && r != "" {
		return mode + " (" + r + ")"
	}
	return mode
}

// status describes the session's setup as it is now.
func (s *session) status() string {
	cfg := s.deps.llmConfig()
	provider := cfg.Provider
	if provider == "" {
		provider = llm.DefaultProvider
	}
	used := estimateTokens(store.Context(s.entries))
	window := s.deps.contextWindow(s.meta.Model)
	var b strings.Builder
	fmt.Fprintf(&b, "Provider: %s\nModel: %s\nMode: %s\n", provider, s.meta.Model, s.meta.Mode)
	if s.takesThoughtLevel() {
		fmt.Fprintf(&b, "Thinking: %s\n", s.thoughtLevel())
	}
	fmt.Fprintf(&b, "Context: about %d of %d tokens (%.0f%%)\n", used, window, 100*float64(used)/float64(max(window, 1)))
	fmt.Fprintf(&b, "Working directory: %s\n", s.meta.Cwd)
	for _, d := range s.meta.AdditionalDirectories {
		fmt.Fprintf(&b, "Additional directory: %s\n", d)
	}
	if len(s.mcp.status) == 0 {
		b.WriteString("MCP servers: none\n")
	}
	for _, st := range s.mcp.status {
		fmt.Fprintf(&b, "MCP server %s (%s): %s, %d tools", st.Name, st.Type, st.Status, st.Tools)
		if st.Error != "" {
			b.WriteString(" — " + st.Error)
		}
		b.WriteString("\n")
	}
	if li := s.loadedInstructions(); li != nil && len(li.Files) > 0 {
		fmt.Fprintf(&b, "Instructions given to the model: %s\n", strings.Join(li.Paths(), ", "))
	}
	if _, err := os.Stat(filepath.Join(s.meta.Cwd, "AGENTS.md")); err == nil {
		b.WriteString("AGENTS.md: present\n")
	} else {
		b.WriteString("AGENTS.md: none (/init writes one)\n")
	}
	b.WriteString("Sandbox: " + describeSandbox(s.deps.Config.Sandbox.Meta()))
	return b.String()
}
