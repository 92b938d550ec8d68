package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// Permission decisions belong to the session actor: it knows the mode and
// the remembered decisions, and asks the client one request at a time. A
// session several clients share asks every one of them; the first answer
// wins and the others are withdrawn ($/cancel_request) at once. An error
// answer (a client that cannot answer) waits for the others.

// Messages of the session actor about permissions.
type (
	// permissionAsk asks the session whether a tool call may run. The
	// session decides from its mode and remembered decisions, or asks the
	// client (one request at a time).
	permissionAsk struct {
		toolName string
		// key is what an *_always answer remembers: the tool name, or
		// "<tool>:<host>" for network access.
		key      string
		kind     tools.Kind
		readOnly bool
		// local: every path inside the cwd (or a spilled output read back)
		// and no host; editsInside: the call writes, only inside the cwd.
		local       bool
		editsInside bool
		host        string
		toolCall    protocol.ToolCallUpdate
		// contained: the call runs in the session's sandbox (the request
		// says so).
		contained tools.Contained
		replyTo   *actor.PID
		// preview: the call shows its diff in the request, read only once
		// a client is going to be asked (askClient), not for a call the
		// policy lets through. previewOf: this is the ask previewOf with
		// its diff, back from the tool's actor.
		preview   tools.Previewer
		previewOf *permissionAsk
		// withdrawn: previewOf came back without being asked, its tool
		// being done or stopping (a sub-agent's turn stopping its tools).
		withdrawn bool
	}
	// previewWanted asks the tool's actor for the diff of ask; it sends
	// ask back to session with the diff (previewOf set).
	previewWanted struct {
		ask     *permissionAsk
		session *actor.PID
		// caps of the client the call would run through, if allowed now:
		// the diff is read where the run will read (its buffer).
		caps tools.ClientCaps
	}
	// previewRead is the diff read for a previewWanted, off the tool's
	// actor.
	previewRead struct {
		wanted *previewWanted
		diff   *tools.Diff
	}
	// permissionDecision answers a permissionAsk. caps are the capabilities
	// of the client that owns the session now, for a call that may run
	// through it.
	permissionDecision struct {
		allow bool
		caps  tools.ClientCaps
		// cancelled: the client cancelled the request; the turn ends cancelled.
		cancelled bool
		// reason is the tool error the model gets when not allowed.
		reason string
	}
)

func (*permissionDecision) IgnoreDeadLetterLogging() {}

const permissionDenied = "Permission denied."

// newPermissionAsk builds the question for a prepared call from what it
// reaches (tools.Access): the policy decides on resolved values only.
func newPermissionAsk(name string, tool tools.Tool, call tools.Call, u protocol.ToolCallUpdate, replyTo *actor.PID) *permissionAsk {
	access := call.Access()
	a := &permissionAsk{toolName: name, key: name, kind: tool.Kind(), readOnly: tool.ReadOnly(),
		local: access.Local(), editsInside: access.WritesInsideCwd(), host: access.Host, toolCall: u, replyTo: replyTo}
	a.contained, _ = call.(tools.Contained)
	if access.Host != "" {
		// Network access is remembered per host.
		a.key = name + ":" + access.Host
	}
	return a
}

// options are the choices of a permission request; the *_always names say
// what is remembered: the tool, or the tool for one host.
func (a *permissionAsk) options() []protocol.PermissionOption {
	scope := a.toolName
	if a.host != "" {
		scope = a.toolName + " for " + a.host
	}
	return []protocol.PermissionOption{
		{OptionID: protocol.AllowOnce, Name: "Allow once", Kind: protocol.AllowOnce},
		{OptionID: protocol.AllowAlways, Name: "Always allow " + scope + " in this session", Kind: protocol.AllowAlways},
		{OptionID: protocol.RejectOnce, Name: "Reject", Kind: protocol.RejectOnce},
		{OptionID: protocol.RejectAlways, Name: "Always reject " + scope + " in this session", Kind: protocol.RejectAlways},
	}
}

