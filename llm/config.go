package llm

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Config selects and configures the model provider. LoadConfig builds it
// from the environment and $IAC_CODE_HOME; tests may fill it by hand (New
// completes it from the preset).
type Config struct {
	// Provider is a preset key ("anthropic", "dashscope", …; see Presets) or
	// the key of a provider registered with Register.
	Provider string
	// Protocol is ProtocolOpenAI or ProtocolAnthropic; "" = the preset's.
	Protocol string
	Model    string
	// Models are the choices for the model option: the configured model,
	// the settings' extra models, then the preset's known models.
	Models  []string
	BaseURL string
	APIKey  string // never logged: String and MarshalZerologObject redact it
	// ContextWindow overrides the context size of every model of the
	// provider (0 = per model, see ContextWindowFor).
	ContextWindow int
	// MaxTokens caps the output of one model call (0 = provider default).
	MaxTokens int
	// ThinkingBudget > 0 asks for reasoning on every call whose
	// Request.ThinkingBudget is 0.
	ThinkingBudget int
	// ImageInput is ImagesAuto (images for models not known to be text
	// only, see TextOnlyModel), ImagesOn or ImagesOff; "" is auto.
	ImageInput string
	// Retry configures WithRetry, which New applies, and the stream idle
	// timeout the providers enforce. The zero value is DefaultRetryPolicy.
	Retry RetryPolicy
	// Log receives retry warnings and similar; the zero Logger discards.
	Log zerolog.Logger
	// Limit, when set, is the shared limit on the model's requests (see
	// WithLimit), which New applies inside the retries with the key of
	// this provider (LimitKey). nil: no limit, and nothing to pay for one.
	Limit *Limit

	// Home is the IAC_CODE_HOME LoadConfig read ("" = none).
	Home string
	// Sources says where each setting came from, for logs: keys "provider",
	// "model", "baseURL", "apiKey" (and "contextWindow", "maxTokens",
	// "thinkingBudget" when set); values like "env IAC_CODE_MODEL",
	// "/home/u/.iac-code/settings.yml:4" or "preset".
	Sources map[string]string
	// Warnings are non-fatal problems found while loading, for the log.
	Warnings []string
}

// File names under IAC_CODE_HOME.
const (
	SettingsFile    = "settings.yml"
	CredentialsFile = ".credentials.yml"
)

// DefaultProvider is used when nothing names one and no conventional key
// variable is set.
const DefaultProvider = "openai_compatible"

// AuthHint tells the user how to configure credentials, for any provider.
// Config.AuthHint names the variables of the configured one.
const AuthHint = "Set IAC_CODE_API_KEY (or the provider's own variable such as ANTHROPIC_API_KEY, OPENAI_API_KEY, " +
	"DASHSCOPE_API_KEY or DEEPSEEK_API_KEY; IAC_CODE_PROVIDER, IAC_CODE_BASE_URL and IAC_CODE_MODEL select the provider) " +
	"in the environment of iac-code, or add \"<provider>: <key>\" to $IAC_CODE_HOME/.credentials.yml."

// Preset returns the preset cfg.Provider names.
func (c Config) Preset() (Preset, bool) {
	p, ok := Presets[c.Provider]
	return p, ok
}

// HasCredentials reports whether a call can be attempted: an API key is set,
// or the preset is a local server that needs none (ollama, lmstudio).
func (c Config) HasCredentials() bool {
	if c.APIKey != "" {
		return true
	}
	p, ok := c.Preset()
	return ok && p.NoKey
}

// AuthHint tells the user how to give this provider an API key.
func (c Config) AuthHint() string {
	vars := []string{"IAC_CODE_API_KEY"}
	if p, ok := c.Preset(); ok {
		vars = append(p.KeyEnv, vars...)
	}
	file := "$IAC_CODE_HOME/" + CredentialsFile
	if c.Home != "" {
		file = filepath.Join(c.Home, CredentialsFile)
	}
	provider := c.Provider
	if provider == "" {
		provider = DefaultProvider
	}
	return fmt.Sprintf("No API key is configured for provider %q. Set %s in the environment of iac-code, "+
		"or add \"%s: <key>\" to %s. (IAC_CODE_PROVIDER, IAC_CODE_BASE_URL and IAC_CODE_MODEL select the provider.)",
		provider, orList(vars), provider, file)
}

func orList(v []string) string {
	switch len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	}
	return strings.Join(v[:len(v)-1], ", ") + " or " + v[len(v)-1]
}

