package llm

import (
	"fmt"
	"os"
	"sort"
	"sync"
)

// Config selects and configures the model provider.
type Config struct {
	Provider string // preset key, e.g. "openai_compatible"
	Model    string
	BaseURL  string
	APIKey   string // never logged
	// ContextWindow is the model's context size in tokens (0 = preset default).
	ContextWindow int
	// MaxTokens caps the output of one model call (0 = provider default).
	MaxTokens int
}

// ConfigFromEnv reads the IAC_CODE_* variables.
func ConfigFromEnv() Config {
	cfg := Config{
		Provider: os.Getenv("IAC_CODE_PROVIDER"),
		Model:    os.Getenv("IAC_CODE_MODEL"),
		BaseURL:  os.Getenv("IAC_CODE_BASE_URL"),
		APIKey:   os.Getenv("IAC_CODE_API_KEY"),
	}
	if cfg.Provider == "" {
		cfg.Provider = "openai_compatible"
	}
	return cfg
}

// AuthHint tells the user how to configure credentials.
const AuthHint = "Set IAC_CODE_API_KEY (and IAC_CODE_PROVIDER, IAC_CODE_BASE_URL, IAC_CODE_MODEL) in the environment of iac-code."

// Factory builds a provider from its configuration.
type Factory func(cfg Config) (Provider, error)

var (
	factoriesMu sync.RWMutex
	factories   = map[string]Factory{}
)

// Register makes a provider protocol available under a key. Tests register
// extra providers from test-only build files.
func Register(key string, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[key] = f
}

// New builds the provider cfg names.
func New(cfg Config) (Provider, error) {
	factoriesMu.RLock()
	f, ok := factories[cfg.Provider]
	factoriesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (known: %v)", cfg.Provider, Known())
	}
	return f(cfg)
}

// Known lists the registered provider keys.
func Known() []string {
	factoriesMu.RLock()
	defer factoriesMu.RUnlock()
	keys := make([]string, 0, len(factories))
	for k := range factories {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
