package httpsse

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Route labels of the request histogram.
const (
	routePost    = "post_acp"
	routeGet     = "get_acp"
	routeDelete  = "delete_acp"
	routeHealth  = "health"
	routeReady   = "ready"
	routeMetrics = "metrics"
	routeOther   = "other"
)

// metrics is the edge's Prometheus registry: the actor tree's live counters
// as gauges plus the transport's own counters and request latencies.
type metrics struct {
	reg *prometheus.Registry
	// eventsSent is added to once per written batch: an atomic integer,
	// read at scrape time, costs less there than a Prometheus float
	// counter (a compare-and-swap loop on float bits).
	eventsSent atomic.Uint64
	// websockets counts the open WebSocket connections (also in streams).
	websockets atomic.Int64
	dropped    prometheus.Counter
	reconnects prometheus.Counter
	closed     *prometheus.CounterVec
	abandoned  prometheus.Counter
	detached   prometheus.Counter
	movedIn    prometheus.Counter
	requests   *prometheus.HistogramVec
	handler    fasthttp.RequestHandler
}

func newMetrics(e *Edge) *metrics {
	reg := prometheus.NewRegistry()
	am := e.srv.Metrics()
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("iaccode_connections", "Open ACP connections (connection actors), all transports.",
		func() float64 { return float64(am.Connections.Load()) })
	gauge("iaccode_sessions", "Live sessions (session actors).",
		func() float64 { return float64(am.Sessions.Load()) })
	gauge("iaccode_running_turns", "Prompt turns running now.",
		func() float64 { return float64(am.RunningTurns.Load()) })
	gauge("iaccode_running_tools", "Tool invocations running now.",
		func() float64 { return float64(am.RunningTools.Load()) })
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iaccode_frames_out_total", Help: "JSON-RPC messages emitted by connection actors.",
	}, func() float64 { return float64(am.FramesOut.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iaccode_turns_paused_total", Help: "Running turns paused at a step boundary for another pod to resume (drain).",
	}, func() float64 { return float64(am.TurnsPaused.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iaccode_turns_resumed_total",
		Help: "Running turns another process left recorded, resumed here: handed over by a draining pod, found orphaned (pod dead, lease lapsed), or found by a load.",
	}, func() float64 { return float64(am.TurnsResumed.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iaccode_turns_interrupted_total",
		Help: "Turns recorded interrupted: their process stopped while they ran and no pod could resume them (file store).",
	}, func() float64 { return float64(am.TurnsInterrupted.Load()) }))
	gauge("iaccode_http_connections", "ACP connections of the HTTP transport.",
		func() float64 { return float64(len(e.snapshot())) })
	gauge("iaccode_http_streams", "Open event streams: SSE streams and WebSockets.",
		func() float64 { return float64(e.streams.Load()) })
	gauge("iaccode_http_buffered_events", "Events buffered for the streams (unsent and replay window).",
		func() float64 {
			n := 0
			for _, c := range e.snapshot() {
				n += c.buffered()
			}
			return float64(n)
		})
	m := &metrics{
		reg: reg,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_http_events_dropped_total", Help: "Frames emitted after their connection was closed.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_http_stream_reconnects_total", Help: "GETs that resumed (Last-Event-ID) or replaced a stream.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_http_abandoned_total",
			Help: "Connections whose running turns were cancelled because their stream was gone longer than the replay window.",
		}),
		detached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_http_detached_total",
			Help: "WebSocket connections whose socket ended while their turns ran, the turns going on detached.",
		}),
		movedIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_http_connections_moved_in_total",
			Help: "HTTP connections handed over to this pod by a draining pod (those it handed over count as closed, reason moved).",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iaccode_http_connections_closed_total", Help: "Closed HTTP connections by reason.",
		}, []string{"reason"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "iaccode_http_request_duration_seconds",
			Help:    "Time to answer a request (for GET /acp: until the stream starts).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "code"}),
	}
	gauge("iaccode_http_websockets", "Open WebSocket connections (counted in iaccode_http_streams too).",
		func() float64 { return float64(m.websockets.Load()) })
	for _, r := range []string{reasonDelete, reasonIdle, reasonOverflow, reasonShutdown, reasonInitTimeout, reasonUnused, reasonWebSocket, reasonMoved} {
		m.closed.WithLabelValues(r)
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iaccode_http_events_sent_total", Help: "Events written to streams (SSE events, replays included, and WebSocket messages).",
	}, func() float64 { return float64(m.eventsSent.Load()) }))
	reg.MustRegister(m.dropped, m.reconnects, m.closed, m.abandoned, m.detached, m.movedIn, m.requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if e.cluster != nil {
		reg.MustRegister(e.cluster.Collectors()...)
	}
	reg.MustRegister(e.cfg.Collectors...)
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return m
}

// sent reports the SSE events written so far.
func (m *metrics) sent() uint64 { return m.eventsSent.Load() }

func (m *metrics) serve(ctx *fasthttp.RequestCtx) { m.handler(ctx) }

func (m *metrics) observe(route string, ctx *fasthttp.RequestCtx, start time.Time) {
	m.requests.WithLabelValues(route, strconv.Itoa(ctx.Response.StatusCode())).Observe(time.Since(start).Seconds())
}
