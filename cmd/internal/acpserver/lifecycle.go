package acpserver

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools/procgroup"
)

// watchdogCommand is the hidden subcommand that runs the watchdog.
const watchdogCommand = "internal-watchdog"

// shutdownKillGrace bounds the last sweep of tool process groups.
const shutdownKillGrace = 2 * time.Second

// startWatchdog arranges for the process that kills the tool process
// groups if this one dies without doing it (kill -9 included); it starts
// with the first group (a bash command, a stdio MCP server), so an idle
// server or one that starts no tool runs no second process. Without it
// the server still runs; only that guarantee is lost, and the log says so.
func startWatchdog(log zerolog.Logger) *procgroup.OnDemand {
	exe, err := os.Executable()
	if err != nil {
		log.Warn().Err(err).Msg("no process-group watchdog: cannot find the executable")
		return nil
	}
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(exe, watchdogCommand)
		// Nothing of ours (keys, tokens) in its environment: the server's log
		// level (quiet in stdio mode too), and the race detector's options in a
		// -race build.
		cmd.Env = []string{"IAC_CODE_LOG_LEVEL=" + log.GetLevel().String(), "GORACE=" + os.Getenv("GORACE")}
		return cmd
	}
	started := func(pid int, err error) {
		if err != nil {
			log.Warn().Err(err).Msg("no process-group watchdog")
			return
		}
		log.Debug().Int("pid", pid).Msg("process-group watchdog started")
	}
	return procgroup.StartWatchdogOnDemand(newCmd, os.Stderr, started, func(err error) {
		log.Warn().Err(err).Msg("process-group watchdog gone: tool processes may outlive a crash")
	})
}

// runWatchdog is the watchdog process: registrations arrive on fd 3.
func runWatchdog() int {
	log := newLogger(zerolog.InfoLevel).With().Str("svc", "iac-code-watchdog").Logger()
	procgroup.RunWatchdog(os.NewFile(3, "registrations"), procgroup.WatchdogGrace, log)
	return 0
}

// onSignals returns a context cancelled by the first SIGINT, SIGTERM or
// SIGHUP (the transport then winds down in order); a second one exits at
// once with 128+signal.
func onSignals(parent context.Context, log zerolog.Logger, exit func(int)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			log.Info().Str("signal", sig.String()).Msg("shutting down (a second signal exits at once)")
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-ch:
			log.Warn().Str("signal", sig.String()).Msg("second signal: exiting now")
			exit(128 + int(sig.(syscall.Signal)))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// shareEndWait bounds the end of this pod's shares with other pods'
// clients at shutdown (actors.Server.EndShares).
const shareEndWait = 2 * time.Second

// shutdown is the end of every run, after the transport has drained its
// connections: the sessions this pod shares with clients of other pods end
// their shares (those clients get the answers they wait for at once, not
// when this pod's connections time out), the actor system stops (its sessions close their handles),
// the session store closes (the shared store releases this process's
// leases at once), tool process groups still registered are killed, the
// watchdog is let go.
func shutdown(srv *actors.Server, sessions store.Backend, wd *procgroup.OnDemand, log zerolog.Logger) {
	srv.EndShares(shareEndWait)
	srv.Shutdown()
	if sessions != nil {
		if err := sessions.Close(); err != nil {
			log.Warn().Err(err).Msg("close session store")
		}
	}
	if n := procgroup.KillAll(shutdownKillGrace); n > 0 {
		log.Info().Int("groups", n).Msg("killed tool process groups left at shutdown")
	}
	wd.Close(time.Second)
}
