package llm

import (
	"sort"
	"strings"
)

// Wire protocols a preset speaks. Each is a registered Factory key.
const (
	ProtocolOpenAI    = "openai"    // OpenAI Chat Completions (openai.go)
	ProtocolAnthropic = "anthropic" // Anthropic Messages (anthropic.go)
)

// ThinkingStyle says how a preset asks for reasoning when the thinking
// budget is > 0.
type ThinkingStyle string

const (
	// ThinkingNone sends nothing: the model decides (deepseek-reasoner,
	// kimi-k2-thinking, local models).
	ThinkingNone ThinkingStyle = ""
	// ThinkingAnthropic sends thinking: {type: enabled, budget_tokens}.
	ThinkingAnthropic ThinkingStyle = "anthropic"
	// ThinkingDashScope sends enable_thinking: true and thinking_budget.
	ThinkingDashScope ThinkingStyle = "dashscope"
	// ThinkingEffort sends reasoning_effort low/medium/high derived from the
	// budget (OpenAI reasoning models, Gemini's OpenAI endpoint).
	ThinkingEffort ThinkingStyle = "effort"
	// ThinkingOpenRouter sends reasoning: {max_tokens}.
	ThinkingOpenRouter ThinkingStyle = "openrouter"
	// ThinkingZhipu sends thinking: {type: enabled} (GLM-4.5 and later).
	ThinkingZhipu ThinkingStyle = "zhipu"
)

// Preset is a known provider: its protocol, endpoint, models and quirks.
type Preset struct {
	Key      string
	Title    string
	Protocol string
	// BaseURL is the default API base. OpenAI-protocol URLs end in /v1 (or
	// the provider's equivalent); Anthropic ones are the host root, the
	// client appends /v1/messages.
	BaseURL      string
	DefaultModel string
	// Models are the choices offered for the model option.
	Models []string
	// ContextWindow is used for models ContextWindow(model) does not know.
	ContextWindow int
	// KeyEnv are the provider's conventional API key variables, first set
	// wins. IAC_CODE_API_KEY beats them all.
	KeyEnv []string
	// NoKey marks local servers that need no API key.
	NoKey bool
	// MaxCompletionTokens sends the output cap as max_completion_tokens (the
	// only name OpenAI's reasoning models accept) instead of max_tokens.
	MaxCompletionTokens bool
	Thinking            ThinkingStyle
}

