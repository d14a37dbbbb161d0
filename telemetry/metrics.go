// Package telemetry exposes RouteBalance's Prometheus metrics from a
// registry of its own (never the default one). It observes the inference
// path through two thin wrappers — Router around the scheduler and Meter
// around the billing meter — and reads live state (per-instance load, meter
// and outbox backlog) at scrape time with custom collectors, so it runs no
// goroutine. See README.md and docs/metrics.md for every series.
package telemetry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/schedule"
)

// Namespace prefixes every metric name.
const Namespace = "routebalance"

// Config holds the metric settings; zero fields take DefaultConfig's values.
type Config struct {
	// LatencyBuckets are the upper bounds, in seconds, of the request
	// duration and TTFT histograms.
	LatencyBuckets []float64
	// DecisionBuckets are the upper bounds, in seconds, of the scheduler's
	// decision-time histogram.
	DecisionBuckets []float64
	// RatioBuckets are the upper bounds of the observed/predicted ratio
	// histogram (1 = perfectly calibrated).
	RatioBuckets []float64
	// OutboxTimeout bounds the database query the outbox collector runs at
	// scrape time.
	OutboxTimeout time.Duration
	// OutboxLimit caps the outbox rows counted per scrape.
	OutboxLimit int
	// ProcessMetrics adds the Go runtime and process collectors.
	ProcessMetrics bool
	// LabelKey keys the pseudonyms that replace tenant-typed label values
	// (cluster and instance ids, model names; labels.go). Replicas that
	// share it label the same cluster alike; serve derives it from the
	// session secret. Empty means a random key per process.
	LabelKey []byte
	// MaxLabelValues caps the distinct values of each tenant-typed label
	// (cluster, instance, model); further values share "other".
	MaxLabelValues int
}

// DefaultConfig returns the default Config.
func DefaultConfig() Config {
	return Config{
		LatencyBuckets:  prometheus.ExponentialBuckets(0.025, 2, 13), // 25ms … 102s
		DecisionBuckets: prometheus.ExponentialBuckets(1e-5, 4, 10),  // 10µs … 2.6s
		RatioBuckets:    []float64{0.1, 0.25, 0.5, 0.67, 0.8, 0.9, 1, 1.11, 1.25, 1.5, 2, 4},
		OutboxTimeout:   2 * time.Second,
		OutboxLimit:     10000,
		ProcessMetrics:  true,
		MaxLabelValues:  1000,
	}
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	for _, b := range [][]float64{c.LatencyBuckets, c.DecisionBuckets, c.RatioBuckets} {
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				return errors.New("telemetry: histogram buckets must increase")
			}
		}
	}
	if c.OutboxTimeout < 0 || c.OutboxLimit < 0 || c.MaxLabelValues < 0 {
		return errors.New("telemetry: OutboxTimeout, OutboxLimit and MaxLabelValues must be >= 0")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if len(c.LatencyBuckets) == 0 {
		c.LatencyBuckets = d.LatencyBuckets
	}
	if len(c.DecisionBuckets) == 0 {
		c.DecisionBuckets = d.DecisionBuckets
	}
	if len(c.RatioBuckets) == 0 {
		c.RatioBuckets = d.RatioBuckets
	}
	if c.OutboxTimeout == 0 {
		c.OutboxTimeout = d.OutboxTimeout
	}
	if c.OutboxLimit == 0 {
		c.OutboxLimit = d.OutboxLimit
	}
	if c.MaxLabelValues == 0 {
		c.MaxLabelValues = d.MaxLabelValues
	}
	return c
}

// OutboxReader lists the Stripe outbox rows due for sending; the billing
// stores (pgstore, sqlitestore) implement it.
type OutboxReader interface {
	PendingOutbox(ctx context.Context, now time.Time, limit int) ([]billing.OutboxItem, error)
}

// Deps are the live sources read at scrape time; each may be nil (its
// series are then absent).
type Deps struct {
	// State returns the scheduler's live view of a cluster's instances
	// (schedule.Router.State).
	State func(clusterID string) []schedule.InstanceState
	// MeterStats returns the billing meter's counters (billing.Meter.Stats).
	MeterStats func() billing.MeterStats
	// Outbox reads the Stripe outbox backlog.
	Outbox OutboxReader
	// Replicas returns the forwarding and owner-lease counters of a
	// replica among several (replicas.go).
	Replicas func() ReplicaStats
	// Qdrant returns the cluster indexes' Qdrant counters (qdrant.go);
	// nil without Qdrant.
	Qdrant func() QdrantStats
	// Clock dates the outbox backlog (default the wall clock).
	Clock routing.Clock
	// Log reports collector failures (default slog.Default()).
	Log *slog.Logger
}

