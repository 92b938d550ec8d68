package actors

import (
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/tools/sandbox"
)

// The connection's handshake: initialize and authenticate.

func (c *connection) initialize(m *protocol.Message) {
	var req protocol.InitializeRequest
	if len(m.Params) > 0 {
		if err := protocol.Unmarshal(m.Params, &req); err != nil {
			c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"error": err.Error()}))
			return
		}
	}
	c.initialized = true
	if caps := req.ClientCapabilities; caps != nil && caps.Session != nil {
		c.notices = caps.Session.Notices != nil
		c.compaction = caps.Session.Compaction != nil
		c.booleanOptions = caps.Session.ConfigOptions != nil && caps.Session.ConfigOptions.Boolean != nil
	}
	c.caps = capsOf(req.ClientCapabilities)
	c.terminalLogin = terminalLoginOf(req.ClientCapabilities)
	c.reply(m.ID, protocol.InitializeResponse{
		ProtocolVersion: protocol.ProtocolVersion,
		AgentCapabilities: protocol.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: protocol.PromptCapabilities{Image: true, EmbeddedContext: true},
			McpCapabilities:    &protocol.McpCapabilities{HTTP: true, SSE: true},
			SessionCapabilities: protocol.SessionCapabilities{
				List:   &protocol.Empty{},
				Close:  &protocol.Empty{},
				Resume: &protocol.Empty{},
				Fork:   &protocol.Empty{},
				Delete: &protocol.Empty{},

				AdditionalDirectories: &protocol.Empty{},
			},
			Auth: &protocol.AgentAuthCapabilities{Logout: &protocol.Empty{}},
		},
		AgentInfo:   protocol.Implementation{Name: "iac-code", Version: c.deps.Config.Version},
		AuthMethods: c.authMethods(),
		Meta:        map[string]any{sandbox.MetaKey: c.deps.Config.Sandbox.Meta()},
	})
}

// authenticate re-reads the configuration (environment and files), so a key
// set after the server started is picked up. The terminal login's id is
// taken too: a client of the older _meta convention sees it as an agent
// method and may call authenticate after running the login.
func (c *connection) authenticate(m *protocol.Message) {
	var req protocol.AuthenticateRequest
	if err := protocol.Unmarshal(m.Params, &req); err != nil || (req.MethodID != authAPIKey && req.MethodID != authTerminal) {
		c.fail(m.ID, protocol.ErrInvalidParams(map[string]string{"methodId": "unknown authentication method"}))
		return
	}
	if c.deps.LLM != nil {
		if _, err := c.deps.LLM.Reload(); err != nil {
			c.log.Warn().Err(err).Msg("authenticate: configuration did not reload")
		}
	}
	if !c.deps.hasCredentials() {
		c.fail(m.ID, c.deps.errAuthRequired())
		return
	}
	c.reply(m.ID, struct{}{})
}

func (d *Deps) errAuthRequired() *protocol.Error {
	return protocol.NewError(protocol.CodeAuthRequired, "Authentication required",
		map[string]string{"code": "auth_required", "hint": d.authHint()})
}

func (d *Deps) authHint() string {
	if d.LLM != nil {
		return d.LLM.Config().AuthHint()
	}
	return llm.AuthHint
}

func (d *Deps) hasCredentials() bool {
	if d.LLM != nil {
		return d.LLM.Config().HasCredentials()
	}
	return d.Config.LLM.APIKey != ""
}
