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
	}
	for _, k := range []string{"post", "delete"} {
		m.forwarded.WithLabelValues(k)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.forwarded, m.attaches, m.hop, m.handovers, m.podsLost, m.refused, m.takeovers}
}
