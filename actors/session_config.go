package actors

import (
	"github.com/asynkron/protoactor-go/actor"

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
	return []protocol.SessionConfigOption{
		{ID: "mode", Name: "Mode", Category: "mode", Type: "select", CurrentValue: s.meta.Mode, Options: modeOpts},
		{ID: "model", Name: "Model", Category: "model", Type: "select", CurrentValue: s.meta.Model, Options: modelOpts},
	}
}

// setMode changes the mode, answers reqID, and tells the client both ways
// (modes and config options are kept in sync).
func (s *session) setMode(ctx actor.Context, reqID protocol.RawMessage, mode string) {
	if mode == s.meta.Mode {
		s.respond(ctx, reqID, struct{}{})
		return
	}
	s.meta.Mode = mode
	s.changeMeta()
	if s.fenced != nil {
		s.respondError(ctx, reqID, s.fenced)
		return
	}
	s.respond(ctx, reqID, struct{}{})
	s.emit(ctx, protocol.CurrentModeUpdate{SessionUpdate: protocol.UpdateCurrentMode, CurrentModeID: mode})
	s.emit(ctx, protocol.ConfigOptionUpdate{SessionUpdate: protocol.UpdateConfigOption, ConfigOptions: s.configOptions()})
}

func (s *session) setConfig(ctx actor.Context, r *sessionRequest) {
	var p protocol.SetConfigOptionRequest
	var value string
	if err := protocol.Unmarshal(r.params, &p); err != nil || protocol.Unmarshal(p.Value, &value) != nil {
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "a string value is required"}))
		return
	}
	switch {
	case p.ConfigID == "mode" && validMode(value):
		if value != s.meta.Mode {
			s.meta.Mode = value
			s.changeMeta()
			s.emit(ctx, protocol.CurrentModeUpdate{SessionUpdate: protocol.UpdateCurrentMode, CurrentModeID: value})
		}
	case p.ConfigID == "model" && s.validModel(value):
		if value != s.meta.Model {
			s.meta.Model = value
			s.changeMeta()
		}
	case p.ConfigID == "mode" || p.ConfigID == "model":
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"value": "unknown value for " + p.ConfigID}))
		return
	default:
		s.respondError(ctx, r.id, protocol.ErrInvalidParams(map[string]string{"configId": "unknown config option"}))
		return
	}
	if s.fenced != nil {
		s.respondError(ctx, r.id, s.fenced)
		return
	}
	s.respond(ctx, r.id, protocol.SetConfigOptionResponse{ConfigOptions: s.configOptions()})
}
