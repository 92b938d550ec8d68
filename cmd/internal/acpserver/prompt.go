package acpserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/iac-code/iac-code/cmd/internal/termclient"
	"github.com/iac-code/iac-code/transport/stdio"
)

// runPrompt is `iac-code prompt`: the same server as `acp` (wire), served
// over an in-process pipe by the stdio transport, driven by the terminal
// client — every byte is the real protocol. It returns the exit code.
func runPrompt(name, version string, args []string) int {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	cwd := fs.String("cwd", "", "working directory of the session (default: the current one; with --session: the session's)")
	session := fs.String("session", "", "continue this stored session")
	mode := fs.String("mode", "", "session mode: default, accept_edits, plan or bypass")
	yes := fs.Bool("yes", false, "approve every permission request (allow once)")
	asJSON := fs.Bool("json", false, "print the raw session/update notifications, then the prompt's answer, as JSON lines")
	if err := fs.Parse(args); err != nil {
		return termclient.ExitUsage
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" || text == "-" {
		if term.IsTerminal(int(os.Stdin.Fd())) {
			fmt.Fprintln(os.Stderr, "Type the prompt, then Ctrl-D:")
		}
		in, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, name+": reading the prompt from stdin:", err)
			return termclient.ExitUsage
		}
		text = string(in)
	}
	if strings.TrimSpace(text) == "" {
		fmt.Fprintf(os.Stderr, "%s: no prompt text (give it as an argument or on stdin)\n"+usage+"\n", name, name, name, name, name, name)
		return termclient.ExitUsage
	}
	dir := *cwd
	if dir == "" && *session == "" {
		dir, _ = os.Getwd()
	}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			return termclient.ExitUsage
		}
		dir = abs
	}

	stderrTTY := term.IsTerminal(int(os.Stderr.Fd()))
	var logOut io.Writer = os.Stderr
	if stderrTTY {
		logOut = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	}
	log := newLoggerTo(logOut, zerolog.WarnLevel)
	cfg, err := loadConfig(os.Getenv)
	if err == nil && cfg.actors.Unusable != nil {
		err = errNoHome
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return termclient.ExitError
	}
	cfg.actors.Version = version
	if cfg.actors.Sandbox, err = probeSandbox(os.Getenv, "", cfg.actors.Home, log); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return termclient.ExitUsage
	}
	checkFileLimit(log)
	watchdog := startWatchdog(log)
	srv, sessions, err := wire(&cfg, log)
	if err != nil {
		watchdog.Close(time.Second)
		fmt.Fprintln(os.Stderr, name+":", err)
		return termclient.ExitError
	}

	// The client writes requests into toAgent and reads the agent's lines
	// from fromAgent; stdio.Serve does the opposite, as with an editor.
	agentIn, toAgent := io.Pipe()
	fromAgent, agentOut := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := stdio.Serve(context.Background(), srv, agentIn, agentOut, log)
		agentOut.Close()
		served <- err
	}()

	interrupts := make(chan os.Signal, 2)
	signal.Notify(interrupts, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(interrupts)
	t := termclient.Terminal{Stdout: os.Stdout, Stderr: os.Stderr, Color: stderrTTY,
		StdoutTTY: term.IsTerminal(int(os.Stdout.Fd()))}
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		defer tty.Close()
		t.TTY = tty
	}
	code := termclient.Run(context.Background(), termclient.Options{
		Cwd: dir, SessionID: *session, Mode: *mode, Yes: *yes, JSON: *asJSON, Text: text, Version: version,
	}, toAgent, fromAgent, interrupts, t)

	// Wind down like an editor closing stdin: running turns are cancelled
	// and persisted, tool process groups killed. Another signal exits now.
	go func() {
		if sig, ok := <-interrupts; ok {
			os.Exit(128 + int(sig.(syscall.Signal)))
		}
	}()
	toAgent.Close()
	go func() { _, _ = io.Copy(io.Discard, fromAgent) }() // the agent's last lines, unread
	if err := <-served; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		log.Warn().Err(err).Msg("stdio transport")
	}
	shutdown(srv, sessions, watchdog, log)
	return code
}
