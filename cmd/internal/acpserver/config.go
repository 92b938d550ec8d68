package acpserver

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/actors/tracing"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// settings is the server's configuration from the environment (the model's
// own is read by llm.LoadConfig, live).
type settings struct {
	actors actors.Config
	http   httpsse.Config
	// budget is every principal's default token budget; auth, on HTTP,
	// the identity sources, which may override it per principal.
	budget store.Budget
	auth   *auth.Chain
	// modelConcurrency: IAC_CODE_MODEL_CONCURRENCY (0: no shared limit).
	modelConcurrency int
	// trace is nil unless OTEL_* variables ask for traces (see run).
	trace *tracing.Tracer
}

// errNoHome: neither IAC_CODE_HOME nor a user home to put ~/.iac-code in.
var errNoHome = errors.New("cannot find a home directory for iac-code's state: $HOME is not set and " +
	"the password database has no home for this user; set IAC_CODE_HOME to a writable directory")

// homeDir is IAC_CODE_HOME, by default ~/.iac-code (see fillHome).
func homeDir(getenv func(string) string) (string, error) {
	if home := getenv("IAC_CODE_HOME"); home != "" {
		return home, nil
	}
	dir, err := os.UserHomeDir()
	if err != nil {
		return "", errNoHome
	}
	return filepath.Join(dir, ".iac-code"), nil
}

// fillHome sets $HOME, when it is unset, to the user's home from the
// password database: editors start agents with thin environments
// (avante.nvim gives PATH and its configured env only), and the state
// root, the sandbox's protected home and the tools (git, npm, go) all read
// $HOME. Without an entry $HOME stays unset (see errNoHome).
func fillHome(getenv func(string) string, setenv func(string, string) error, current func() (*user.User, error)) {
	if runtime.GOOS == "windows" || getenv("HOME") != "" {
		return // Windows: os.UserHomeDir reads USERPROFILE
	}
	if u, err := current(); err == nil && u.HomeDir != "" && filepath.IsAbs(u.HomeDir) {
		_ = setenv("HOME", u.HomeDir)
	}
}

