package acpserver

import (
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
)

// wire builds what both transports serve: the live model configuration
// (environment > settings.yml > .credentials.yml; authenticate re-reads
// it), the session store (IAC_CODE_STORE_URL: files under the home, or
// PostgreSQL shared by several processes) and the actor system. The store
// is closed by shutdown, after the actor system. An unusable server (no
// home) opens no store.
func wire(cfg *settings, log zerolog.Logger) (*actors.Server, store.Backend, error) {
	if cfg.actors.Unusable != nil {
		models, err := liveModels(cfg, log, nil)
		if err != nil {
			return nil, nil, err
		}
		return actors.NewServer(actors.Deps{Config: cfg.actors, Provider: models, LLM: models, Log: log}), nil, nil
	}
	// A session another process on this home holds between turns is let go
	// of at once (see store.TurnMarker); the lock wait covers its requests.
	sessions, err := store.OpenFromEnv(cfg.actors.Home, os.Getenv, store.WithLogger(log), store.WithLockWait(time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("session store: %w", err)
	}
	waits := newLimitMetrics()
	limit := modelLimit(cfg.modelConcurrency, sessions, waits)
	if limit != nil {
		cfg.http.Collectors = append(cfg.http.Collectors, waits.collectors()...)
	}
	models, err := liveModels(cfg, log, limit)
	if err != nil {
		_ = sessions.Close()
		return nil, nil, err
	}
	met := newTokenMetrics()
	cfg.http.Collectors = append(cfg.http.Collectors, met.collectors()...)
	return actors.NewServer(actors.Deps{Config: cfg.actors, Provider: models, LLM: models,
		Tools: tools.Default(), Store: sessions, Log: log, Ledger: newLedger(*cfg, sessions, met),
		Trace: cfg.trace}), sessions, nil
}

// liveModels is the model configuration, read again on authenticate.
func liveModels(cfg *settings, log zerolog.Logger, limit *llm.Limit) (*llm.Live, error) {
	models, err := llm.NewLive(func() (llm.Config, error) {
		c, err := llm.LoadConfig(cfg.actors.Home, os.Getenv)
		c.Log, c.Limit = log, limit
		return c, err
	})
	if err != nil {
		return nil, err
	}
	for _, w := range models.Config().Warnings {
		log.Warn().Msg(w)
	}
	log.Info().EmbedObject(models.Config()).Msg("model provider")
	return models, nil
}