// ContextWindowFor returns the context size to report and compact against
// for model: the configured override, else the model's known size, else the
// preset's default, else DefaultContextWindow.
func (c Config) ContextWindowFor(model string) int {
	return contextWindowFor(c.ContextWindow, c.Provider, model)
}

// contextWindowFor is ContextWindowFor of a configuration whose
// ContextWindow is override and Provider is provider.
func contextWindowFor(override int, provider, model string) int {
	if override > 0 {
		return override
	}
	if n := ContextWindow(model); n > 0 {
		return n
	}
	if n := Presets[provider].ContextWindow; n > 0 {
		return n
	}
	return DefaultContextWindow
}

// Image input settings (IAC_CODE_IMAGE_INPUT).
const (
	ImagesAuto = "auto"
	ImagesOn   = "on"
	ImagesOff  = "off"
)

// AcceptsImages reports whether images go to model as images; otherwise
// they become ImageMarker text.
func (c Config) AcceptsImages(model string) bool {
	switch c.ImageInput {
	case ImagesOn:
		return true
	case ImagesOff:
		return false
	}
	return !TextOnlyModel(model)
}

// String describes the configuration without the API key.
func (c Config) String() string {
	key := "unset"
	if c.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("provider=%s protocol=%s model=%s baseURL=%s apiKey=%s", c.Provider, c.protocol(), c.Model, redactURL(c.BaseURL), key)
}

// GoString is String, so %#v cannot print the key either.
func (c Config) GoString() string { return "llm.Config{" + c.String() + "}" }

// MarshalZerologObject logs the configuration without the API key.
func (c Config) MarshalZerologObject(e *zerolog.Event) {
	e.Str("provider", c.Provider).Str("protocol", c.protocol()).Str("model", c.Model).
		Str("base_url", redactURL(c.BaseURL)).Bool("api_key_set", c.APIKey != "")
	if c.Sources != nil {
		d := zerolog.Dict()
		for _, k := range sortedKeys(c.Sources) {
			d.Str(k, c.Sources[k])
		}
		e.Dict("sources", d)
	}
}

// redactURL drops user info and query from a URL (keys hide there too).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.User == nil && u.RawQuery == "") {
		return s
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (c Config) protocol() string {
	if c.Protocol != "" {
		return c.Protocol
	}
	if p, ok := c.Preset(); ok {
		return p.Protocol
	}
	return ""
}

// resolved fills what a hand-made Config leaves empty from its preset.
func (c Config) resolved() Config {
	if c.Provider == "" {
		c.Provider = DefaultProvider
	}
	p, ok := c.Preset()
	if c.Protocol == "" && ok {
		c.Protocol = p.Protocol
	}
	if c.BaseURL == "" && ok {
		c.BaseURL = p.BaseURL
	}
	if c.Model == "" && ok {
		c.Model = p.DefaultModel
	}
	if c.Retry.IdleTimeout == 0 && ok && p.NoKey {
		// A local server may load the model before it answers at all.
		c.Retry.IdleTimeout = localIdleTimeout
	}
	return c
}

// localIdleTimeout is the idle timeout of local presets (ollama, lmstudio).
const localIdleTimeout = 5 * time.Minute

// ConfigFromEnv reads the configuration from the environment only.
//
// Deprecated: use LoadConfig, which also reads $IAC_CODE_HOME and reports
// malformed values. ConfigFromEnv ignores them.
func ConfigFromEnv() Config {
	cfg, err := LoadConfig("", os.Getenv)
	if err != nil {
		cfg = Config{
			Provider: os.Getenv("IAC_CODE_PROVIDER"),
			Model:    os.Getenv("IAC_CODE_MODEL"),
			BaseURL:  os.Getenv("IAC_CODE_BASE_URL"),
			APIKey:   os.Getenv("IAC_CODE_API_KEY"),
		}
		cfg = cfg.resolved()
	}
	return cfg
}