// Presets lists the built-in providers by key.
var Presets = map[string]Preset{
	"dashscope": {
		Key: "dashscope", Title: "Alibaba Cloud DashScope (Qwen)", Protocol: ProtocolOpenAI,
		BaseURL:       "https://dashscope.aliyuncs.com/compatible-mode/v1",
		DefaultModel:  "qwen3-coder-plus",
		Models:        []string{"qwen3-coder-plus", "qwen3-coder-flash", "qwen3-max", "qwen-plus", "qwen-flash", "qwen-max"},
		ContextWindow: 131_072, KeyEnv: []string{"DASHSCOPE_API_KEY"}, Thinking: ThinkingDashScope,
	},
	"openai": {
		Key: "openai", Title: "OpenAI", Protocol: ProtocolOpenAI,
		BaseURL:       "https://api.openai.com/v1",
		DefaultModel:  "gpt-5.5",
		Models:        []string{"gpt-5.5", "gpt-5.4", "gpt-5.4-mini", "gpt-5.4-nano", "gpt-5", "gpt-5-mini", "gpt-4.1", "o3", "o4-mini"},
		ContextWindow: 128_000, KeyEnv: []string{"OPENAI_API_KEY"}, MaxCompletionTokens: true, Thinking: ThinkingEffort,
	},
	"anthropic": {
		Key: "anthropic", Title: "Anthropic", Protocol: ProtocolAnthropic,
		BaseURL:      "https://api.anthropic.com",
		DefaultModel: "claude-sonnet-5-5",
		Models: []string{"claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-sonnet-5", "claude-opus-5",
			"claude-sonnet-4-6", "claude-opus-4-6", "claude-haiku-4-5"},
		ContextWindow: 200_000, KeyEnv: []string{"ANTHROPIC_API_KEY"}, Thinking: ThinkingAnthropic,
	},
	"deepseek": {
		Key: "deepseek", Title: "DeepSeek", Protocol: ProtocolOpenAI,
		BaseURL:       "https://api.deepseek.com/v1",
		DefaultModel:  "deepseek-chat",
		Models:        []string{"deepseek-chat", "deepseek-reasoner"},
		ContextWindow: 131_072, KeyEnv: []string{"DEEPSEEK_API_KEY"},
	},
	"openai_compatible": {
		Key: "openai_compatible", Title: "OpenAI-compatible server", Protocol: ProtocolOpenAI,
		BaseURL:       "https://api.openai.com/v1",
		ContextWindow: 128_000,
	},
	"anthropic_compatible": {
		Key: "anthropic_compatible", Title: "Anthropic-compatible server", Protocol: ProtocolAnthropic,
		BaseURL:       "https://api.anthropic.com",
		ContextWindow: 200_000, Thinking: ThinkingAnthropic,
	},
	"ollama": {
		Key: "ollama", Title: "Ollama (local)", Protocol: ProtocolOpenAI,
		BaseURL:      "http://localhost:11434/v1",
		DefaultModel: "qwen3-coder",
		Models:       []string{"qwen3-coder", "qwen2.5-coder", "gpt-oss", "llama3.1"},
		// Ollama's own default num_ctx is smaller; this is what its larger
		// coding models are usually run with.
		ContextWindow: 32_768, NoKey: true,
	},
	"lmstudio": {
		Key: "lmstudio", Title: "LM Studio (local)", Protocol: ProtocolOpenAI,
		BaseURL:       "http://localhost:1234/v1",
		ContextWindow: 32_768, NoKey: true,
	},
	"openrouter": {
		Key: "openrouter", Title: "OpenRouter", Protocol: ProtocolOpenAI,
		BaseURL:      "https://openrouter.ai/api/v1",
		DefaultModel: "anthropic/claude-sonnet-4.5",
		Models: []string{"anthropic/claude-sonnet-4.5", "openai/gpt-5", "google/gemini-2.5-pro",
			"qwen/qwen3-coder", "deepseek/deepseek-chat-v3.1", "moonshotai/kimi-k2", "z-ai/glm-4.6"},
		ContextWindow: 128_000, KeyEnv: []string{"OPENROUTER_API_KEY"}, Thinking: ThinkingOpenRouter,
	},
	"kimi": {
		Key: "kimi", Title: "Moonshot AI (Kimi)", Protocol: ProtocolOpenAI,
		BaseURL:       "https://api.moonshot.cn/v1",
		DefaultModel:  "kimi-k2-0905-preview",
		Models:        []string{"kimi-k2-0905-preview", "kimi-k2-turbo-preview", "kimi-k2-thinking", "kimi-k2-0711-preview"},
		ContextWindow: 131_072, KeyEnv: []string{"MOONSHOT_API_KEY", "KIMI_API_KEY"},
	},
	"zhipu": {
		Key: "zhipu", Title: "Zhipu AI (GLM)", Protocol: ProtocolOpenAI,
		BaseURL:       "https://open.bigmodel.cn/api/paas/v4",
		DefaultModel:  "glm-4.6",
		Models:        []string{"glm-4.6", "glm-4.5", "glm-4.5-air"},
		ContextWindow: 131_072, KeyEnv: []string{"ZHIPUAI_API_KEY", "ZHIPU_API_KEY"}, Thinking: ThinkingZhipu,
	},
	"gemini": {
		Key: "gemini", Title: "Google Gemini (OpenAI-compatible endpoint)", Protocol: ProtocolOpenAI,
		BaseURL:       "https://generativelanguage.googleapis.com/v1beta/openai",
		DefaultModel:  "gemini-2.5-pro",
		Models:        []string{"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"},
		ContextWindow: 1_048_576, KeyEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, Thinking: ThinkingEffort,
	},
}

