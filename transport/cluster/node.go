// Package cluster joins iac-code pods that share a PostgreSQL store into
// one service behind a plain load balancer. Pods talk over protoactor
// remote (gRPC; protobuf messages of clusterpb), authenticated by the
// cluster secret.
//
// A connection stays on the pod that answered its initialize; its id names
// that pod's incarnation. Any other pod forwards the connection's POSTs and
// DELETEs there, and serves its GETs with a local writer fed from the
// owner's outbox (httpsse.Cluster). A session lives on one pod at a time,
// decided by its store lease; a load elsewhere asks the holder to hand it
// over (actors.Handover). Pods watch each other: a pod that dies is noticed
// within milliseconds, checked (its port refuses connections, or another
// incarnation answers there) and marked dead in the store, so its
// connections answer "Connection not found" and its sessions can be taken
// at once.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/actors"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// serviceName is the name of each pod's service actor: the target of
// forwarded requests, stream attaches, handovers and pings.
const serviceName = "iaccode-cluster"

// Timeouts of the requests between pods.
const (
	forwardTimeout  = 10 * time.Second // > httpsse.DefaultCloseTimeout: a DELETE waits for the turns' answers
	attachTimeout   = 5 * time.Second
	takeTimeout     = 10 * time.Second
	handoverTimeout = 8 * time.Second
	handOffTimeout  = 6 * time.Second
	pingTimeout     = time.Second
	dialTimeout     = 300 * time.Millisecond
	slowAnswer      = 100 * time.Millisecond
	// DefaultRefresh is how often a pod reads the pods table.
	DefaultRefresh = 2 * time.Second
)

// Config configures a pod of the cluster.
type Config struct {
	// Listen is the gRPC listen address, HOST:PORT (port 0: a free one).
	Listen string
	// Advertise is the HOST:PORT other pods reach this one at (Kubernetes:
	// the pod IP); default the bound address, which must then not be a
	// wildcard (0.0.0.0, ::).
	Advertise string
	// Secret is the cluster secret (IAC_CODE_CLUSTER_SECRET): pods without
	// it are refused.
	Secret string
	Log    zerolog.Logger
	// Refresh is how often the pods table is read (DefaultRefresh).
	Refresh time.Duration
	// Turns pauses and adopts running turns (*actors.Server); nil: a
	// drain hands nothing over and no orphaned turn is adopted here.
	Turns Turns
	// RecoveryScan is the mean period of the scan for orphaned turns
	// (DefaultRecoveryScan).
	RecoveryScan time.Duration
}

// Node is this pod's member of the cluster. It implements httpsse.Cluster
// and actors.Handover.
type Node struct {
	sys     *actor.ActorSystem
	rem     *remote.Remote
	srv     *actors.Server
	st      *store.PGStore
	log     zerolog.Logger
	self    string
	addr    string
	service *actor.PID
	peers   *peers
	met     *metrics
	owner   ownerRef
	// moved: where connections moved (move.go); moveNext spreads moves.
	moved    movedCache
	moveNext atomic.Uint64
	quit     chan struct{}
	done     chan struct{}
	// turns moves running turns (Config.Turns); draining: Drain began,
	// this pod adopts nothing more; kick wakes the recovery scan;
	// recovered closes when it stopped.
	turns     Turns
	draining  atomic.Bool
	kick      chan struct{}
	recovered chan struct{}
}

var (
	_ httpsse.Cluster = (*Node)(nil)
	_ actors.Handover = (*Node)(nil)
)