// Metrics owns the registry and every RouteBalance series.
type Metrics struct {
	cfg  Config
	deps Deps
	reg  *prometheus.Registry

	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	ttft          *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	costUSD       *prometheus.CounterVec
	billedUSD     *prometheus.CounterVec
	decision      *prometheus.HistogramVec
	batch         *prometheus.HistogramVec
	queueWait     *prometheus.HistogramVec
	rejections    *prometheus.CounterVec
	failovers     *prometheus.CounterVec
	upstreamErrs  *prometheus.CounterVec
	ratio         *prometheus.HistogramVec
	mu            sync.Mutex
	clusters      map[string]struct{} // clusters seen by Router, read by the state collector
	stateDescs    stateDescs
	billingDescs  billingDescs
	replicaDescs  replicaDescs
	qdrantDescs   qdrantDescs
	outboxFailure prometheus.Counter
	labels        *labeler
	autopilotOnce sync.Once
	autopilot     *autopilotMetrics // AutopilotHooks
}

// New builds the metrics and registers them on a fresh registry.
func New(cfg Config, deps Deps) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Clock == nil {
		deps.Clock = routing.WallClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	key := cfg.LabelKey
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("telemetry: label key: %w", err)
		}
	}
	m := &Metrics{cfg: cfg, deps: deps, reg: prometheus.NewRegistry(), clusters: map[string]struct{}{}, labels: newLabeler(key, cfg.MaxLabelValues)}
	req := []string{"cluster", "model", "instance", "policy", "status"}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "requests_total",
		Help: "Requests that reached an instance, by outcome status (ok, error, cancelled, budget) and HTTP code."},
		append(req, "code"))
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "request_duration_seconds",
		Help: "Client-side end-to-end latency of requests that reached an instance (arrival to last byte).", Buckets: cfg.LatencyBuckets}, req)
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "time_to_first_token_seconds",
		Help: "Client-side time to first token of requests that produced one.", Buckets: cfg.LatencyBuckets},
		[]string{"cluster", "model", "instance"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "usage_tokens_total",
		Help: "Tokens metered, by kind (prompt, output)."}, []string{"cluster", "model", "instance", "kind"})
	m.costUSD = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "usage_cost_usd_total",
		Help: "Instance cost at the registered prices, in USD."}, []string{"cluster", "model", "instance"})
	m.billedUSD = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "billed_usd_total",
		Help: "Amount billed to tenants under the operator's pricing, in USD."}, []string{"cluster", "model"})
	m.decision = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "decision_duration_seconds",
		Help:    "Scheduler compute time of the batch each admitted request was decided in (one observation per request).",
		Buckets: cfg.DecisionBuckets}, []string{"cluster", "policy"})
	m.batch = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "decision_batch_size",
		Help: "Size of the scheduling batch each admitted request was decided in.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)},
		[]string{"cluster", "policy"})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "queue_wait_seconds",
		Help: "Time an admitted request waited in its instance's admission queue.", Buckets: cfg.LatencyBuckets},
		[]string{"cluster", "instance"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "route_rejections_total",
		Help: "Requests the scheduler did not admit, by reason (unknown_model, model_disabled, no_healthy_instance, no_capacity, closed, cancelled, other)."},
		[]string{"cluster", "reason"})
	m.failovers = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "failovers_total",
		Help: "Routing retries after an instance could not be reached (requests sent to another instance)."}, []string{"cluster"})
	m.upstreamErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "upstream_errors_total",
		Help: "Requests that failed by the instance's fault (connection error, 5xx, broken stream)."}, []string{"cluster", "instance"})
	m.ratio = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "prediction_ratio",
		Help:    "Observed / predicted for successful, untruncated requests, by quantity (e2e, ttft); 1 means calibrated.",
		Buckets: cfg.RatioBuckets}, []string{"cluster", "model", "quantity"})
	m.outboxFailure = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "metrics_outbox_scrape_errors_total",
		Help: "Scrapes whose outbox backlog query failed."})
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttft, m.tokens, m.costUSD, m.billedUSD, m.decision,
		m.batch, m.queueWait, m.rejections, m.failovers, m.upstreamErrs, m.ratio, m.outboxFailure} {
		m.reg.MustRegister(c)
	}
	m.stateDescs = newStateDescs()
	m.reg.MustRegister(stateCollector{m})
	m.billingDescs = newBillingDescs()
	m.reg.MustRegister(billingCollector{m})
	m.replicaDescs = newReplicaDescs()
	m.reg.MustRegister(replicaCollector{m})
	m.qdrantDescs = newQdrantDescs()
	m.reg.MustRegister(qdrantCollector{m})
	if cfg.ProcessMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m, nil
}

// Registry returns the registry holding every series.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorLog: slogErrorLog{m.deps.Log}})
}

type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) {
	l.log.Error("metrics", slog.Any("error", v))
}

// trackCluster remembers a cluster for the state collector.
func (m *Metrics) trackCluster(id string) {
	m.mu.Lock()
	m.clusters[id] = struct{}{}
	m.mu.Unlock()
}

// clusterIDs returns the tracked clusters.
func (m *Metrics) clusterIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.clusters))
	for id := range m.clusters {
		out = append(out, id)
	}
	return out
}

// forgetCluster drops a cluster the scheduler no longer knows.
func (m *Metrics) forgetCluster(id string) {
	m.mu.Lock()
	delete(m.clusters, id)
	m.mu.Unlock()
}
