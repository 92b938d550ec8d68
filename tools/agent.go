package tools

import (
	"context"
	"encoding/json"
	"fmt"
)

// NameAgent is the agent tool's name.
const NameAgent = "agent"

// Sub-agent types accepted by the agent tool.
const (
	SubagentGeneralPurpose = "general-purpose"
	SubagentExplore        = "explore"
	SubagentPlan           = "plan"
)

// SubagentTypes lists the accepted subagent_type values.
var SubagentTypes = []string{SubagentGeneralPurpose, SubagentExplore, SubagentPlan}

// Agent starts a sub-agent. Its turn is run by the actor layer: this type
// only validates the call (its Prepare returns an *AgentCall; see
// SubagentTools).
type Agent struct{}

func (Agent) Name() string { return NameAgent }
func (Agent) Description() string {
	return "Start a sub-agent that works on a task on its own and returns its final answer. Use it for broad searches " +
		"or multi-step work whose intermediate output would clutter this conversation. subagent_type: " +
		"`explore` (read-only tools plus bash; for finding and understanding code), `plan` (read-only tools; for " +
		"designing an approach without changing anything), `general-purpose` (all tools except agent). The prompt " +
		"must be self-contained: the sub-agent does not see this conversation. description is a short (3-5 word) label."
}
func (Agent) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"prompt":{"type":"string","description":"The complete task for the sub-agent"},` +
		`"description":{"type":"string","description":"A short (3-5 word) label for the task"},` +
		`"subagent_type":{"type":"string","enum":["general-purpose","explore","plan"],"description":"Which kind of sub-agent (and tool set) to use"}},` +
		`"required":["prompt","description","subagent_type"],"additionalProperties":false}`)
}
func (Agent) Kind() Kind     { return KindExecute }
func (Agent) ReadOnly() bool { return false }

// AgentInput is the validated input of the agent tool.
type AgentInput struct {
	Prompt       string `json:"prompt"`
	Description  string `json:"description"`
	SubagentType string `json:"subagent_type"`
}

type agentInputJSON struct {
	Prompt       *string `json:"prompt"`
	Description  *string `json:"description"`
	SubagentType *string `json:"subagent_type"`
}

// AgentCall is a prepared agent call. The actor layer runs it (a child
// turn) from Input; its own Run only reports that.
type AgentCall struct{ Input AgentInput }

func (Agent) Prepare(_ *Env, input json.RawMessage) (Call, error) {
	var in agentInputJSON
	if err := decodeInput(NameAgent, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameAgent, "prompt", in.Prompt); err != nil {
		return nil, err
	}
	if err := requireString(NameAgent, "description", in.Description); err != nil {
		return nil, err
	}
	if in.SubagentType == nil {
		return nil, inputError(NameAgent, "missing required field 'subagent_type'")
	}
	if !validSubagentType(*in.SubagentType) {
		return nil, inputError(NameAgent, fmt.Sprintf("field 'subagent_type' must be one of general-purpose, explore, plan; got %q", *in.SubagentType))
	}
	return &AgentCall{Input: AgentInput{Prompt: *in.Prompt, Description: *in.Description, SubagentType: *in.SubagentType}}, nil
}

func (c *AgentCall) Title() string {
	return "Agent: " + printable(truncateRunes(oneLine(c.Input.Description), 80), titleMaxRunes)
}
func (c *AgentCall) Locations() []Location { return nil }

// Access is empty: the sub-agent's own tool calls are asked about one by one.
func (c *AgentCall) Access() Access { return Access{} }
func (c *AgentCall) Run(context.Context, func(string)) Result {
	return Errorf("agent tool requires the actor runtime")
}

func validSubagentType(s string) bool {
	for _, t := range SubagentTypes {
		if s == t {
			return true
		}
	}
	return false
}

// SubagentTools returns the tools a sub-agent of the given type may use,
// taken from reg: explore = the read-only tools plus bash; plan = the
// read-only tools; general-purpose = every tool but agent (sub-agents do not
// start sub-agents). ReadOnly() decides what is read-only, so registered
// extras are sorted the same way.
func SubagentTools(reg *Registry, subagentType string) (*Registry, error) {
	var keep func(Tool) bool
	switch subagentType {
	case SubagentGeneralPurpose:
		keep = func(Tool) bool { return true }
	case SubagentExplore:
		keep = func(t Tool) bool { return t.ReadOnly() || t.Name() == NameBash }
	case SubagentPlan:
		keep = func(t Tool) bool { return t.ReadOnly() }
	default:
		return nil, fmt.Errorf("unknown subagent type %q (want general-purpose, explore or plan)", subagentType)
	}
	var out []Tool
	for _, t := range reg.List() {
		if t.Name() != NameAgent && keep(t) {
			out = append(out, t)
		}
	}
	return NewRegistry(out...), nil
}