// PresetKeys lists the preset keys, sorted.
func PresetKeys() []string {
	keys := make([]string, 0, len(Presets))
	for k := range Presets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// contextWindows maps model name prefixes to context sizes in tokens; the
// longest matching prefix wins. Sizes are the providers' published input
// limits (the conservative one where a larger window needs opting in).
var contextWindows = []struct {
	prefix string
	size   int
}{
	{"claude-", 200_000},
	{"anthropic/claude-", 200_000},
	{"gpt-5", 400_000},
	{"openai/gpt-5", 400_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4", 200_000},
	{"gpt-oss", 131_072},
	{"qwen3-coder-plus", 1_000_000},
	{"qwen3-coder-flash", 1_000_000},
	{"qwen3-max", 262_144},
	{"qwen-plus", 131_072},
	{"qwen-flash", 1_000_000},
	{"qwen-max", 32_768},
	{"qwen3-coder", 262_144},
	{"qwen/qwen3-coder", 262_144},
	{"qwen2.5-coder", 32_768},
	{"deepseek-", 131_072},
	{"deepseek/", 131_072},
	{"kimi-k2-0711", 131_072},
	{"kimi-k2", 262_144},
	{"moonshotai/kimi-k2", 131_072},
	{"glm-4.6", 200_000},
	{"z-ai/glm-4.6", 200_000},
	{"glm-4.5", 131_072},
	{"gemini-", 1_048_576},
	{"google/gemini-", 1_048_576},
	{"llama3.1", 131_072},
}

// DefaultContextWindow is assumed for models nothing else knows.
const DefaultContextWindow = 128_000

// ContextWindow returns the context size of a model in tokens, by name
// (longest known prefix, case-insensitive), or 0 when the name is unknown.
// Config.ContextWindowFor adds the configured override and preset default.
func ContextWindow(model string) int {
	m := strings.ToLower(strings.TrimSpace(model))
	best, size := 0, 0
	for _, c := range contextWindows {
		if strings.HasPrefix(m, c.prefix) && len(c.prefix) > best {
			best, size = len(c.prefix), c.size
		}
	}
	return size
}

// textOnlyModels says which models are known to take no image input (by
// name prefix, longest match wins; a vision variant of a text-only family
// is listed as taking images). A model not listed is sent images.
var textOnlyModels = []struct {
	prefix   string
	textOnly bool
}{
	{"deepseek-", true},
	{"deepseek/", true},
	{"qwen3-coder", true},
	{"qwen/qwen3-coder", true},
	{"qwen2.5-coder", true},
	{"qwen-plus", true},
	{"qwen-max", true},
	{"qwen-flash", true},
	{"qwen-turbo", true},
	{"qwen3-max", true},
	{"qwen-vl", false},
	{"qwen2.5-vl", false},
	{"qwen3-vl", false},
	{"kimi-k2", true},
	{"moonshotai/kimi-k2", true},
	{"glm-4.5", true},
	{"glm-4.6", true},
	{"z-ai/glm-4.6", true},
	{"glm-4v", false},
	{"glm-4.5v", false},
	{"glm-4.6v", false},
	{"gpt-oss", true},
	{"openai/gpt-oss", true},
	{"gpt-3.5", true},
	{"o1-mini", true},
	{"o3-mini", true},
	{"llama3", true},
	{"codellama", true},
}

// TextOnlyModel reports whether model is known to take no images.
func TextOnlyModel(model string) bool {
	m := strings.ToLower(strings.TrimSpace(model))
	best, textOnly := 0, false
	for _, t := range textOnlyModels {
		if strings.HasPrefix(m, t.prefix) && len(t.prefix) > best {
			best, textOnly = len(t.prefix), t.textOnly
		}
	}
	return textOnly
}
