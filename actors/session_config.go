package actors

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
)

// Session modes: how much a session may do without asking.
var sessionModes = []protocol.SessionMode{
	{ID: "default", Name: "Default", Description: "Ask before writing files or running commands"},
	{ID: "accept_edits", Name: "Accept edits", Description: "Write files without asking; ask before running commands"},
	{ID: "plan", Name: "Plan", Description: "Read-only tools only"},
	{ID: "bypass", Name: "Bypass permissions", Description: "Never ask"},
}

func validMode(id string) bool {
	for _, m := range sessionModes {
		if m.ID == id {
			return true
		}
	}
	return false
}

func modeState(current string) *protocol.SessionModeState {
	return &protocol.SessionModeState{CurrentModeID: current, AvailableModes: sessionModes}
}

// models lists the selectable models: the configured ones, the current first.
func (s *session) models() []string {
	cfg := s.deps.llmConfig()
	list := cfg.Models
	if len(list) == 0 {
		list = s.deps.Config.Models
	}
	if len(list) == 0 {
		list = []string{cfg.Model}
	}
	return list
}

func (s *session) validModel(m string) bool {
	for _, x := range s.models() {
		if x == m {
			return true
		}
	}
	return false
}

func (s *session) modelState() *protocol.SessionModelState {
	st := &protocol.SessionModelState{CurrentModelID: s.meta.Model}
	for _, m := range s.models() {
		st.AvailableModels = append(st.AvailableModels, protocol.ModelInfo{ModelID: m, Name: m})
	}
	return st
}

func (s *session) configOptions() []protocol.SessionConfigOption {
	modeOpts := make([]protocol.ConfigSelectOption, len(sessionModes))
	for i, m := range sessionModes {
		modeOpts[i] = protocol.ConfigSelectOption{Value: m.ID, Name: m.Name, Description: m.Description}
	}
	var modelOpts []protocol.ConfigSelectOption
	for _, m := range s.models() {
		modelOpts = append(modelOpts, protocol.ConfigSelectOption{Value: m, Name: m})
	}
	opts := []protocol.SessionConfigOption{
		{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: s.meta.Mode, Options: modeOpts},
		{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: s.meta.Model, Options: modelOpts},
	}
	if s.takesThoughtLevel() {
		levels := make([]protocol.ConfigSelectOption, len(llm.ThoughtLevels))
		for i, l := range llm.ThoughtLevels {
			levels[i] = protocol.ConfigSelectOption{Value: l, Name: thoughtLevelNames[l]}
		}
		opts = append(opts, protocol.SessionConfigOption{ID: optThoughtLevel, Name: "Thinking", Category: "thought_level",
			Description: "How much the model reasons before it answers", Type: "select", CurrentValue: s.thoughtLevel(), Options: levels})
	}
	if s.booleanOptions {
		opts = append(opts, protocol.SessionConfigOption{ID: optAutoCompact, Name: "Auto-compact", Category: "_context",
			Description: "Summarize older turns when the context nears the model's window", Type: "boolean",
			CurrentValue: s.autoCompact()})
	}
	return opts
}

// optAutoCompact is the boolean option that turns automatic compaction
// off (on by default; /compact works either way). Offered to clients that
// advertise boolean config options.
const optAutoCompact = "auto_compact"

func (s *session) autoCompact() bool { return s.meta.Config[optAutoCompact] != "false" }

// optThoughtLevel is the reasoning level option, offered for the models
// that take one (llm.Config.TakesThoughtLevel).
const optThoughtLevel = "thought_level"

var thoughtLevelNames = map[string]string{"default": "Default", "low": "Low", "medium": "Medium", "high": "High"}

func (s *session) takesThoughtLevel() bool { return s.deps.llmConfig().TakesThoughtLevel(s.meta.Model) }

func (s *session) thoughtLevel() string {
	if l := s.meta.Config[optThoughtLevel]; thoughtLevelNames[l] != "" {
		return l
	}
	return "default"
}

// thinkingBudget is what the session's level asks of the model now (0
// for a model that takes no level: the configuration decides).
func (s *session) thinkingBudget() int {
	if !s.takesThoughtLevel() {
		return 0
	}
	return llm.ThoughtBudget(s.thoughtLevel())
}

// sessionDefaults are the option values a new session starts with: the
// ones its owner chose last (settings.yml sessionDefaults, or
// principalDefaults.<owner> on a server with identities).
func (s *session) sessionDefaults() map[string]string {
	out := map[string]string{}
	defaults := llm.SessionDefaults(s.deps.Config.Home, s.defaultsPrincipal())
	if l := defaults[optThoughtLevel]; thoughtLevelNames[l] != "" {
		out[optThoughtLevel] = l
	}
	if v := defaults[optAutoCompact]; v == "true" || v == "false" {
		out[optAutoCompact] = v
	}
	return out
}

// defaultsPrincipal is whose defaults the session reads and writes: ""
// (the home's own) for DefaultPrincipal.
func (s *session) defaultsPrincipal() string {
	if s.owner == DefaultPrincipal || s.owner == "" {
		return ""
	}
	return s.owner
}

