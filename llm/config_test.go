package llm_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// home writes settings.yml and .credentials.yml ("" = no file).
func home(t *testing.T, settings, creds string) string {
	t.Helper()
	dir := t.TempDir()
	if settings != "" {
		if err := os.WriteFile(filepath.Join(dir, llm.SettingsFile), []byte(settings), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if creds != "" {
		if err := os.WriteFile(filepath.Join(dir, llm.CredentialsFile), []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const validSettings = `# iac-code settings
theme: dark            # not ours: ignored
activeProvider: anthropic
providers:
  anthropic:
    model: claude-opus-5-5
    apiBase: https://proxy.example/anthropic
    models: [claude-custom-1]
    contextWindow: 1_000_000
    maxTokens: 32000
    thinkingBudget: 4096
  dashscope:
    model: qwen3-max
`

func TestLoadConfigFromFiles(t *testing.T) {
	dir := home(t, validSettings, "anthropic: sk-ant-from-file\ndashscope: sk-ds\n")
	cfg, err := llm.LoadConfig(dir, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != "anthropic" || cfg.Protocol != llm.ProtocolAnthropic || cfg.Model != "claude-opus-5-5" ||
		cfg.BaseURL != "https://proxy.example/anthropic" || cfg.APIKey != "sk-ant-from-file" ||
		cfg.ContextWindow != 1_000_000 || cfg.MaxTokens != 32000 || cfg.ThinkingBudget != 4096 {
		t.Errorf("cfg = %+v", cfg)
	}
	if cfg.Models[0] != "claude-opus-5-5" || cfg.Models[1] != "claude-custom-1" || !contains(cfg.Models, "claude-sonnet-5-5") {
		t.Errorf("models = %v", cfg.Models)
	}
	settings := filepath.Join(dir, llm.SettingsFile)
	if cfg.Sources["provider"] != settings+":3" || cfg.Sources["model"] != settings+":6" ||
		cfg.Sources["apiKey"] != filepath.Join(dir, llm.CredentialsFile)+":1" {
		t.Errorf("sources = %v", cfg.Sources)
	}
	if !cfg.HasCredentials() || len(cfg.Warnings) != 0 {
		t.Errorf("has credentials %v, warnings %v", cfg.HasCredentials(), cfg.Warnings)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestLoadConfigEnvironmentWins(t *testing.T) {
	dir := home(t, validSettings, "anthropic: sk-ant-from-file\ndeepseek: sk-deep-file\n")
	cfg, err := llm.LoadConfig(dir, envOf(map[string]string{
		"IAC_CODE_PROVIDER": "deepseek",
		"IAC_CODE_MODEL":    "deepseek-reasoner",
		"IAC_CODE_BASE_URL": "http://127.0.0.1:9/v1",
		"DEEPSEEK_API_KEY":  "sk-deep-env",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != "deepseek" || cfg.Protocol != llm.ProtocolOpenAI || cfg.Model != "deepseek-reasoner" ||
		cfg.BaseURL != "http://127.0.0.1:9/v1" || cfg.APIKey != "sk-deep-env" {
		t.Errorf("cfg = %+v", cfg)
	}
	if cfg.Sources["apiKey"] != "env DEEPSEEK_API_KEY" || cfg.Sources["model"] != "env IAC_CODE_MODEL" {
		t.Errorf("sources = %v", cfg.Sources)
	}

	// IAC_CODE_API_KEY beats the conventional variable, which beats the file.
	env := map[string]string{"IAC_CODE_PROVIDER": "deepseek", "DEEPSEEK_API_KEY": "sk-deep-env", "IAC_CODE_API_KEY": "sk-iac"}
	if cfg, _ := llm.LoadConfig(dir, envOf(env)); cfg.APIKey != "sk-iac" {
		t.Errorf("key = %q", cfg.APIKey)
	}
	delete(env, "IAC_CODE_API_KEY")
	delete(env, "DEEPSEEK_API_KEY")
	if cfg, _ := llm.LoadConfig(dir, envOf(env)); cfg.APIKey != "sk-deep-file" || cfg.Model != "deepseek-chat" {
		t.Errorf("key %q model %q", cfg.APIKey, cfg.Model)
	}
	// Numbers from the environment beat settings.yml.
	cfg, err = llm.LoadConfig(dir, envOf(map[string]string{"IAC_CODE_MAX_TOKENS": "100", "IAC_CODE_CONTEXT_WINDOW": "5000"}))
	if err != nil || cfg.MaxTokens != 100 || cfg.ContextWindow != 5000 || cfg.ThinkingBudget != 4096 {
		t.Errorf("err %v cfg %+v", err, cfg)
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	for _, dir := range []string{"", t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		cfg, err := llm.LoadConfig(dir, envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Provider != "openai_compatible" || cfg.APIKey != "" || cfg.HasCredentials() || cfg.BaseURL != "https://api.openai.com/v1" {
			t.Errorf("%q: cfg = %+v", dir, cfg)
		}
	}
	// Empty files are fine too.
	if _, err := llm.LoadConfig(home(t, "\n# nothing\n", "# none\n"), envOf(nil)); err != nil {
		t.Error(err)
	}
}

func TestLoadConfigDetectsProviderFromConventionalKey(t *testing.T) {
	cfg, err := llm.LoadConfig("", envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-ant"}))
	if err != nil || cfg.Provider != "anthropic" || cfg.APIKey != "sk-ant" || cfg.Model != "claude-sonnet-5-5" {
		t.Errorf("err %v cfg %+v", err, cfg)
	}
	cfg, _ = llm.LoadConfig("", envOf(map[string]string{"DASHSCOPE_API_KEY": "sk-ds"}))
	if cfg.Provider != "dashscope" || cfg.BaseURL != "https://dashscope.aliyuncs.com/compatible-mode/v1" {
		t.Errorf("cfg %+v", cfg)
	}
	// Not when IAC_CODE_* point elsewhere.
	cfg, _ = llm.LoadConfig("", envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-ant", "IAC_CODE_BASE_URL": "http://x/v1", "IAC_CODE_API_KEY": "k"}))
	if cfg.Provider != "openai_compatible" || cfg.APIKey != "k" {
		t.Errorf("cfg %+v", cfg)
	}
}

func TestLoadConfigMalformedFiles(t *testing.T) {
	cases := []struct {
		name, settings, creds string
		want                  []string // substrings of the error
	}{
		{"yaml syntax", "activeProvider: anthropic\nproviders:\n  anthropic:\n    model: [unclosed\n", "", []string{llm.SettingsFile + ":4:", "malformed YAML"}},
		{"block mapping", "providers:\n  anthropic:\n    model: a\n   - b\n", "", []string{llm.SettingsFile + ":"}},
		{"tab", "providers:\n\tanthropic: {}\n", "", []string{llm.SettingsFile + ":2:"}},
		{"bad indentation", "activeProvider: anthropic\n  model: x\n", "", []string{llm.SettingsFile + ":2:"}},
		{"not a mapping", "- a\n- b\n", "", []string{llm.SettingsFile + ":1:", "mapping"}},
		{"model type", "providers:\n  anthropic:\n    model: [a, b]\n", "", []string{llm.SettingsFile + ":3:", "providers.anthropic.model", "want a string"}},
		{"number type", "providers:\n  openai:\n    maxTokens: lots\n", "", []string{llm.SettingsFile + ":3:", "maxTokens", "whole number"}},
		{"duplicate key", "activeProvider: openai\nactiveProvider: anthropic\n", "", []string{llm.SettingsFile + ":2:", "line 1"}},
		{"unknown provider", "activeProvider: nope\n", "", []string{llm.SettingsFile + ":1:", `unknown provider "nope"`}},
		{"providers type", "providers: 3\n", "", []string{llm.SettingsFile + ":1:", "providers"}},
		{"credentials syntax", "", "anthropic: sk-ant-SECRET\n  openai: : :\n", []string{llm.CredentialsFile + ":"}},
		{"credentials type", "", "anthropic:\n  key: sk-ant-SECRET\n", []string{llm.CredentialsFile + ":2:", "anthropic"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := home(t, c.settings, c.creds)
			_, err := llm.LoadConfig(dir, envOf(nil))
			if err == nil {
				t.Fatal("want an error")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the file's path", err)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error leaks the key: %q", err)
			}
		})
	}
}

func TestLoadConfigUnreadableFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, llm.SettingsFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := llm.LoadConfig(dir, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), llm.SettingsFile) {
		t.Errorf("err = %v", err)
	}
}

func TestLoadConfigBadEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"IAC_CODE_PROVIDER":         "nope",
		"IAC_CODE_MAX_TOKENS":       "-1",
		"IAC_CODE_THINKING_BUDGET":  "lots",
		"IAC_CODE_RETRY_ATTEMPTS":   "0",
		"IAC_CODE_IDLE_TIMEOUT":     "90",
		"IAC_CODE_RETRY_BASE_DELAY": "x",
	} {
		_, err := llm.LoadConfig("", envOf(map[string]string{k: v}))
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err = %v", k, v, err)
		}
	}
	cfg, err := llm.LoadConfig("", envOf(map[string]string{"IAC_CODE_RETRY_ATTEMPTS": "2", "IAC_CODE_IDLE_TIMEOUT": "5s", "IAC_CODE_RETRY_BASE_DELAY": "10ms"}))
	if err != nil || cfg.Retry.Attempts != 2 || cfg.Retry.IdleTimeout.String() != "5s" || cfg.Retry.BaseDelay.String() != "10ms" {
		t.Errorf("err %v retry %+v", err, cfg.Retry)
	}
}

func TestCredentialsPermissionWarning(t *testing.T) {
	dir := home(t, "", "openai: sk-x\n")
	if err := os.Chmod(filepath.Join(dir, llm.CredentialsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := llm.LoadConfig(dir, envOf(map[string]string{"IAC_CODE_PROVIDER": "openai"}))
	if err != nil || cfg.APIKey != "sk-x" || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "chmod 600") {
		t.Errorf("err %v warnings %v", err, cfg.Warnings)
	}
}

func TestHasCredentialsAndAuthHint(t *testing.T) {
	for _, k := range []string{"ollama", "lmstudio"} {
		cfg, err := llm.LoadConfig("", envOf(map[string]string{"IAC_CODE_PROVIDER": k}))
		if err != nil || !cfg.HasCredentials() {
			t.Errorf("%s: local servers need no key (err %v)", k, err)
		}
	}
	dir := t.TempDir()
	cfg, _ := llm.LoadConfig(dir, envOf(map[string]string{"IAC_CODE_PROVIDER": "anthropic"}))
	if cfg.HasCredentials() {
		t.Error("anthropic without a key has credentials")
	}
	hint := cfg.AuthHint()
	for _, w := range []string{"ANTHROPIC_API_KEY", "IAC_CODE_API_KEY", filepath.Join(dir, llm.CredentialsFile), `"anthropic: <key>"`} {
		if !strings.Contains(hint, w) {
			t.Errorf("hint %q lacks %q", hint, w)
		}
	}
	if !strings.Contains(llm.AuthHint, "IAC_CODE_API_KEY") {
		t.Error("generic hint")
	}
}

func TestConfigNeverPrintsKey(t *testing.T) {
	cfg := llm.Config{Provider: "openai", APIKey: "sk-SECRET", BaseURL: "https://user:sk-SECRET@host/v1?key=sk-SECRET",
		Sources: map[string]string{"apiKey": "env OPENAI_API_KEY"}}
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	log.Info().EmbedObject(cfg).Object("cfg", cfg).Msg("config")
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg), buf.String()} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("key printed: %s", s)
		}
	}
}

func TestContextWindow(t *testing.T) {
	cases := map[string]int{
		"claude-sonnet-5-5":    200_000,
		"gpt-4.1-mini":         1_047_576,
		"gpt-5.5":              400_000,
		"qwen3-coder-plus":     1_000_000,
		"qwen3-coder:30b":      262_144,
		"deepseek-reasoner":    131_072,
		"gemini-2.5-pro":       1_048_576,
		"Kimi-K2-0905-preview": 262_144,
		"totally-unknown":      0,
	}
	for model, want := range cases {
		if got := llm.ContextWindow(model); got != want {
			t.Errorf("ContextWindow(%q) = %d, want %d", model, got, want)
		}
	}
	cfg := llm.Config{Provider: "ollama"}
	if cfg.ContextWindowFor("my-finetune") != 32_768 || cfg.ContextWindowFor("llama3.1:8b") != 131_072 {
		t.Error("preset fallback")
	}
	cfg.ContextWindow = 8192
	if cfg.ContextWindowFor("llama3.1:8b") != 8192 {
		t.Error("override")
	}
	if (llm.Config{Provider: "custom"}).ContextWindowFor("x") != llm.DefaultContextWindow {
		t.Error("default")
	}
}

func TestPresetsAreComplete(t *testing.T) {
	want := []string{"anthropic", "anthropic_compatible", "dashscope", "deepseek", "gemini", "kimi", "lmstudio",
		"ollama", "openai", "openai_compatible", "openrouter", "zhipu"}
	if got := llm.PresetKeys(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("presets = %v", got)
	}
	for k, p := range llm.Presets {
		if p.Key != k || (p.Protocol != llm.ProtocolOpenAI && p.Protocol != llm.ProtocolAnthropic) || p.BaseURL == "" || p.ContextWindow == 0 {
			t.Errorf("preset %s = %+v", k, p)
		}
		if p.DefaultModel != "" && !contains(p.Models, p.DefaultModel) {
			t.Errorf("preset %s: default model not among its models", k)
		}
	}
	if llm.Presets["ollama"].BaseURL != "http://localhost:11434/v1" || llm.Presets["lmstudio"].BaseURL != "http://localhost:1234/v1" {
		t.Error("local base URLs")
	}
}

// New picks the wire protocol from the preset.
func TestNewPicksProtocolByPreset(t *testing.T) {
	srv := llmtest.Start(t)
	for provider, path := range map[string]string{
		"anthropic_compatible": "/v1/messages",
		"deepseek":             "/v1/chat/completions",
		"dashscope":            "/v1/chat/completions",
		"ollama":               "/v1/chat/completions",
		"kimi":                 "/v1/chat/completions",
	} {
		srv.Reset()
		cfg, err := llm.LoadConfig("", envOf(map[string]string{
			"IAC_CODE_PROVIDER": provider, "IAC_CODE_BASE_URL": srv.URL(), "IAC_CODE_API_KEY": "k", "IAC_CODE_RETRY_ATTEMPTS": "1", "IAC_CODE_MODEL": "m",
		}))
		if err != nil {
			t.Fatal(err)
		}
		p, err := llm.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream(t, p, userRequest("x")); err != nil {
			t.Errorf("%s: %v", provider, err)
			continue
		}
		if got := srv.Requests()[0].Path; got != path {
			t.Errorf("%s: path %q, want %q", provider, got, path)
		}
	}
	if _, err := llm.New(llm.Config{Provider: "nope"}); err == nil {
		t.Error("unknown provider")
	}
}

func TestLocalPresetSendsNoKey(t *testing.T) {
	srv := llmtest.Start(t)
	p, err := llm.New(llm.Config{Provider: "ollama", BaseURL: srv.URL(), Retry: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream(t, p, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if r.Header.Get("Authorization") != "" || r.Chat.Model != "qwen3-coder" {
		t.Errorf("auth %q model %q", r.Header.Get("Authorization"), r.Chat.Model)
	}
}

func TestLiveReload(t *testing.T) {
	srv := llmtest.Start(t)
	env := map[string]string{"IAC_CODE_PROVIDER": "anthropic_compatible", "IAC_CODE_BASE_URL": srv.URL(), "IAC_CODE_MODEL": "m"}
	live, err := llm.NewLive(func() (llm.Config, error) { return llm.LoadConfig("", envOf(env)) })
	if err != nil {
		t.Fatal(err)
	}
	if live.Config().HasCredentials() {
		t.Fatal("no key yet")
	}
	if _, err := stream(t, live, userRequest("x")); !llm.IsAuthError(err) {
		t.Fatalf("err = %v", err)
	}
	env["IAC_CODE_API_KEY"] = "k"
	cfg, err := live.Reload()
	if err != nil || !cfg.HasCredentials() || !live.Config().HasCredentials() {
		t.Fatalf("reload: %v", err)
	}
	if _, err := stream(t, live, userRequest("x")); err != nil {
		t.Fatal(err)
	}
	env["IAC_CODE_PROVIDER"] = "nope"
	if _, err := live.Reload(); err == nil || live.Config().Provider != "anthropic_compatible" {
		t.Error("a failed reload keeps the old configuration")
	}
}
