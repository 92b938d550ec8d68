package actors

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools/mcp"
)

// MCP prompts as slash commands: every prompt of a connected server is the
// command /mcp__<server>__<prompt> (named as MCP tools are, mcp.PublicNames)
// in available_commands_update, sent again whenever the list changes. The
// text after the command fills the prompt's arguments (promptArguments);
// prompts/get runs off the actor, the prompt waiting meanwhile as a held
// prompt does (cancel, close and a move answer it cancelled), and the text
// of the messages it returns becomes the user turn, shown to every client
// as the user message. A command typed while the servers are still
// starting waits for them as any prompt does. An unknown prompt, missing arguments or a failing
// prompts/get are answered with a text reply, not a model call.

// mcpPrompt is one server prompt offered as a slash command.
type mcpPrompt struct {
	command string
	srv     *mcp.Server
	prompt  *sdk.Prompt
}

// mcpPromptGot is the outcome of prompts/get for the held prompt r.
type mcpPromptGot struct {
	r    *sessionRequest
	user llm.Message
	res  *sdk.GetPromptResult
	err  error
}

func (*mcpPromptGot) IgnoreDeadLetterLogging() {}

// promptCommands names the prompts of the connected servers.
func promptCommands(servers []*mcpServer) []mcpPrompt {
	var refs []mcp.Ref
	var out []mcpPrompt
	for _, s := range servers {
		if s.state != mcp.Connected {
			continue
		}
		for _, p := range s.prompts {
			refs = append(refs, mcp.Ref{Server: s.cfg.Name, Tool: p.Name})
			out = append(out, mcpPrompt{srv: s.srv, prompt: p})
		}
	}
	for i, name := range mcp.PublicNames(refs) {
		out[i].command = name
	}
	return out
}

// availableCommands is what available_commands_update lists: the built-in
// commands, then the MCP prompts.
func (s *session) availableCommands() []protocol.AvailableCommand {
	out := append(slices.Clip(slashCommands), moreCommands...)
	for _, p := range s.mcp.prompts {
		out = append(out, promptCommand(p))
	}
	return out
}

func promptCommand(p mcpPrompt) protocol.AvailableCommand {
	c := protocol.AvailableCommand{Name: p.command, Description: p.prompt.Description}
	if c.Description == "" {
		c.Description = p.prompt.Title
	}
	if c.Description == "" {
		c.Description = "MCP prompt " + p.prompt.Name
	}
	switch args := p.prompt.Arguments; len(args) {
	case 0:
	case 1:
		c.Input = &protocol.AvailableCmdInput{Hint: args[0].Name}
	default:
		names := make([]string, len(args))
		for i, a := range args {
			names[i] = a.Name + "=…"
		}
		c.Input = &protocol.AvailableCmdInput{Hint: strings.Join(names, " ") + " (or the values in this order)"}
	}
	return c
}

// reportCommands sends available_commands_update when the MCP prompts
// changed since the list was last sent.
func (s *session) reportCommands(ctx actor.Context) {
	cmds := s.availableCommands()
	if s.mcp.commandsSent != nil && !slices.EqualFunc(cmds, s.mcp.commandsSent, sameCommand) {
		s.emit(ctx, protocol.AvailableCommandsUpdate{SessionUpdate: protocol.UpdateAvailableCommands, AvailableCommands: cmds})
	}
	s.mcp.commandsSent = cmds
}

func sameCommand(a, b protocol.AvailableCommand) bool {
	return a.Name == b.Name && a.Description == b.Description && (a.Input == nil) == (b.Input == nil) &&
		(a.Input == nil || a.Input.Hint == b.Input.Hint)
}

// mcpPromptCommand runs /mcp__server__prompt: it answers at once when the
// prompt is unknown or lacks arguments, else holds r and gets the prompt
// off the actor.
func (s *session) mcpPromptCommand(ctx actor.Context, r *sessionRequest, user *llm.Message, name, input string) {
	i := slices.IndexFunc(s.mcp.prompts, func(p mcpPrompt) bool { return p.command == name })
	if i < 0 && s.holdPrompt(r) {
		return // the servers are still starting: run it again once they are up
	}
	if i < 0 {
		s.commandReply(ctx, r, fmt.Sprintf("Unknown command /%s: no connected MCP server has that prompt.", name))
		return
	}
	p := s.mcp.prompts[i]
	args, extra, bad := promptArguments(p.prompt.Arguments, input)
	if bad != "" {
		s.commandReply(ctx, r, bad+"\nUsage: /"+p.command+" "+promptCommand(p).Input.Hint)
		return
	}
	c, cancel := context.WithTimeout(context.Background(), s.deps.Config.MCPToolTimeout)
	s.mcp.held, s.mcp.resolving, s.mcp.stopGet = r, true, cancel
	s.inHand.handedOff(r)
	srv, remote := p.srv, p.prompt.Name
	self, root, got := ctx.Self(), ctx.ActorSystem().Root, &mcpPromptGot{r: r, user: *user}
	go func() {
		defer cancel()
		got.res, got.err = srv.GetPrompt(c, remote, args)
		if got.err == nil && extra != "" {
			got.res.Messages = append(got.res.Messages, &sdk.PromptMessage{Role: "user", Content: &sdk.TextContent{Text: extra}})
		}
		root.Send(self, got)
	}()
}

