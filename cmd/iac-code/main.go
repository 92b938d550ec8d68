// Command iac-code is an AI coding agent server speaking the Agent Client
// Protocol over stdio or HTTP+SSE.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/transport/httpsse"
	"github.com/iac-code/iac-code/transport/stdio"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "iac-code:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || args[0] != "acp" {
		return fmt.Errorf("usage: iac-code acp [--transport stdio|http] [--host 127.0.0.1] [--port 8765]")
	}
	fs := flag.NewFlagSet("acp", flag.ContinueOnError)
	transport := fs.String("transport", "stdio", "stdio or http")
	host := fs.String("host", "127.0.0.1", "HTTP bind address")
	port := fs.Int("port", 8765, "HTTP port")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}

	log := newLogger()
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	// The model configuration (environment > settings.yml > .credentials.yml)
	// is live: authenticate re-reads it.
	models, err := llm.NewLive(func() (llm.Config, error) {
		c, err := llm.LoadConfig(cfg.Home, os.Getenv)
		c.Log = log
		return c, err
	})
	if err != nil {
		return err
	}
	for _, w := range models.Config().Warnings {
		log.Warn().Msg(w)
	}
	log.Info().EmbedObject(models.Config()).Msg("model provider")
	// IAC_CODE_STORE_URL picks the store: files under the home (default) or
	// PostgreSQL shared by several processes. Closed after the actor system
	// stops: the shared store then releases this process's leases at once.
	sessions, err := store.OpenFromEnv(cfg.Home, os.Getenv, store.WithLogger(log))
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	defer func() {
		if err := sessions.Close(); err != nil {
			log.Warn().Err(err).Msg("close session store")
		}
	}()
	srv := actors.NewServer(actors.Deps{Config: cfg, Provider: models, LLM: models, Tools: tools.Default(), Store: sessions, Log: log})
	defer srv.Shutdown()

	switch *transport {
	case "stdio":
		return stdio.Serve(srv, os.Stdin, os.Stdout, log)
	case "http":
		// SIGINT/SIGTERM: stop accepting, cancel turns, flush and close the
		// streams, then return (within 10 s) so the actor system stops.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return httpsse.Serve(ctx, srv, httpsse.Config{
			Host:  *host,
			Port:  *port,
			Token: os.Getenv("IACCODE_ACP_HTTP_TOKEN"),
		}, log)
	default:
		return fmt.Errorf("unknown transport %q", *transport)
	}
}

// newLogger logs JSON to stderr: in stdio mode stdout is the protocol.
func newLogger() zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(os.Getenv("IAC_CODE_LOG_LEVEL")))
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("svc", "iac-code").Logger()
}

func loadConfig() (actors.Config, error) {
	home := os.Getenv("IAC_CODE_HOME")
	if home == "" {
		dir, err := os.UserHomeDir()
		if err != nil {
			return actors.Config{}, fmt.Errorf("cannot find the home directory; set IAC_CODE_HOME: %w", err)
		}
		home = filepath.Join(dir, ".iac-code")
	}
	cfg := actors.Config{Version: version, Home: home, SessionIdle: time.Hour}
	if v := os.Getenv("IAC_CODE_MAX_TURN_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("IAC_CODE_MAX_TURN_REQUESTS: want a positive number, got %q", v)
		}
		cfg.MaxTurnRequests = n
	}
	if v := os.Getenv("IAC_CODE_SESSION_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return cfg, fmt.Errorf("IAC_CODE_SESSION_IDLE: %w", err)
		}
		cfg.SessionIdle = d
	}
	return cfg, nil
}