// LoadConfig builds the configuration, each setting from the first source
// that has it:
//
//   - provider: IAC_CODE_PROVIDER, settings.yml activeProvider, else the
//     first preset whose conventional key variable is set (anthropic,
//     openai, dashscope, deepseek, openrouter, gemini, kimi, zhipu — only
//     when IAC_CODE_API_KEY and IAC_CODE_BASE_URL are both unset), else
//     "openai_compatible";
//   - model: IAC_CODE_MODEL, providers.<key>.model, the preset's default;
//   - base URL: IAC_CODE_BASE_URL, providers.<key>.apiBase, the preset's;
//   - API key: IAC_CODE_API_KEY, the preset's conventional variables
//     (e.g. ANTHROPIC_API_KEY), then "<key>: …" in .credentials.yml;
//   - contextWindow, maxTokens, thinkingBudget: IAC_CODE_CONTEXT_WINDOW,
//     IAC_CODE_MAX_TOKENS, IAC_CODE_THINKING_BUDGET, then providers.<key>.*;
//   - image input: IAC_CODE_IMAGE_INPUT (auto, on, off);
//   - retries: IAC_CODE_RETRY_ATTEMPTS, IAC_CODE_RETRY_BASE_DELAY and
//     IAC_CODE_IDLE_TIMEOUT (Go durations), else DefaultRetryPolicy.
//
// home is $IAC_CODE_HOME ("" reads no files); missing files are fine.
// Malformed files or values fail with an error naming the file and line
// (or the variable). getenv is os.Getenv in production.
func LoadConfig(home string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	cfg := Config{Home: home, Sources: map[string]string{}}
	var st settings
	creds := map[string]credential{}
	if home != "" {
		var err error
		if st, err = readSettings(filepath.Join(home, SettingsFile)); err != nil {
			return Config{}, err
		}
		var warn string
		if creds, warn, err = readCredentials(filepath.Join(home, CredentialsFile)); err != nil {
			return Config{}, err
		}
		if warn != "" {
			cfg.Warnings = append(cfg.Warnings, warn)
		}
	}

	// Provider.
	switch {
	case env("IAC_CODE_PROVIDER") != "":
		cfg.Provider, cfg.Sources["provider"] = env("IAC_CODE_PROVIDER"), "env IAC_CODE_PROVIDER"
		if !knownProvider(cfg.Provider) {
			return Config{}, fmt.Errorf("IAC_CODE_PROVIDER: unknown provider %q (known: %s)", cfg.Provider, strings.Join(Known(), ", "))
		}
	case st.activeProvider.set:
		cfg.Provider, cfg.Sources["provider"] = st.activeProvider.value, st.activeProvider.where
		if !knownProvider(cfg.Provider) {
			return Config{}, fmt.Errorf("%s: activeProvider: unknown provider %q (known: %s)", st.activeProvider.where, cfg.Provider, strings.Join(Known(), ", "))
		}
	default:
		cfg.Provider, cfg.Sources["provider"] = DefaultProvider, "default"
		if env("IAC_CODE_API_KEY") == "" && env("IAC_CODE_BASE_URL") == "" {
			for _, k := range autoDetectOrder {
				if keyFromEnv(Presets[k], env) != "" {
					cfg.Provider, cfg.Sources["provider"] = k, "detected from env "+Presets[k].KeyEnv[0]
					break
				}
			}
		}
	}
	preset, isPreset := Presets[cfg.Provider]
	ps := st.providers[cfg.Provider]
	cfg.Protocol = preset.Protocol

	// Model, base URL, key.
	pick := func(name, envName string, file setting, def string) string {
		if v := env(envName); v != "" {
			cfg.Sources[name] = "env " + envName
			return v
		}
		if file.set {
			cfg.Sources[name] = file.where
			return file.value
		}
		if def != "" {
			cfg.Sources[name] = "preset " + cfg.Provider
		}
		return def
	}
	cfg.Model = pick("model", "IAC_CODE_MODEL", ps.model, preset.DefaultModel)
	cfg.BaseURL = pick("baseURL", "IAC_CODE_BASE_URL", ps.apiBase, preset.BaseURL)
	switch {
	case env("IAC_CODE_API_KEY") != "":
		cfg.APIKey, cfg.Sources["apiKey"] = env("IAC_CODE_API_KEY"), "env IAC_CODE_API_KEY"
	case isPreset && keyFromEnv(preset, env) != "":
		for _, v := range preset.KeyEnv {
			if k := env(v); k != "" {
				cfg.APIKey, cfg.Sources["apiKey"] = k, "env "+v
				break
			}
		}
	case creds[cfg.Provider].value != "":
		c := creds[cfg.Provider]
		cfg.APIKey, cfg.Sources["apiKey"] = c.value, c.where
	}

	// Numbers.
	for _, n := range []struct {
		name, env string
		file      intSetting
		dst       *int
	}{
		{"contextWindow", "IAC_CODE_CONTEXT_WINDOW", ps.contextWindow, &cfg.ContextWindow},
		{"maxTokens", "IAC_CODE_MAX_TOKENS", ps.maxTokens, &cfg.MaxTokens},
		{"thinkingBudget", "IAC_CODE_THINKING_BUDGET", ps.thinkingBudget, &cfg.ThinkingBudget},
	} {
		if v := env(n.env); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i < 0 {
				return Config{}, fmt.Errorf("%s: want a whole number of tokens, got %q", n.env, v)
			}
			*n.dst, cfg.Sources[n.name] = i, "env "+n.env
		} else if n.file.set {
			*n.dst, cfg.Sources[n.name] = n.file.value, n.file.where
		}
	}
	switch v := strings.ToLower(env("IAC_CODE_IMAGE_INPUT")); v {
	case "", ImagesAuto, ImagesOn, ImagesOff:
		cfg.ImageInput = v
	default:
		return Config{}, fmt.Errorf("IAC_CODE_IMAGE_INPUT: want auto, on or off, got %q", v)
	}
	if v := env("IAC_CODE_RETRY_ATTEMPTS"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 {
			return Config{}, fmt.Errorf("IAC_CODE_RETRY_ATTEMPTS: want a number >= 1 (1 = no retries), got %q", v)
		}
		cfg.Retry.Attempts = i
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{"IAC_CODE_RETRY_BASE_DELAY", &cfg.Retry.BaseDelay}, {"IAC_CODE_IDLE_TIMEOUT", &cfg.Retry.IdleTimeout}} {
		if v := env(d.env); v != "" {
			dur, err := time.ParseDuration(v)
			if err != nil || dur <= 0 {
				return Config{}, fmt.Errorf("%s: want a duration such as 500ms or 90s, got %q", d.env, v)
			}
			*d.dst = dur
		}
	}

	// Model choices: the configured one first, no duplicates.
	seen := map[string]bool{}
	for _, group := range [][]string{{cfg.Model}, ps.models, preset.Models} {
		for _, m := range group {
			if m != "" && !seen[m] {
				seen[m] = true
				cfg.Models = append(cfg.Models, m)
			}
		}
	}
	return cfg, nil
}