// onMCPPromptGot starts the turn of a prompt got from an MCP server (or
// answers its failure), unless the prompt was cancelled meanwhile.
func (s *session) onMCPPromptGot(ctx actor.Context, m *mcpPromptGot) {
	if s.mcp.held != m.r || !s.mcp.resolving {
		return // cancelled, answered already
	}
	s.mcp.held, s.mcp.resolving, s.mcp.stopGet = nil, false, nil
	defer s.startQueued(ctx)
	if c := s.clients.find(m.r.conn); c != nil {
		s.conn, s.who = c.pid, c.who // answered to its sender, as prompt does
	}
	if m.err != nil {
		s.commandReply(ctx, m.r, "The MCP prompt could not be got: "+m.err.Error())
		return
	}
	blocks := promptMessageBlocks(m.res.Messages)
	if len(blocks) == 0 {
		s.commandReply(ctx, m.r, "The MCP prompt has no text.")
		return
	}
	user := m.user
	user.Content = blocks
	s.startPrompt(ctx, m.r, &user, true)
}

// promptMessageBlocks is the text of a prompt's messages, one block each.
func promptMessageBlocks(msgs []*sdk.PromptMessage) []llm.Block {
	var out []llm.Block
	for _, msg := range msgs {
		var text string
		switch c := msg.Content.(type) {
		case *sdk.TextContent:
			text = c.Text
		case *sdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				text = fmt.Sprintf("<resource uri=%q>\n%s\n</resource>", c.Resource.URI, c.Resource.Text)
			}
		case *sdk.ResourceLink:
			text = fmt.Sprintf("[resource_link: %s <%s>]", c.Name, c.URI)
		}
		if text != "" {
			out = append(out, llm.Block{Type: llm.BlockText, Text: text})
		}
	}
	return out
}

// promptArguments fills a prompt's arguments from the command's input: a
// prompt with one argument takes the whole input; with several, words
// name=value set the argument named so (a value in double quotes may hold
// spaces), the other words fill the remaining arguments in order, the last
// one taking the rest. A prompt without arguments passes its input on as
// extra text after its messages. bad says which required arguments are
// missing.
func promptArguments(params []*sdk.PromptArgument, input string) (args map[string]string, extra, bad string) {
	args = map[string]string{}
	switch len(params) {
	case 0:
		return nil, input, ""
	case 1:
		if input != "" {
			args[params[0].Name] = input
		}
	default:
		var positional []string
		for _, w := range splitWords(input) {
			name, value, ok := strings.Cut(w, "=")
			if ok && slices.ContainsFunc(params, func(p *sdk.PromptArgument) bool { return p.Name == name }) {
				args[name] = value
				continue
			}
			positional = append(positional, w)
		}
		var open []string
		for _, p := range params {
			if _, set := args[p.Name]; !set {
				open = append(open, p.Name)
			}
		}
		for i, name := range open {
			if i >= len(positional) {
				break
			}
			if i == len(open)-1 {
				args[name] = strings.Join(positional[i:], " ")
				break
			}
			args[name] = positional[i]
		}
	}
	var missing []string
	for _, p := range params {
		if p.Required && args[p.Name] == "" {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		bad = "Missing argument: " + strings.Join(missing, ", ")
	}
	return args, "", bad
}

// splitWords splits on spaces; double quotes group words (and are dropped).
func splitWords(s string) []string {
	var out []string
	var b strings.Builder
	quoted, started := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, started = !quoted, true
		case (r == ' ' || r == '\t' || r == '\n') && !quoted:
			if started {
				out = append(out, b.String())
				b.Reset()
				started = false
			}
		default:
			b.WriteRune(r)
			started = true
		}
	}
	if started {
		out = append(out, b.String())
	}
	return out
}
