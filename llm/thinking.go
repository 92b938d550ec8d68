package llm

import (
	"regexp"
	"strings"
)

// Thought levels: the thought_level session option. A level asks for a
// reasoning budget (Request.ThinkingBudget), which each protocol turns into
// what its models take: OpenAI reasoning_effort (low < 4096 ≤ medium <
// 16384 ≤ high), an Anthropic thinking budget, a DashScope or OpenRouter
// budget. "default" sends what the configuration says (thinkingBudget).
var ThoughtLevels = []string{"default", "low", "medium", "high"}

// ThoughtBudget is the reasoning budget of level (0: the configured one).
func ThoughtBudget(level string) int {
	switch level {
	case "low":
		return 2048
	case "medium":
		return 8192
	case "high":
		return 24576
	}
	return 0
}

// anthropicThinking are the Claude models with extended thinking (3.7 and
// every family from 4 on); older ones reject the parameter.
var anthropicThinking = regexp.MustCompile(`claude-(3-7|(opus|sonnet|haiku)-[4-9]|[4-9])`)

// TakesThoughtLevel reports whether model, under this configuration, takes
// a reasoning level, so the option is offered only where it does
// something: o4-mini and claude-sonnet-4-5 do, gpt-4.1 does not (its
// requests never carry reasoning_effort).
func (c Config) TakesThoughtLevel(model string) bool {
	if c.protocol() == ProtocolAnthropic {
		return anthropicThinking.MatchString(strings.ToLower(model))
	}
	p, style := c.thinkingStyle()
	switch style {
	case ThinkingDashScope, ThinkingOpenRouter:
		return true
	case ThinkingEffort:
		return p.Key == "gemini" || isOpenAIReasoningModel(model)
	}
	return false
}
