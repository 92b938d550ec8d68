package acpserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// envModelConcurrency caps the concurrent model requests per provider key
// of every process on the store.
const envModelConcurrency = "IAC_CODE_MODEL_CONCURRENCY"

// limitMetrics are the waits of the shared model limit, on /metrics.
type limitMetrics struct {
	waits  *prometheus.HistogramVec
	pauses prometheus.Counter
}

func newLimitMetrics() *limitMetrics {
	return &limitMetrics{
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "iaccode_model_wait_seconds",
			Help:    "Time model requests waited for the shared model limit (IAC_CODE_MODEL_CONCURRENCY), by reason: busy or paused (a provider's 429).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"reason"}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "iaccode_model_pauses_total",
			Help: "Pauses of a provider key for every pod after a 429 with Retry-After."}),
	}
}

func (m *limitMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.waits, m.pauses}
}

// modelLimit is the shared model limit of IAC_CODE_MODEL_CONCURRENCY (nil
// when unset): through the shared store's queue, or one process's.
func modelLimit(n int, sessions store.Backend, met *limitMetrics) *llm.Limit {
	if n <= 0 {
		return nil
	}
	var gate llm.Gate
	if pg, ok := sessions.(*store.PGStore); ok {
		gate = pg.ModelGate(n)
	} else {
		gate = llm.NewLocalGate(n)
	}
	return &llm.Limit{Gate: gate,
		Waited: func(d time.Duration, paused bool) {
			reason := "busy"
			if paused {
				reason = "paused"
			}
			met.waits.WithLabelValues(reason).Observe(d.Seconds())
		},
		Paused: func(time.Duration) { met.pauses.Inc() }}
}