// Start makes this process a pod: it serves remote on cfg.Listen, records
// its incarnation and address in the store, and watches the other pods.
// The actor system must not have spawned anything yet.
func Start(srv *actors.Server, st *store.PGStore, cfg Config) (*Node, error) {
	if cfg.Secret == "" {
		return nil, errors.New("cluster mode needs the cluster secret: set IAC_CODE_CLUSTER_SECRET (the same on every pod)")
	}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster listen address %q: want HOST:PORT", cfg.Listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("cluster listen address %q: invalid port", cfg.Listen)
	}
	if cfg.Advertise == "" && (host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()) {
		return nil, fmt.Errorf("cluster listen address %q is a wildcard: set --advertise / IAC_CODE_CLUSTER_ADVERTISE to the HOST:PORT other pods reach this one at (Kubernetes: the pod IP)", cfg.Listen)
	}
	if cfg.Advertise != "" {
		if _, _, err := net.SplitHostPort(cfg.Advertise); err != nil {
			return nil, fmt.Errorf("cluster advertise address %q: want HOST:PORT", cfg.Advertise)
		}
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.RecoveryScan <= 0 {
		cfg.RecoveryScan = DefaultRecoveryScan
	}
	log := cfg.Log.With().Str("component", "cluster").Logger()
	if len(cfg.Secret) < 16 {
		log.Warn().Int("length", len(cfg.Secret)).Msg("cluster: IAC_CODE_CLUSTER_SECRET is short; use at least 32 random bytes")
	}
	n := &Node{sys: srv.System(), srv: srv, st: st, log: log, self: st.Incarnation(),
		quit: make(chan struct{}), done: make(chan struct{}),
		turns: cfg.Turns, kick: make(chan struct{}, 1), recovered: make(chan struct{})}
	n.met = newMetrics(st)
	a := newAuth(cfg.Secret, log, func() { n.met.refused.Inc() })
	rc := remote.Configure(host, port, remote.WithServerOptions(a.serverOptions()...),
		remote.WithDialOptions(a.dialOptions()...), remote.WithAdvertisedHost(cfg.Advertise))
	// A pod that cannot be reached is reported after one attempt (the
	// library waits 2 s after each): the probe decides whether it is dead.
	rc.MaxRetryCount = 1
	n.rem = remote.NewRemote(n.sys, rc)
	if err := startRemote(n.rem); err != nil {
		return nil, fmt.Errorf("cluster listen address %q: %w", cfg.Listen, err)
	}
	n.addr = n.sys.Address()
	n.peers = newPeers(n)
	n.service, err = n.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newService(n) }), serviceName)
	if err != nil {
		n.rem.Shutdown(false)
		return nil, fmt.Errorf("cluster service actor: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Register(ctx, n.addr); err != nil {
		n.rem.Shutdown(false)
		return nil, fmt.Errorf("cluster: register this pod: %w", err)
	}
	n.refresh()
	go n.refreshLoop(cfg.Refresh)
	go n.recoverLoop(cfg.RecoveryScan)
	srv.SetHandover(n)
	log.Info().Str("addr", n.addr).Str("incarnation", n.self).Msg("cluster: pod started")
	return n, nil
}

// startRemote starts the gRPC server; the library panics when it cannot
// listen.
func startRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.Start()
	return nil
}

// Incarnation implements httpsse.Cluster.
func (n *Node) Incarnation() string { return n.self }

// Addr is the address other pods reach this one at.
func (n *Node) Addr() string { return n.addr }

// Bind implements httpsse.Cluster.
func (n *Node) Bind(o httpsse.Owner) { n.owner.set(o) }

// Collectors implements httpsse.Cluster.
func (n *Node) Collectors() []prometheus.Collector { return n.met.collectors() }

// Stop leaves the cluster, after the edge has drained its connections and
// the store has released this pod's leases: the other pods' streams of
// this pod's connections end, the pods watching it see it go.
func (n *Node) Stop() {
	// The other pods take the last events of the streams of this pod's
	// connections (the prompts the shutdown cancelled) before it goes.
	deadline := time.Now().Add(2 * time.Second)
	for o := n.owner.get(); o != nil && o.RemoteStreams() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(n.quit)
	<-n.done
	<-n.recovered
	_ = n.sys.Root.StopFuture(n.service).Wait()
	n.rem.Shutdown(false)
}

func (n *Node) refreshLoop(every time.Duration) {
	defer close(n.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.quit:
			return
		case <-t.C:
			n.refresh()
		}
	}
}

// refresh reads the pods table: new pods are watched, pods declared dead
// by others are forgotten, unreachable ones are checked again.
func (n *Node) refresh() {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error().Interface("panic", p).Msg("cluster: refresh crashed")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	incs, err := n.st.Incarnations(ctx)
	if err != nil {
		n.log.Warn().Err(err).Msg("cluster: cannot read the pods table")
		return
	}
	n.peers.refresh(incs)
}
