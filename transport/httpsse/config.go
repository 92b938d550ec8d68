package httpsse

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iac-code/iac-code/transport/auth"
)

// Defaults of Config. They follow the specification (port 8765, 30 s
// initialize, 4 MiB bodies) and the issues (10,000 buffered events, 15 s
// keep-alive, 10 min idle reaping, 60 s for a connection that never used
// its initialize, 10 s shutdown).
const (
	DefaultHost              = "127.0.0.1"
	DefaultPort              = 8765
	DefaultReplayBuffer      = 10_000
	DefaultReplayMaxAge      = 15 * time.Second
	DefaultMaxBufferBytes    = 64 << 20
	DefaultIdleTimeout       = 10 * time.Minute
	DefaultUnusedTimeout     = 60 * time.Second
	DefaultMaxUnused         = 10_000
	DefaultKeepAlive         = 15 * time.Second
	DefaultInitializeTimeout = 30 * time.Second
	DefaultMaxBodySize       = 4 << 20
	DefaultMaxStreams        = 20_000
	DefaultMaxSessionStreams = 1024
	DefaultCloseTimeout      = 5 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultWSPingInterval    = 10 * time.Second
	DefaultDetachedTurnMax   = 30 * time.Minute
	// RetryMillis is the SSE retry field sent with every event.
	RetryMillis = 5000
)

// Config configures the HTTP+SSE edge. Zero fields take the defaults above.
type Config struct {
	// Cluster, in cluster mode, is the mesh of pods this edge forwards
	// requests and streams through (transport/cluster); nil: one process.
	Cluster Cluster
	// Host and Port are the listen address of Serve (default host
	// 127.0.0.1; Port 0 takes a free port, which Serve logs; the command's
	// --port flag defaults to DefaultPort).
	Host string
	Port int
	// Token, when set, is required on every route as "Authorization:
	// Bearer <token>" (IACCODE_ACP_HTTP_TOKEN), principal "default". It is
	// never logged. Ignored when Auth is set (which then holds it).
	Token string
	// Collectors are more metrics exported on /metrics (the model's token
	// counts, waits for the shared model limit).
	Collectors []prometheus.Collector
	// Auth, when set, decides the principal of every request from its
	// Authorization header (transport/auth); nil: Token, or no
	// authentication (every request is principal "default").
	Auth auth.Authenticator
	// MaxConnectionsPerUser caps the open ACP connections of one principal
	// (0: no cap); an initialize beyond it gets 429 with Retry-After.
	MaxConnectionsPerUser int
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
	// replay window (a Last-Event-ID before them gets the stale error). A
	// connection whose stream has been gone (and which sent nothing) for
	// longer has its running turns cancelled: nobody can receive them.
	ReplayMaxAge time.Duration
	// IdleTimeout reaps a connection that has had no open stream and no
	// request for that long. Its sessions stay on disk.
	IdleTimeout time.Duration
	// UnusedTimeout reaps sooner a connection that never attached a stream
	// and sent nothing after its initialize (a flood of initializes).
	UnusedTimeout time.Duration
	// MaxUnused caps such connections: past it the oldest is closed at once,
	// so memory stays bounded whatever the rate of initializes.
	MaxUnused int
	// KeepAlive is the interval of the ": ping" comment on every stream.
	KeepAlive time.Duration
	// InitializeTimeout bounds the synchronous initialize POST (then 504).
	InitializeTimeout time.Duration
	// MaxBodySize is the largest accepted POST body (then 413).
	MaxBodySize int
	// MaxStreams caps open event streams (then 503). The listener serves
	// MaxStreams + StreamHeadroom TCP connections, so streams can never take
	// the connections POSTs need.
	MaxStreams     int
	StreamHeadroom int
	// MaxConnections caps the TCP connections served at once; more are
	// answered 503 and closed at once. Default: MaxStreams + StreamHeadroom,
	// lowered to fit the process's descriptor limit with a quarter (at
	// least 128) left for session files, tools and the model's connections;
	// MaxStreams and StreamHeadroom shrink to fit it.
	MaxConnections int
	// MaxSessionStreams caps the session-scoped stream slots of one connection.
	MaxSessionStreams int
	// CloseTimeout bounds DELETE and reaping: running turns are cancelled and
	// their prompts answered within it.
	CloseTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Serve, after the
	// drain.
	ShutdownTimeout time.Duration
	// DrainTimeout bounds the drain that precedes it (IAC_CODE_DRAIN_TIMEOUT,
	// see Edge.Drain).
	DrainTimeout time.Duration
	// WSPingInterval is how often a WebSocket is pinged
	// (IAC_CODE_WS_PING_INTERVAL); a peer that sends nothing, not even a
	// pong, for 2.5 intervals (25 s by default) is taken for dead and its
	// connection closed.
	WSPingInterval time.Duration
	// DetachedTurnMax is how long the running turns of a connection whose
	// client went away (no stream or socket, no request) keep running
	// before they are cancelled (IAC_CODE_DETACHED_TURN_MAX; see
	// detach.go). Negative (the variable set to 0): cancelled as before,
	// once nobody could replay their events (SSE: after ReplayMaxAge; a
	// WebSocket: at once).
	DetachedTurnMax time.Duration
}

// wsDeadAfter is how long a WebSocket may stay silent (see WSPingInterval).
func (c Config) wsDeadAfter() time.Duration { return c.WSPingInterval * 5 / 2 }

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = DefaultHost
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
	if c.UnusedTimeout <= 0 {
		c.UnusedTimeout = DefaultUnusedTimeout
	}
	if c.MaxUnused <= 0 {
		c.MaxUnused = DefaultMaxUnused
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
	if c.MaxConnections <= 0 {
		c.MaxConnections = min(c.MaxStreams+c.StreamHeadroom, connectionBudget())
	}
	if c.MaxStreams+c.StreamHeadroom > c.MaxConnections {
		c.StreamHeadroom = max(c.MaxConnections/5, 1)
		c.MaxStreams = max(c.MaxConnections-c.StreamHeadroom, 1)
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
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.WSPingInterval <= 0 {
		c.WSPingInterval = DefaultWSPingInterval
	}
	if c.DetachedTurnMax == 0 {
		c.DetachedTurnMax = DefaultDetachedTurnMax
	}
	return c
}

// connectionBudget is how many TCP connections fit the descriptor limit
// (RLIMIT_NOFILE, soft, which Go raises to the hard limit at start) with a
// quarter, at least 128, left for everything else.
func connectionBudget() int {
	limit := fileLimit()
	if limit <= 0 || limit > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(limit)-max(128, int(limit)/4), 16)
}
