//go:build unix

package acpserver

import (
	"context"
	"fmt"
	"os/user"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestFirstSignalCancelsSecondExits(t *testing.T) {
	exited := make(chan int, 1)
	ctx, stop := onSignals(context.Background(), zerolog.Nop(), func(code int) { exited <- code })
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not cancel the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("exited with %d after one signal", code)
	case <-time.After(50 * time.Millisecond):
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 128+int(syscall.SIGTERM) {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not exit")
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	env := map[string]string{
		"IAC_CODE_HOME":                 "/tmp/h",
		"IAC_CODE_SESSION_RELEASE":      "5s",
		"IAC_CODE_MAX_SESSIONS":         "7",
		"IAC_CODE_HTTP_IDLE_TIMEOUT":    "2m",
		"IAC_CODE_HTTP_UNUSED_TIMEOUT":  "10s",
		"IAC_CODE_HTTP_MAX_UNUSED":      "99",
		"IAC_CODE_HTTP_REPLAY_MAX_AGE":  "3s",
		"IAC_CODE_HTTP_MAX_CONNECTIONS": "500",
		"IAC_CODE_MCP_STARTUP_TIMEOUT":  "2s",
		"IAC_CODE_MCP_TOOL_TIMEOUT":     "90s",
		"IAC_CODE_CLIENT_TIMEOUT":       "9s",
		"IAC_CODE_MAX_IMAGE_BYTES":      "1000",
		"IAC_CODE_WS_PING_INTERVAL":     "3s",
		"IAC_CODE_DETACHED_TURN_MAX":    "5m",
		"IAC_CODE_FOLLOW_TIMEOUT":       "7s",

		"IAC_CODE_WORKSPACE_ROOT":           "/srv/ws/{user}",
		"IAC_CODE_MAX_TURNS_PER_USER":       "3",
		"IAC_CODE_MAX_CONNECTIONS_PER_USER": "4",
		"IAC_CODE_SESSION_ATTACH":           "move",
		"IAC_CODE_PROMPT_QUEUE":             "2",
	}
	s, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, h := s.actors, s.http
	if a.Home != "/tmp/h" || a.SessionRelease != 5*time.Second || a.MaxSessions != 7 || a.SessionIdle != time.Hour ||
		a.MCPStartupTimeout != 2*time.Second || a.MCPToolTimeout != 90*time.Second ||
		a.ClientTimeout != 9*time.Second || a.MaxImageBytes != 1000 ||
		a.WorkspaceRoot != "/srv/ws/{user}" || a.MaxTurnsPerUser != 3 || a.SessionAttach != "move" || a.PromptQueue != 2 ||
		a.FollowTimeout != 7*time.Second {
		t.Errorf("actors config %+v", a)
	}
	if h.IdleTimeout != 2*time.Minute || h.UnusedTimeout != 10*time.Second || h.MaxUnused != 99 ||
		h.ReplayMaxAge != 3*time.Second || h.MaxConnections != 500 || h.MaxConnectionsPerUser != 4 || h.WSPingInterval != 3*time.Second ||
		h.DetachedTurnMax != 5*time.Minute {
		t.Errorf("http config %+v", h)
	}
	for v, want := range map[string]time.Duration{"0": -1, "": 0} {
		env := map[string]string{"IAC_CODE_HOME": "/h", "IAC_CODE_DETACHED_TURN_MAX": v}
		s, err := loadConfig(func(k string) string { return env[k] })
		if err != nil || s.http.DetachedTurnMax != want {
			t.Errorf("IAC_CODE_DETACHED_TURN_MAX=%q: %v, %v (want %v: 0 keeps the old cancel, unset the default)", v, s.http.DetachedTurnMax, err, want)
		}
	}

	for _, v := range []string{"0", "-1s", "3", "soon"} {
		env := map[string]string{"IAC_CODE_HOME": "/h", "IAC_CODE_FOLLOW_TIMEOUT": v}
		_, err := loadConfig(func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), "IAC_CODE_FOLLOW_TIMEOUT: want a positive duration") || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("IAC_CODE_FOLLOW_TIMEOUT=%q: %v, want an error naming the variable and the value", v, err)
		}
	}
	if s, err := loadConfig(func(k string) string { return map[string]string{"IAC_CODE_HOME": "/h"}[k] }); err != nil || s.actors.FollowTimeout != 0 {
		t.Errorf("IAC_CODE_FOLLOW_TIMEOUT unset: %v, %v (want 0: the actors' default)", s.actors.FollowTimeout, err)
	}

	env = map[string]string{"IAC_CODE_HOME": "/h", "IAC_CODE_MAX_SESSIONS": "-1", "IAC_CODE_HTTP_UNUSED_TIMEOUT": "soon",
		"IAC_CODE_WORKSPACE_ROOT": "ws/{user}", "IAC_CODE_SESSION_ATTACH": "steal", "IAC_CODE_PROMPT_QUEUE": "0"}
	_, err = loadConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "IAC_CODE_MAX_SESSIONS") || !strings.Contains(err.Error(), "IAC_CODE_HTTP_UNUSED_TIMEOUT") ||
		!strings.Contains(err.Error(), "IAC_CODE_WORKSPACE_ROOT") || !strings.Contains(err.Error(), "IAC_CODE_SESSION_ATTACH: want one of share, move") ||
		!strings.Contains(err.Error(), "IAC_CODE_PROMPT_QUEUE") {
		t.Fatalf("want the five variables named, got %v", err)
	}
}

func TestFillHomeFromThePasswordDatabase(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	setenv := func(k, v string) error { env[k] = v; return nil }
	fillHome(getenv, setenv, func() (*user.User, error) { return &user.User{HomeDir: "/home/ada"}, nil })
	if env["HOME"] != "/home/ada" {
		t.Fatalf("HOME = %q, want the passwd home", env["HOME"])
	}
	fillHome(getenv, setenv, func() (*user.User, error) { return &user.User{HomeDir: "/elsewhere"}, nil })
	if env["HOME"] != "/home/ada" {
		t.Fatalf("a set HOME was replaced: %q", env["HOME"])
	}
	env = map[string]string{}
	fillHome(getenv, setenv, func() (*user.User, error) { return nil, user.UnknownUserIdError(4242) })
	fillHome(getenv, setenv, func() (*user.User, error) { return &user.User{HomeDir: "relative"}, nil })
	if _, set := env["HOME"]; set {
		t.Fatalf("HOME set without a usable passwd entry: %q", env["HOME"])
	}
}

func TestNoHomeMakesAnUnusableServerNotAnError(t *testing.T) {
	t.Setenv("HOME", "")
	s, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatalf("no home must not stop the server before initialize: %v", err)
	}
	u := s.actors.Unusable
	if u == nil || u.Code != -32603 || !strings.Contains(u.Message, "IAC_CODE_HOME") {
		t.Fatalf("Unusable = %+v, want -32603 naming IAC_CODE_HOME", u)
	}
	if data, _ := u.Data.(map[string]string); data["reason"] != "no_home" {
		t.Fatalf("data %v, want reason no_home", u.Data)
	}
	s, err = loadConfig(func(k string) string { return map[string]string{"IAC_CODE_HOME": "/h"}[k] })
	if err != nil || s.actors.Unusable != nil || s.actors.Home != "/h" {
		t.Fatalf("IAC_CODE_HOME alone: %+v %v", s.actors, err)
	}
}
