package llm

import (
	"context"
	"sync"
)

// Live is a Provider whose configuration can be re-read while the server
// runs, for ACP authenticate: the user sets a key, then authenticates, and
// Reload picks it up. Stream uses the provider current when it starts. Safe
// for concurrent use.
type Live struct {
	load func() (Config, error)

	mu  sync.RWMutex
	cfg Config
	p   Provider
}

// NewLive loads the configuration with load (typically a closure over
// LoadConfig(home, os.Getenv)) and builds its provider with New.
func NewLive(load func() (Config, error)) (*Live, error) {
	l := &Live{load: load}
	if _, err := l.Reload(); err != nil {
		return nil, err
	}
	return l, nil
}

// Config returns the current configuration.
func (l *Live) Config() Config {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cfg
}

// ContextWindowFor is Config().ContextWindowFor(model) without copying the
// configuration: a turn asks before every model call.
func (l *Live) ContextWindowFor(model string) int {
	l.mu.RLock()
	override, provider := l.cfg.ContextWindow, l.cfg.Provider
	l.mu.RUnlock()
	return contextWindowFor(override, provider, model)
}

// Reload re-reads the configuration and, when it loads and builds, makes it
// current. It returns the new configuration; on error the old one stays.
func (l *Live) Reload() (Config, error) {
	cfg, err := l.load()
	if err != nil {
		return Config{}, err
	}
	p, err := New(cfg)
	if err != nil {
		return Config{}, err
	}
	l.mu.Lock()
	l.cfg, l.p = cfg, p
	l.mu.Unlock()
	return cfg, nil
}

// Warm implements Warmer with the current provider: a session was opened
// and will likely call the model soon.
func (l *Live) Warm() {
	l.mu.RLock()
	p := l.p
	l.mu.RUnlock()
	warm(p)
}

// Stream implements Provider with the current provider.
func (l *Live) Stream(ctx context.Context, req *Request, emit func(Event)) error {
	l.mu.RLock()
	p := l.p
	l.mu.RUnlock()
	return p.Stream(ctx, req, emit)
}
