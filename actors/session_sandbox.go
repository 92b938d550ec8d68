package actors

import (
	"path/filepath"
	"slices"

	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// The session's sandbox (tools/sandbox): one jail for the processes its
// tools start — bash, the bash of its sub-agents, its stdio MCP servers —
// writable in its roots, with its own TMPDIR, closed (the temporary
// directory removed) when the session actor stops.

// sandboxRoots are the directories the session's processes may write: its
// cwd, then its additional directories when it has them.
func (s *session) sandboxRoots() []string {
	return append([]string{s.meta.Cwd}, s.meta.AdditionalDirectories...)
}

// sandboxJail is the session's jail for its current roots (nil when
// commands are not sandboxed).
func (s *session) sandboxJail() *sandbox.Jail {
	roots := s.sandboxRoots()
	if s.jail != nil && slices.Equal(roots, s.jailRoots) {
		return s.jail
	}
	if s.deps.Config.Sandbox.Active() {
		if exposed := sandbox.Exposed(roots, s.deps.Config.Home, s.deps.Config.Sandbox.Settings.ProtectedHome()); len(exposed) > 0 {
			s.log.Warn().Strs("exposed", exposed).Msg("the session's directories contain these; the sandbox cannot hide them")
		}
	}
	if s.jail == nil {
		s.jail = s.deps.Config.Sandbox.NewJail(roots, filepath.Join(s.deps.Config.Home, tools.SpillDir))
		s.jailRoots = roots
		return s.jail
	}
	s.jail.SetRoots(roots)
	s.jailRoots = roots
	return s.jail
}

// closeSandbox closes the jail off the actor: its temporary directory can
// hold a build cache of tens of thousands of files.
func (s *session) closeSandbox() {
	if s.jail != nil {
		go s.jail.Close()
	}
	s.jail, s.jailRoots = nil, nil
}

// sandboxedToolCall is the permission request's tool call for a call
// contained by the sandbox: its title says so and its _meta carries the
// sandbox's entry, so that a client can show it.
func sandboxedToolCall(a *permissionAsk, caps tools.ClientCaps) {
	if a.contained == nil {
		return
	}
	meta := a.contained.Sandbox(caps)
	if meta == nil {
		return
	}
	a.toolCall.Title = "Run (sandboxed): " + a.toolCall.Title
	a.toolCall.Meta = map[string]any{sandbox.MetaKey: meta}
}
