package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iac-code/iac-code/store"
)

// metrics are the pod's cluster counters, exported on the edge's /metrics.
type metrics struct {
	forwarded *prometheus.CounterVec
	attaches  prometheus.Counter
	hop       *prometheus.HistogramVec
	handovers prometheus.Counter
	podsLost  prometheus.Counter
	refused   prometheus.Counter
	takeovers prometheus.Collector
	// Durable turns (issue 29): handed over by this pod's drain, and how
	// long drains took (the turns resumed here are the actors' count,
	// exported with the edge's metrics).
	handedOver prometheus.Counter
	drain      prometheus.Histogram
}

func newMetrics(st *store.PGStore) *metrics {
	m := &metrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iaccode_cluster_forwarded_total",
			Help: "Requests forwarded to the pod holding their connection, by kind (post, delete).",
		}, []string{"kind"}),
		attaches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_cluster_remote_stream_attaches_total",
			Help: "GET streams served here for a connection of another pod.",
		}),
		hop: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "iaccode_cluster_hop_seconds",
			Help:    "Round trip of a request to another pod, by kind (post, delete, attach, take, handover).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5},
		}, []string{"kind"}),
		handovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_cluster_handovers_total",
			Help: "Sessions another pod handed over to this one for a load or resume.",
		}),
		podsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_cluster_pods_lost_total",
			Help: "Pods this one found dead (and declared so in the store).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_cluster_refused_total",
			Help: "Pod-to-pod calls refused for lack of the cluster secret.",
		}),
		takeovers: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "iaccode_cluster_lease_takeovers_total",
			Help: "Session leases this pod took from an expired or dead holder.",
		}, func() float64 { return float64(st.Takeovers()) }),
		handedOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iaccode_turns_handed_over_total",
			Help: "Running turns this pod paused at SIGTERM and another pod adopted.",
		}),
		drain: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "iaccode_drain_seconds",
			Help:    "Time from SIGTERM to the last turn handed over (pausing the turns and the hand-overs).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
		}),
	}
	for _, k := range []string{"post", "delete"} {
		m.forwarded.WithLabelValues(k)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.forwarded, m.attaches, m.hop, m.handovers, m.podsLost, m.refused, m.takeovers,
		m.handedOver, m.drain}
}
