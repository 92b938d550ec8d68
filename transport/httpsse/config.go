package httpsse

import "time"

// Defaults of Config. They follow the specification (port 8765, 30 s
// initialize, 4 MiB bodies) and the issue (10,000 buffered events, 15 s
// keep-alive, 10 min idle reaping, 10 s shutdown).
const (
	DefaultHost              = "127.0.0.1"
	DefaultPort              = 8765
	DefaultReplayBuffer      = 10_000
	DefaultReplayMaxAge      = 15 * time.Second
	DefaultMaxBufferBytes    = 64 << 20
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultKeepAlive         = 15 * time.Second
	DefaultInitializeTimeout = 30 * time.Second
	DefaultMaxBodySize       = 4 << 20
	DefaultMaxStreams        = 20_000
	DefaultMaxSessionStreams = 1024
	DefaultCloseTimeout      = 5 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
	// RetryMillis is the SSE retry field sent with every event.
	RetryMillis = 5000
)

// Config configures the HTTP+SSE edge. Zero fields take the defaults above.
type Config struct {
	// Host and Port are the listen address of Serve (default 127.0.0.1:8765).
	Host string
	Port int
	// Token, when set, is required on every route as "Authorization:
	// Bearer <token>" (IACCODE_ACP_HTTP_TOKEN). It is never logged.
	Token string
	// AllowedHosts are Host names accepted besides loopback ones ("*": any);
	// AllowedOrigins are the browser origins (scheme://host[:port], "*":
	// any) allowed to send requests. See edgeGuard.
	AllowedHosts   []string
	AllowedOrigins []string
	// ReplayBuffer caps the events a connection keeps, over all its streams:
	// events not yet written to a client plus already written ones kept for
	// Last-Event-ID replay. Unwritten events past the cap close the
	// connection (the client is not reading).
	ReplayBuffer int
	// MaxBufferBytes caps the same buffer in bytes.
	MaxBufferBytes int
	// ReplayMaxAge drops already written events older than this from the
	// replay window (a Last-Event-ID before them gets the stale error).
	ReplayMaxAge time.Duration
	// IdleTimeout reaps a connection that has had no open stream and no
	// request for that long. Its sessions stay on disk.
	IdleTimeout time.Duration
	// KeepAlive is the interval of the ": ping" comment on every stream.
	KeepAlive time.Duration
	// InitializeTimeout bounds the synchronous initialize POST (then 504).
	InitializeTimeout time.Duration
	// MaxBodySize is the largest accepted POST body (then 413).
	MaxBodySize int
	// MaxStreams caps open event streams (then 503). The listener accepts
	// MaxStreams + StreamHeadroom TCP connections, so streams can never take
	// the connections POSTs need.
	MaxStreams     int
	StreamHeadroom int
	// MaxSessionStreams caps the session-scoped stream slots of one connection.
	MaxSessionStreams int
	// CloseTimeout bounds DELETE and reaping: running turns are cancelled and
	// their prompts answered within it.
	CloseTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Serve.
	ShutdownTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.ReplayBuffer <= 0 {
		c.ReplayBuffer = DefaultReplayBuffer
	}
	if c.MaxBufferBytes <= 0 {
		c.MaxBufferBytes = DefaultMaxBufferBytes
	}
	if c.ReplayMaxAge <= 0 {
		c.ReplayMaxAge = DefaultReplayMaxAge
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.InitializeTimeout <= 0 {
		c.InitializeTimeout = DefaultInitializeTimeout
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.StreamHeadroom <= 0 {
		c.StreamHeadroom = 4096
	}
	if c.MaxSessionStreams <= 0 {
		c.MaxSessionStreams = DefaultMaxSessionStreams
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	return c
}
