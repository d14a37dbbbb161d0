package telemetry

import "github.com/prometheus/client_golang/prometheus"

// QdrantStats are the counters of the cluster quality indexes' Qdrant
// searches (routing/quality.QdrantStore.Stats), read at scrape time.
type QdrantStats struct {
	// State is the circuit breaker's: 0 closed, 1 open, 2 half-open.
	State int
	// Opens counts how often the breaker opened.
	Opens int64
	// Searches were answered by Qdrant; Errors failed or timed out.
	Searches, Errors int64
	// Fallbacks the in-process index answered: breaker open, failed call,
	// the cluster's points not (or no longer) in Qdrant.
	FallbackOpen, FallbackError, FallbackMissing int64
}

type qdrantDescs struct {
	state, opens, searches, errors, fallbacks *prometheus.Desc
}

func newQdrantDescs() qdrantDescs {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "qdrant", name), help, labels, nil)
	}
	return qdrantDescs{
		state:     d("breaker_state", "Circuit breaker of the cluster indexes' Qdrant searches: 0 closed, 1 open (the in-process index answers), 2 half-open (probing)."),
		opens:     d("breaker_opens_total", "Times the Qdrant circuit breaker opened."),
		searches:  d("searches_total", "Cluster-index neighbour searches answered by Qdrant."),
		errors:    d("errors_total", "Cluster-index neighbour searches in Qdrant that failed or timed out."),
		fallbacks: d("fallbacks_total", "Cluster-index neighbour searches answered by the in-process index instead of Qdrant, by reason (open, error, missing).", "reason"),
	}
}

// qdrantCollector reads Deps.Qdrant at scrape time.
type qdrantCollector struct{ m *Metrics }

func (c qdrantCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.m.qdrantDescs
	for _, x := range []*prometheus.Desc{d.state, d.opens, d.searches, d.errors, d.fallbacks} {
		ch <- x
	}
}

func (c qdrantCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.deps.Qdrant
	if f == nil {
		return
	}
	s := f()
	d := c.m.qdrantDescs
	cnt := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	ch <- prometheus.MustNewConstMetric(d.state, prometheus.GaugeValue, float64(s.State))
	cnt(d.opens, s.Opens)
	cnt(d.searches, s.Searches)
	cnt(d.errors, s.Errors)
	cnt(d.fallbacks, s.FallbackOpen, "open")
	cnt(d.fallbacks, s.FallbackError, "error")
	cnt(d.fallbacks, s.FallbackMissing, "missing")
}