// loadConfig reads IAC_CODE_HOME and the behaviour settings; an invalid
// value stops the server at start, naming the variable. Without a home the
// server still starts, unusable (actors.Config.Unusable): an editor shows
// the reason as the answer to the requests after initialize.
func loadConfig(getenv func(string) string) (settings, error) {
	home, err := homeDir(getenv)
	if err != nil {
		home = ""
	}
	s := settings{
		actors: actors.Config{Home: home, SessionIdle: time.Hour},
		http:   httpsse.Config{Token: getenv("IACCODE_ACP_HTTP_TOKEN")},
	}
	if err != nil {
		s.actors.Unusable = protocol.NewError(protocol.CodeInternalError, err.Error(),
			map[string]string{"reason": "no_home", "hint": "set IAC_CODE_HOME in the agent's environment (the editor's agent settings)"})
	}
	e := envReader{getenv: getenv}
	e.positive("IAC_CODE_MAX_TURN_REQUESTS", &s.actors.MaxTurnRequests)
	e.duration("IAC_CODE_SESSION_IDLE", &s.actors.SessionIdle)
	e.duration("IAC_CODE_SESSION_RELEASE", &s.actors.SessionRelease)
	e.positive("IAC_CODE_MAX_SESSIONS", &s.actors.MaxSessions)
	e.duration("IAC_CODE_MCP_STARTUP_TIMEOUT", &s.actors.MCPStartupTimeout)
	e.duration("IAC_CODE_MCP_TOOL_TIMEOUT", &s.actors.MCPToolTimeout)
	e.duration("IAC_CODE_CLIENT_TIMEOUT", &s.actors.ClientTimeout)
	e.positive("IAC_CODE_MAX_IMAGE_BYTES", &s.actors.MaxImageBytes)
	e.positive("IAC_CODE_PROMPT_QUEUE", &s.actors.PromptQueue)
	e.oneOf("IAC_CODE_SESSION_ATTACH", &s.actors.SessionAttach, actors.AttachShare, actors.AttachMove)
	e.duration("IAC_CODE_HTTP_IDLE_TIMEOUT", &s.http.IdleTimeout)
	e.duration("IAC_CODE_HTTP_UNUSED_TIMEOUT", &s.http.UnusedTimeout)
	e.positive("IAC_CODE_HTTP_MAX_UNUSED", &s.http.MaxUnused)
	e.duration("IAC_CODE_HTTP_REPLAY_MAX_AGE", &s.http.ReplayMaxAge)
	e.positive("IAC_CODE_HTTP_MAX_CONNECTIONS", &s.http.MaxConnections)
	e.duration("IAC_CODE_WS_PING_INTERVAL", &s.http.WSPingInterval)
	e.duration("IAC_CODE_DETACHED_TURN_MAX", &s.http.DetachedTurnMax)
	e.duration("IAC_CODE_DRAIN_TIMEOUT", &s.http.DrainTimeout)
	e.positiveDuration("IAC_CODE_FOLLOW_TIMEOUT", &s.actors.FollowTimeout)
	if getenv("IAC_CODE_DETACHED_TURN_MAX") != "" && s.http.DetachedTurnMax == 0 {
		s.http.DetachedTurnMax = -1 // 0: turns end with their client, as before
	}
	e.positive("IAC_CODE_MAX_CONNECTIONS_PER_USER", &s.http.MaxConnectionsPerUser)
	e.positive("IAC_CODE_MAX_TURNS_PER_USER", &s.actors.MaxTurnsPerUser)
	e.positive(envModelConcurrency, &s.modelConcurrency)
	e.tokens(envTokensPerDay, &s.budget.PerDay)
	e.tokens(envTokensPerMonth, &s.budget.PerMonth)
	if root := getenv("IAC_CODE_WORKSPACE_ROOT"); root != "" {
		if !filepath.IsAbs(root) {
			e.errs = append(e.errs, fmt.Errorf("IAC_CODE_WORKSPACE_ROOT: want an absolute path (with {user} for the principal), got %q", root))
		}
		s.actors.WorkspaceRoot = root
	}
	return s, errors.Join(e.errs...)
}

// envReader parses optional variables into their fields, collecting errors.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (e *envReader) positive(name string, dst *int) {
	if v := e.getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			e.errs = append(e.errs, fmt.Errorf("%s: want a positive number, got %q", name, v))
			return
		}
		*dst = n
	}
}

// tokens reads a token count: a whole number, 0 or more (0: no cap).
func (e *envReader) tokens(name string, dst *int64) {
	if v := e.getenv(name); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			e.errs = append(e.errs, fmt.Errorf("%s: want a number of tokens (0: no cap), got %q", name, v))
			return
		}
		*dst = n
	}
}

func (e *envReader) oneOf(name string, dst *string, values ...string) {
	if v := e.getenv(name); v != "" {
		if !slices.Contains(values, v) {
			e.errs = append(e.errs, fmt.Errorf("%s: want one of %s, got %q", name, strings.Join(values, ", "), v))
			return
		}
		*dst = v
	}
}

// positiveDuration reads a duration that must be more than zero (the
// field's zero is its default, so 0 would not mean "none").
func (e *envReader) positiveDuration(name string, dst *time.Duration) {
	if v := e.getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			e.errs = append(e.errs, fmt.Errorf("%s: want a positive duration such as 3s or 500ms, got %q", name, v))
			return
		}
		*dst = d
	}
}

func (e *envReader) duration(name string, dst *time.Duration) {
	if v := e.getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			e.errs = append(e.errs, fmt.Errorf("%s: want a duration such as 30s or 10m, got %q", name, v))
			return
		}
		*dst = d
	}
}
