package telemetry

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

type stateDescs struct {
	healthy, disabled, stale, inFlight, maxConc, queue, running, waiting, kv, pending, tpot, scrapeAge *prometheus.Desc
}

func newStateDescs() stateDescs {
	l := []string{"cluster", "instance", "model"}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "instance", name), help, l, nil)
	}
	return stateDescs{
		healthy:   d("healthy", "1 when the instance passes health checks, 0 when it is ejected or down."),
		disabled:  d("disabled", "1 when the tenant disabled the instance."),
		stale:     d("stale", "1 when the instance's last metrics scrape is too old to trust."),
		inFlight:  d("in_flight", "Requests the router has admitted on the instance and not yet released."),
		maxConc:   d("max_concurrency", "The instance's admission cap."),
		queue:     d("queue_length", "Requests waiting in the router's admission queue for the instance."),
		running:   d("running", "Sequences the instance reports decoding (vLLM num_requests_running)."),
		waiting:   d("waiting", "Requests the instance reports queued (vLLM num_requests_waiting)."),
		kv:        d("kv_cache_usage_ratio", "KV-cache use in [0,1] reported by the instance."),
		pending:   d("pending_tokens", "Predicted decode tokens still to generate by the requests on the instance."),
		tpot:      d("predicted_tpot_seconds", "The latency model's current time-per-output-token estimate (TPOT̂) for the instance."),
		scrapeAge: d("scrape_age_seconds", "Seconds since the instance's metrics were last scraped."),
	}
}

// stateCollector reads the scheduler's live view of every tracked cluster
// at scrape time.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.m.stateDescs
	for _, x := range []*prometheus.Desc{d.healthy, d.disabled, d.stale, d.inFlight, d.maxConc, d.queue, d.running, d.waiting, d.kv, d.pending, d.tpot, d.scrapeAge} {
		ch <- x
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.deps.State == nil {
		return
	}
	d := c.m.stateDescs
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	// Clusters, instances or models past the label bound share "other":
	// emit the first series of each label set only, so the exposition
	// stays valid (a collector must not repeat a series).
	emitted := map[[3]string]bool{}
	for _, cl := range c.m.clusterIDs() {
		st := c.m.deps.State(cl)
		if st == nil {
			c.m.forgetCluster(cl) // the scheduler dropped it (idle or gone)
			continue
		}
		for _, s := range st {
			key := [3]string{c.m.labels.cluster(cl), c.m.labels.instance(s.ID), c.m.labels.model(s.Model)}
			if emitted[key] {
				continue
			}
			emitted[key] = true
			lv := key[:]
			g := func(desc *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
			}
			g(d.healthy, b(s.Healthy))
			g(d.disabled, b(s.Disabled))
			g(d.stale, b(s.Stale))
			g(d.inFlight, float64(s.InFlight))
			g(d.maxConc, float64(s.MaxConcurrency))
			g(d.queue, float64(s.Queue))
			g(d.running, s.Running)
			g(d.waiting, s.Waiting)
			g(d.kv, s.KVUsage)
			g(d.pending, s.PendingTokens)
			g(d.tpot, s.TPOTMs/1000)
			g(d.scrapeAge, s.ScrapeAgeMs/1000)
		}
	}
}

type billingDescs struct {
	recorded, written, dups, spilled, replayed, lost, backlog, outboxPending, outboxOldest *prometheus.Desc
}

func newBillingDescs() billingDescs {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "billing", name), help, nil, nil)
	}
	return billingDescs{
		recorded:      d("meter_recorded_total", "Usage events handed to the meter."),
		written:       d("meter_written_total", "Usage rows the ledger inserted."),
		dups:          d("meter_duplicates_total", "Usage events skipped because their request id was already stored."),
		spilled:       d("meter_spilled_total", "Usage events appended to the spill file because the queue was full (database slow or down)."),
		replayed:      d("meter_replayed_total", "Usage events read back from spill files."),
		lost:          d("meter_lost_total", "Usage events that could not even be spilled (disk error)."),
		backlog:       d("meter_backlog", "Usage events recorded by this process and not yet in the ledger (queued or spilled): recorded − written − duplicates − lost, floored at 0."),
		outboxPending: d("outbox_pending", "Stripe outbox rows due for sending (capped at the collector's limit)."),
		outboxOldest:  d("outbox_oldest_pending_age_seconds", "Age of the oldest due outbox row's usage hour; 0 when none is due."),
	}
}

// billingCollector reads the meter's counters and the outbox backlog at
// scrape time.
type billingCollector struct{ m *Metrics }

func (c billingCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.m.billingDescs
	for _, x := range []*prometheus.Desc{d.recorded, d.written, d.dups, d.spilled, d.replayed, d.lost, d.backlog, d.outboxPending, d.outboxOldest} {
		ch <- x
	}
}

func (c billingCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.m.billingDescs
	if f := c.m.deps.MeterStats; f != nil {
		s := f()
		cnt := func(desc *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
		}
		cnt(d.recorded, s.Recorded)
		cnt(d.written, s.Written)
		cnt(d.dups, s.Duplicates)
		cnt(d.spilled, s.Spilled)
		cnt(d.replayed, s.Replayed)
		cnt(d.lost, s.Lost)
		ch <- prometheus.MustNewConstMetric(d.backlog, prometheus.GaugeValue, float64(max(s.Recorded-s.Written-s.Duplicates-s.Lost, 0)))
	}
	if c.m.deps.Outbox != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.m.cfg.OutboxTimeout)
		defer cancel()
		now := c.m.deps.Clock.Now()
		items, err := c.m.deps.Outbox.PendingOutbox(ctx, now, c.m.cfg.OutboxLimit)
		if err != nil {
			c.m.outboxFailure.Inc()
			c.m.deps.Log.Warn("metrics: outbox backlog", slog.String("error", err.Error()))
			return
		}
		oldest := 0.0
		for _, it := range items {
			if age := now.Sub(it.Hour).Seconds(); age > oldest {
				oldest = age
			}
		}
		ch <- prometheus.MustNewConstMetric(d.outboxPending, prometheus.GaugeValue, float64(len(items)))
		ch <- prometheus.MustNewConstMetric(d.outboxOldest, prometheus.GaugeValue, oldest)
	}
}
