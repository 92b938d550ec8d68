// Package sandbox contains what the model runs (bash commands, stdio MCP
// servers) with the kernel's Landlock LSM: a process started through a
// Jail reads and writes its session's directories and a temporary
// directory of its own, reads and executes the system, and reaches
// nothing else (not $HOME, not the server's state, not other workspaces);
// with the network off it cannot connect or bind TCP, and where the kernel
// scopes IPC it cannot signal the server.
//
// Go cannot restrict a child through os/exec, and restricting the server
// would restrict every session. The restriction is applied to one OS
// thread that exists only to start the child: the goroutine locks a fresh
// thread, restricts that thread alone (Landlock applies to the calling
// thread; the runtime never clones new threads from a locked one), starts
// the child from it — which inherits the domain through fork and execve —
// and exits without unlocking, so the runtime destroys the thread. The
// server's other threads are untouched. This costs a thread per start,
// where re-executing the server binary as a helper would cost its whole
// start (about 5.6 ms more per call on the machine it was measured on, see
// docs/security.md).
package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Mode is IAC_CODE_SANDBOX.
type Mode string

const (
	// Auto sandboxes where the kernel has Landlock, and runs commands as
	// before (with one warning at start) where it has not.
	Auto Mode = "auto"
	// On sandboxes, and refuses to run a sandboxed tool without Landlock.
	On Mode = "on"
	// Off runs commands with the server's full rights.
	Off Mode = "off"
)

// Settings are the sandbox's configuration, from the server's environment
// only: repository content never widens the sandbox.
type Settings struct {
	Mode Mode
	// Network: sandboxed processes may connect and bind TCP.
	Network bool
	// Read and Write widen the sandbox: more directories to read (and
	// execute), or to read and write.
	Read, Write []string
	// Home is IAC_CODE_HOME, never reachable through a PATH entry or a
	// system directory.
	Home string
	// UserHome is the server's $HOME, which the sandbox keeps closed. It
	// is the server's own, never a child's: an MCP server entry's env (a
	// client's) may set the child's HOME to anything. Empty: the server
	// process's $HOME.
	UserHome string
}

// SettingsFromEnv reads HOME (the home to protect), IAC_CODE_SANDBOX (auto|on|off, default auto),
// IAC_CODE_SANDBOX_NETWORK (on|off, default on) and IAC_CODE_SANDBOX_READ
// and IAC_CODE_SANDBOX_WRITE (lists of absolute paths separated by
// os.PathListSeparator). mode, when not empty, is the --sandbox flag and
// wins over the variable.
func SettingsFromEnv(getenv func(string) string, mode, home string) (Settings, error) {
	s := Settings{Mode: Auto, Network: true, Home: home, UserHome: getenv("HOME")}
	var errs []error
	if mode == "" {
		mode = getenv("IAC_CODE_SANDBOX")
	}
	switch m := Mode(strings.ToLower(strings.TrimSpace(mode))); m {
	case "":
	case Auto, On, Off:
		s.Mode = m
	default:
		errs = append(errs, fmt.Errorf("IAC_CODE_SANDBOX (--sandbox): want auto, on or off, got %q", mode))
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("IAC_CODE_SANDBOX_NETWORK"))); v {
	case "", "on":
	case "off":
		s.Network = false
	default:
		errs = append(errs, fmt.Errorf("IAC_CODE_SANDBOX_NETWORK: want on or off, got %q", v))
	}
	var err error
	if s.Read, err = pathList("IAC_CODE_SANDBOX_READ", getenv); err != nil {
		errs = append(errs, err)
	}
	if s.Write, err = pathList("IAC_CODE_SANDBOX_WRITE", getenv); err != nil {
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

func pathList(name string, getenv func(string) string) ([]string, error) {
	var out []string
	for _, p := range filepath.SplitList(getenv(name)) {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%s: %q is not an absolute path", name, p)
		}
		out = append(out, filepath.Clean(p))
	}
	return out, nil
}

// Status is what is in force, found once at start.
type Status struct {
	Settings Settings
	// ABI is the kernel's Landlock ABI version (0: none).
	ABI int
	// Reason says why Landlock is not available (ABI 0).
	Reason string
}

// Active: commands run sandboxed.
func (s Status) Active() bool { return s.Settings.Mode != Off && s.ABI > 0 }

// Refused: IAC_CODE_SANDBOX=on without Landlock; sandboxed tools fail.
func (s Status) Refused() bool { return s.Settings.Mode == On && s.ABI == 0 }

// Meta is the sandbox's entry for a _meta object ("sandbox"): mode
// "landlock" with the ABI, the network setting and whether signals are
// scoped; "off" (IAC_CODE_SANDBOX=off, or auto without Landlock, with the
// reason); "unavailable" (on without Landlock: sandboxed tools fail).
func (s Status) Meta() map[string]any {
	switch {
	case s.Active():
		return map[string]any{"mode": "landlock", "abi": s.ABI, "network": s.Settings.Network,
			"scoped": s.ABI >= 6}
	case s.Refused():
		return map[string]any{"mode": "unavailable", "reason": s.Reason}
	case s.Settings.Mode == Off:
		return map[string]any{"mode": "off"}
	}
	return map[string]any{"mode": "off", "reason": s.Reason}
}

// Warnings are what the kernel's ABI leaves out of these settings.
func (s Status) Warnings() []string {
	if !s.Active() {
		return nil
	}
	var out []string
	if !s.Settings.Network && s.ABI < 4 {
		out = append(out, fmt.Sprintf("IAC_CODE_SANDBOX_NETWORK=off needs Landlock ABI 4, the kernel has %d: TCP is not restricted", s.ABI))
	}
	if s.ABI < 6 {
		out = append(out, fmt.Sprintf("Landlock ABI %d does not scope signals and abstract unix sockets (ABI 6): a sandboxed command can signal the server", s.ABI))
	}
	return out
}

// MetaKey is the _meta key of the sandbox's entry.
const MetaKey = "sandbox"

// Probe finds what the kernel offers for these settings.
func Probe(s Settings) Status {
	abi, reason := kernelABI()
	return Status{Settings: s, ABI: abi, Reason: reason}
}

var kernelABI = landlockABI

// HideLandlock makes Probe find no Landlock: for the e2e build of the
// server (-tags e2etest), which shows what happens on such a kernel.
func HideLandlock() {
	kernelABI = func() (int, string) { return 0, "Landlock hidden by the test build (IAC_CODE_E2E_NO_LANDLOCK=1)" }
}