// autoDetectOrder is the order presets are tried in when only a
// conventional key variable says which provider to use.
var autoDetectOrder = []string{"anthropic", "openai", "dashscope", "deepseek", "openrouter", "gemini", "kimi", "zhipu"}

func keyFromEnv(p Preset, env func(string) string) string {
	for _, v := range p.KeyEnv {
		if k := env(v); k != "" {
			return k
		}
	}
	return ""
}

func knownProvider(key string) bool {
	if _, ok := Presets[key]; ok {
		return true
	}
	factoriesMu.RLock()
	defer factoriesMu.RUnlock()
	_, ok := factories[key]
	return ok
}

// Factory builds a provider from its configuration.
type Factory func(cfg Config) (Provider, error)

var (
	factoriesMu sync.RWMutex
	factories   = map[string]Factory{}
)

// Register makes a provider available under a key: a protocol (ProtocolOpenAI,
// ProtocolAnthropic, used by the presets) or a provider of its own, which
// Config.Provider then names directly. Tests register extra providers from
// test-only build files.
func Register(key string, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[key] = f
}

// New builds the provider cfg names, wrapped in WithRetry(cfg.Retry) unless
// cfg.Retry.Attempts is 1. A Provider registered under cfg.Provider itself
// wins over the preset's protocol; it is called with Retry.Attempts = 1, so
// a factory that calls New again gets an unwrapped provider and retries
// happen once, outside.
func New(cfg Config) (Provider, error) {
	cfg = cfg.resolved()
	factoriesMu.RLock()
	f, ok := factories[cfg.Provider]
	if _, preset := Presets[cfg.Provider]; preset || !ok {
		f, ok = factories[cfg.Protocol]
	}
	factoriesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (known: %s)", cfg.Provider, strings.Join(Known(), ", "))
	}
	policy := cfg.Retry.withDefaults()
	inner := cfg
	inner.Retry.Attempts = 1
	inner.Limit = nil // applied once, here
	p, err := f(inner)
	if err == nil && cfg.Limit != nil {
		l := *cfg.Limit
		l.Key = LimitKey(cfg)
		p = WithLimit(p, l)
	}
	if err != nil || policy.Attempts <= 1 {
		return p, err
	}
	if policy.Log == nil {
		l := cfg.Log.With().Str("provider", cfg.Provider).Logger()
		policy.Log = &l
	}
	return WithRetry(p, policy), nil
}

// Known lists the provider keys Config.Provider accepts: the presets and
// the providers registered under keys of their own.
func Known() []string {
	set := map[string]bool{}
	for k := range Presets {
		set[k] = true
	}
	factoriesMu.RLock()
	for k := range factories {
		if k != ProtocolOpenAI && k != ProtocolAnthropic {
			set[k] = true
		}
	}
	factoriesMu.RUnlock()
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
