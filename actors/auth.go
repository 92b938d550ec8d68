package actors

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Auth method ids: the key the server is configured with (authenticate
// re-reads the configuration), and `iac-code login` in a terminal.
const (
	authAPIKey   = "api-key"
	authTerminal = "login"
)

// terminalLogin is how a client runs a terminal login: as a method of type
// terminal (clientCapabilities.auth.terminal), as an agent method carrying
// _meta["terminal-auth"] (the older convention, clientCapabilities._meta
// ["terminal-auth"]: true; the ACP Registry's validator sends it), or both.
type terminalLogin struct{ typed, meta bool }

func terminalLoginOf(c *protocol.ClientCapabilities) terminalLogin {
	if c == nil {
		return terminalLogin{}
	}
	return terminalLogin{typed: c.Auth != nil && c.Auth.Terminal, meta: c.TerminalAuthMeta()}
}

// authMethods is never empty: the key method always (its description says
// how to configure one when none is), and the terminal login when the
// client can run it (the schema allows the terminal type only then).
func (c *connection) authMethods() []protocol.AuthMethod {
	provider := c.deps.llmConfig().Provider
	if provider == "" {
		provider = llm.DefaultProvider
	}
	desc := "Uses the API key configured for provider " + provider +
		" (environment or .credentials.yml); authenticate re-reads the configuration."
	if !c.deps.hasCredentials() {
		desc = c.deps.authHint()
	}
	methods := []protocol.AuthMethod{{ID: authAPIKey, Name: "API key", Description: desc}}
	if !c.terminalLogin.typed && !c.terminalLogin.meta {
		return methods
	}
	login := protocol.AuthMethod{ID: authTerminal, Name: "Log in in a terminal",
		Description: "Runs `iac-code login`: choose the provider and paste its API key; it is kept in .credentials.yml (mode 0600)."}
	if c.terminalLogin.typed {
		login.Type, login.Args = protocol.AuthTerminal, []string{loginCommand}
	}
	if c.terminalLogin.meta {
		login.Meta = map[string]any{protocol.MetaTerminalAuth: map[string]any{
			"command": executable(), "args": []string{loginCommand}, "label": "iac-code login"}}
	}
	return append(methods, login)
}

// loginCommand is the argument that runs the terminal login.
const loginCommand = "login"

// executable is this program's path, for a client that runs the login
// itself (the older convention names the command); "iac-code" (found on
// PATH) when it cannot be known.
func executable() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return "iac-code"
}

// usableCredentials reports whether a model call can be attempted, reading
// the configuration again when it had no key: a terminal login (another
// process) may have stored one since.
func (d *Deps) usableCredentials(log zerolog.Logger) bool {
	if d.hasCredentials() {
		return true
	}
	if d.LLM != nil {
		if _, err := d.LLM.Reload(); err != nil {
			log.Warn().Err(err).Msg("configuration did not reload")
		}
	}
	return d.hasCredentials()
}

// logout forgets the stored key of the active provider (its
// .credentials.yml entry) and reloads the configuration: later model calls
// answer the auth error. A key that comes from the environment cannot be
// forgotten by the server: that is said, not pretended.
func (c *connection) logout(m *protocol.Message) {
	if c.who.Principal != DefaultPrincipal { // ConnectAs names an empty principal DefaultPrincipal
		// The key is the server's, shared by every user: one of them
		// cannot take it away from the others.
		c.fail(m.ID, protocol.NewError(protocol.CodeInvalidRequest,
			"logout forgets the server's API key, which every user shares; only its operator can (stdio or the shared token)",
			map[string]string{"reason": "shared_credential"}))
		return
	}
	cfg := c.deps.llmConfig()
	home := c.deps.Config.Home
	if cfg.Home != "" {
		home = cfg.Home
	}
	if _, err := llm.ForgetCredential(home, cfg.Provider); err != nil {
		errorID := newErrorID()
		c.log.Error().Err(err).Str("error_id", errorID).Msg("logout: cannot update the credentials file")
		c.fail(m.ID, protocol.ErrInternal("cannot update the credentials file", errorID))
		return
	}
	if c.deps.LLM != nil {
		if _, err := c.deps.LLM.Reload(); err != nil {
			c.log.Warn().Err(err).Msg("logout: configuration did not reload")
		}
	}
	if after := c.deps.llmConfig(); after.APIKey != "" {
		c.fail(m.ID, protocol.NewError(protocol.CodeInvalidRequest,
			"The API key of provider "+after.Provider+" comes from "+after.Sources["apiKey"]+
				"; logout cannot forget it (unset it where it is set)", map[string]string{"reason": "key_not_stored"}))
		return
	}
	c.reply(m.ID, struct{}{})
}
