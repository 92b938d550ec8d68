// Package acpserver is the iac-code server command: flags and environment →
// configuration → wiring → serving until stdin EOF or a signal → ordered
// shutdown. cmd/iac-code and its profiling build
// (cmd/acp-bench/internal/profserver) are both this, so they cannot drift.
package acpserver

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors/tracing"
	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/cluster"
	"github.com/iac-code/iac-code/transport/httpsse"
	"github.com/iac-code/iac-code/transport/stdio"
)

// usage takes the command name five times.
const usage = `usage: %s acp [--transport stdio|http] [--host 127.0.0.1] [--port 8765] [--allowed-hosts a,b] [--allowed-origins https://x,…] [--sandbox auto|on|off]
           [--cluster-listen HOST:PORT [--advertise HOST:PORT]]   (http; several pods sharing IAC_CODE_STORE_URL)
       %s login [--provider NAME] [--key-stdin]   (stores an API key in $IAC_CODE_HOME/.credentials.yml)
       %s prompt [--cwd DIR] [--session ID] [--mode MODE] [--yes] [--json] "text"   (text on stdin without it)
       %s usage [--since DATE|DURATION] [--json]   (token usage per person and model, from the store)
       %s --version`

// Main runs the command named name (for messages) with os.Args and exits:
// the server, the terminal client (prompt), or the watchdog process the
// server starts from its own executable.
func Main(name, version string) {
	fillHome(os.Getenv, os.Setenv, user.Current)
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case watchdogCommand:
			os.Exit(runWatchdog())
		case "--version", "-version", "version":
			fmt.Println(name, version)
			return
		case "prompt":
			os.Exit(runPrompt(name, version, os.Args[2:]))
		case loginCommand:
			os.Exit(loginMain(name, os.Args[2:]))
		case usageCommand:
			os.Exit(usageMain(name, os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	if err := run(name, version, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func run(name, version string, args []string) error {
	if len(args) == 0 || args[0] != "acp" {
		return fmt.Errorf(usage, name, name, name, name, name)
	}
	fs := flag.NewFlagSet("acp", flag.ContinueOnError)
	transport := fs.String("transport", "stdio", "stdio or http")
	host := fs.String("host", httpsse.DefaultHost, "HTTP bind address")
	port := fs.Int("port", httpsse.DefaultPort, "HTTP port")
	allowedHosts := fs.String("allowed-hosts", os.Getenv("IAC_CODE_ALLOWED_HOSTS"),
		"HTTP: Host names accepted besides loopback ones, comma-separated (* = any)")
	allowedOrigins := fs.String("allowed-origins", os.Getenv("IAC_CODE_ALLOWED_ORIGINS"),
		"HTTP: browser origins (scheme://host[:port]) allowed to send requests, comma-separated (* = any)")
	clusterListen := fs.String("cluster-listen", os.Getenv("IAC_CODE_CLUSTER_LISTEN"),
		"HTTP: run as a pod of a cluster, reached by the other pods at this HOST:PORT (needs IAC_CODE_STORE_URL and IAC_CODE_CLUSTER_SECRET)")
	advertise := fs.String("advertise", os.Getenv("IAC_CODE_CLUSTER_ADVERTISE"),
		"cluster: the HOST:PORT other pods reach this one at (Kubernetes: the pod IP); default the --cluster-listen address")
	sandboxMode := fs.String("sandbox", "", "auto, on or off: contain bash and stdio MCP servers with Landlock (default IAC_CODE_SANDBOX, else auto)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.Arg(0) == loginCommand { // a terminal auth method (see runLogin)
		if code := loginMain(name, fs.Args()[1:]); code != 0 {
			os.Exit(code)
		}
		return nil
	}
	if *transport != "stdio" && *transport != "http" {
		return fmt.Errorf("unknown transport %q", *transport)
	}
	if err := checkCluster(*transport, *clusterListen, *advertise, os.Getenv); err != nil {
		return err
	}

	// stdout is the protocol in stdio mode and clients often show the
	// agent's stderr to the user: only warnings and errors by default.
	level := zerolog.WarnLevel
	if *transport == "http" {
		level = zerolog.InfoLevel
	}
	log := newLogger(level)
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		return err
	}
	if cfg.actors.Unusable != nil {
		if *clusterListen != "" {
			return errNoHome
		}
		// Serve anyway: an editor that spawned us shows the answers to the
		// requests after initialize, not a process gone before it.
		log.Error().Str("reason", "no_home").Msg(cfg.actors.Unusable.Message + "; every request after initialize is answered with this error")
	}
	if cfg.actors.Sandbox, err = probeSandbox(os.Getenv, *sandboxMode, cfg.actors.Home, log); err != nil {
		return err
	}
	cfg.actors.Version = version
	// Traces only when the standard OTEL_* variables ask for them; the
	// spans still buffered are sent before the process exits.
	tracer, stopTracing, err := tracing.Setup(context.Background(), os.Getenv, version)
	if err != nil {
		return err
	}
	defer flushTraces(stopTracing, log)
	if tracer != nil {
		log.Info().Bool("content", tracer.CapturesContent()).Msg("tracing: exporting spans over OTLP")
	}
	cfg.trace = tracer
	if *transport == "http" {
		// Identities (issue 20): a bad tokens file or JWKS stops the server
		// here, naming the file and line or the variable.
		authCtx, stopAuth := context.WithCancel(context.Background())
		defer stopAuth()
		chain, err := auth.FromEnv(authCtx, os.Getenv, log)
		if err != nil {
			return err
		}
		if chain != nil {
			cfg.http.Auth, cfg.auth = chain, chain
		}
	}
	cfg.http.Host, cfg.http.Port = *host, *port
	cfg.http.AllowedHosts, cfg.http.AllowedOrigins = splitList(*allowedHosts), splitList(*allowedOrigins)
	checkFileLimit(log)
	watchdog := startWatchdog(log)
	srv, sessions, err := wire(&cfg, log)
	if err != nil {
		watchdog.Close(time.Second)
		return err
	}
	var pod *cluster.Node
	if *clusterListen != "" {
		if pod, err = joinCluster(srv, sessions, *clusterListen, *advertise, log); err != nil {
			shutdown(srv, sessions, watchdog, log)
			return err
		}
		cfg.http.Cluster = pod
	}
	ctx, stop := onSignals(context.Background(), log, os.Exit)
	defer stop()

	if *transport == "stdio" {
		err = stdio.Serve(ctx, srv, os.Stdin, os.Stdout, log)
	} else {
		err = httpsse.Serve(ctx, srv, cfg.http, log)
	}
	shutdown(srv, sessions, watchdog, log)
	if pod != nil {
		pod.Stop() // after the store released this pod's leases and declared it dead
	}
	return err
}

// flushTraces sends the spans still buffered (bounded: a collector that
// does not answer must not hold the exit).
func flushTraces(stop func(context.Context) error, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn().Err(err).Msg("tracing: spans not all sent at exit")
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// newLogger logs JSON to stderr (in stdio mode stdout is the protocol) at
// IAC_CODE_LOG_LEVEL, else at def.
func newLogger(def zerolog.Level) zerolog.Logger {
	return newLoggerTo(os.Stderr, def)
}

func newLoggerTo(w io.Writer, def zerolog.Level) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(os.Getenv("IAC_CODE_LOG_LEVEL")))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = def
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("svc", "iac-code").Logger()
}