// decidePermission applies the session policy (docs/tools.md, the permission table):
// plan mode runs read-only tools only; a read-only call that stays inside
// the cwd and contacts no host never asks; remembered decisions answer at
// once; bypass never asks; accept_edits lets edits inside the cwd through.
// Everything else asks.
func (s *session) decidePermission(ctx actor.Context, a *permissionAsk) {
	if a.previewOf != nil {
		// The diff of the ask being asked (askClient); when that ask is
		// gone (the turn ended), or its turn is being cancelled, it is too
		// (no dialog for a turn that ends).
		ctx.Unwatch(a.previewOf.replyTo)
		switch {
		case a.previewOf != s.perm.active, s.turn.cancelling():
		case a.withdrawn:
			s.activeGone(ctx)
		default:
			s.sendAsk(ctx, a)
		}
		return
	}
	allow := func(why string) {
		s.auditPermission(a, "allow", why)
		ctx.Send(a.replyTo, &permissionDecision{allow: true, caps: s.promptCaps()})
	}
	deny := func(why, reason string) {
		s.auditPermission(a, "deny", why)
		ctx.Send(a.replyTo, &permissionDecision{reason: reason})
	}
	switch {
	case s.meta.Mode == "plan" && !a.readOnly:
		deny("plan_mode", "Tool '"+a.toolName+"' is not available in plan mode (read-only tools only).")
	case a.readOnly && a.local:
		allow("read_only_in_cwd")
	case s.meta.Permissions[a.key] == store.Allow:
		allow("remembered")
	case s.meta.Permissions[a.key] == store.Deny:
		deny("remembered", permissionDenied)
	case s.meta.Mode == "bypass":
		allow("bypass_mode")
	case s.meta.Mode == "accept_edits" && a.kind == tools.KindEdit && a.editsInside:
		allow("accept_edits_in_cwd")
	case s.perm.active != nil:
		s.queueAsk(a)
	default:
		s.askClient(ctx, a)
	}
}

// permissionOutcome reads both the schema answer
// {"outcome":{"outcome":"selected","optionId":…}} and the specification's
// legacy {"outcome":"allowed","option_id":…} / {"outcome":"denied"}. The
// decision follows the kind of the selected option, never "selected" alone.
func permissionOutcome(result protocol.RawMessage) (kind string, cancelled bool) {
	var r struct {
		Outcome  protocol.RawMessage `json:"outcome"`
		OptionID string              `json:"option_id"`
	}
	if protocol.Unmarshal(result, &r) != nil || len(r.Outcome) == 0 {
		return protocol.RejectOnce, false
	}
	var legacy string
	if protocol.Unmarshal(r.Outcome, &legacy) == nil {
		switch legacy {
		case "allowed":
			if optionKind(r.OptionID) == protocol.AllowAlways {
				return protocol.AllowAlways, false
			}
			return protocol.AllowOnce, false
		case "cancelled":
			return "", true
		}
		return protocol.RejectOnce, false
	}
	var o struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId"`
	}
	if protocol.Unmarshal(r.Outcome, &o) != nil {
		return protocol.RejectOnce, false
	}
	if o.Outcome == "cancelled" {
		return "", true
	}
	if k := optionKind(o.OptionID); k != "" {
		return k, false
	}
	return protocol.RejectOnce, false
}

// optionKind maps an option id of ours to its kind (the ids are the kinds).
func optionKind(optionID string) string {
	switch optionID {
	case protocol.AllowOnce, protocol.AllowAlways, protocol.RejectOnce, protocol.RejectAlways:
		return optionID
	}
	return ""
}

func (s *session) remember(key string, d store.Decision) {
	if s.meta.Permissions[key] == d {
		return
	}
	if s.meta.Permissions == nil {
		s.meta.Permissions = map[string]store.Decision{}
	}
	s.meta.Permissions[key] = d
	s.changeMeta()
}

// auditPermission logs one permission decision (by the policy or the
// client: why).
func (s *session) auditPermission(a *permissionAsk, outcome, why string) {
	s.audit(protocol.MethodRequestPermission, outcome).Str("tool", a.toolName).Str("decided_by", why).Msg("permission decision")
}