// chooseOption sets the select option id (mode, model, thought_level) to
// value: the one way session/set_mode, session/set_model,
// session/set_config_option and the /mode and /model commands change a
// session. A value the option does not
// take is an error naming it, and changes nothing. The change is kept (the
// meta; a thought level also as the default of new sessions), every client
// of the session is told of a change: current_mode_update for the mode
// (modes and config options are kept in sync) and config_option_update, so
// that a client other than the one that asked sees it too. It returns the
// error to answer the request with, after those updates: the value's, or
// the session's when fenced (the change could not be written).
func (s *session) chooseOption(ctx actor.Context, id, value string) *protocol.Error {
	var changed bool
	switch {
	case id == "mode" && validMode(value):
		changed = value != s.meta.Mode
		s.meta.Mode = value
	case id == "model" && s.validModel(value):
		changed = value != s.meta.Model
		s.meta.Model = value
	case id == optThoughtLevel && s.takesThoughtLevel() && thoughtLevelNames[value] != "":
		changed = value != s.thoughtLevel()
		s.setConfigValue(optThoughtLevel, value, changed)
	case id == "mode" || id == "model" || id == optThoughtLevel:
		return protocol.ErrInvalidParams(map[string]string{"value": "unknown value for " + id})
	default:
		return protocol.ErrInvalidParams(map[string]string{"configId": "unknown config option"})
	}
	return s.optionChosen(ctx, id, changed)
}

// setConfigValue keeps value of an option held in meta.Config, and as the
// default of the owner's new sessions whether it changed or not.
func (s *session) setConfigValue(id, value string, changed bool) {
	if changed {
		if s.meta.Config == nil {
			s.meta.Config = map[string]string{}
		}
		s.meta.Config[id] = value
	}
	if err := llm.SaveSessionDefault(s.deps.Config.Home, s.defaultsPrincipal(), id, value); err != nil {
		s.log.Warn().Err(err).Str("option", id).Msg("cannot keep the value as the default of new sessions")
	}
}

// optionChosen writes a change and tells the clients; it returns the
// fenced error, if any, for the caller to answer with (see chooseOption).
func (s *session) optionChosen(ctx actor.Context, id string, changed bool) *protocol.Error {
	if changed {
		s.changeMeta()
	}
	// The updates go before the caller's answer: a slash command's prompt
	// answer ends its turn, and a turn's updates come before that.
	if changed && s.lease.fenced == nil {
		if id == "mode" {
			s.emit(ctx, protocol.CurrentModeUpdate{SessionUpdate: protocol.UpdateCurrentMode, CurrentModeID: s.meta.Mode})
		}
		s.emit(ctx, protocol.ConfigOptionUpdate{SessionUpdate: protocol.UpdateConfigOption, ConfigOptions: s.configOptions()})
	}
	return s.lease.fenced
}

// setMode answers session/set_mode (mode is valid: session.go checks it).
func (s *session) setMode(ctx actor.Context, reqID protocol.RawMessage, mode string) {
	if e := s.chooseOption(ctx, "mode", mode); e != nil {
		s.respondError(ctx, reqID, e)
		return
	}
	s.respond(ctx, reqID, struct{}{})
}

// setModel answers the unstable session/set_model of clients that drive
// the model picker through it (older Zed builds, acp.el) as the model
// config option: the same choice, updates and errors; the answer is {}.
func (s *session) setModel(ctx actor.Context, r *sessionRequest) {
	var p protocol.SetModelRequest
	if err := protocol.Unmarshal(r.params, &p); err != nil || !s.validModel(p.ModelID) {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"modelId": "unknown model"}))
		return
	}
	if e := s.chooseOption(ctx, "model", p.ModelID); e != nil {
		s.respondError(ctx, r.id, e)
		return
	}
	s.respond(ctx, r.id, struct{}{})
}

func (s *session) setConfig(ctx actor.Context, r *sessionRequest) {
	var p protocol.SetConfigOptionRequest
	var value string
	if err := protocol.Unmarshal(r.params, &p); err == nil && p.Type == "boolean" {
		s.setBoolean(ctx, r, p)
		return
	}
	if err := protocol.Unmarshal(r.params, &p); err != nil || protocol.Unmarshal(p.Value, &value) != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "a string value is required"}))
		return
	}
	s.answerConfig(ctx, r, s.chooseOption(ctx, p.ConfigID, value))
}

// answerConfig answers session/set_config_option with e, or with every
// option as it is now.
func (s *session) answerConfig(ctx actor.Context, r *sessionRequest, e *protocol.Error) {
	if e != nil {
		s.respondError(ctx, r.id, e)
		return
	}
	s.respond(ctx, r.id, protocol.SetConfigOptionResponse{ConfigOptions: s.configOptions()})
}

// setBoolean sets a boolean option (type "boolean"); the value chosen
// becomes the default of new sessions.
func (s *session) setBoolean(ctx actor.Context, r *sessionRequest, p protocol.SetConfigOptionRequest) {
	var on bool
	if protocol.Unmarshal(p.Value, &on) != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "a boolean value is required"}))
		return
	}
	if p.ConfigID != optAutoCompact {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"configId": "unknown boolean config option"}))
		return
	}
	changed := on != s.autoCompact()
	s.setConfigValue(optAutoCompact, strconv.FormatBool(on), changed)
	s.answerConfig(ctx, r, s.optionChosen(ctx, optAutoCompact, changed))
}
