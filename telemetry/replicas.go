package telemetry

import "github.com/prometheus/client_golang/prometheus"

// ReplicaStats are the several-replica counters read at scrape time: the
// forwarding step's (api.Forwarder.Stats) and the owner leases'
// (owner.Leases.Stats). cmd fills it from both.
type ReplicaStats struct {
	// Forwarded, OwnerUnreachable, ForwardFailed: requests this replica
	// forwarded and the owner answered; routed here because the owner could
	// not be connected to; forwarded but not answered completely (502).
	Forwarded, OwnerUnreachable, ForwardFailed int64
	// ForwardReceived and ForwardRefused: requests forwarded here with a
	// valid header, and refused for an invalid one (403).
	ForwardReceived, ForwardRefused int64
	// Leases is true when the owner leases run (with Redis); the lease
	// series are absent otherwise.
	Leases bool
	// LeasesHeld, LeasesLost, LeaseRedisErrors: clusters owned now, leases
	// found lost at renewal, failed Redis calls of the leases.
	LeasesHeld                   int
	LeasesLost, LeaseRedisErrors int64
}

type replicaDescs struct {
	forwarded, unreachable, failed, received, refused, held, lost, redisErrors *prometheus.Desc
}

func newReplicaDescs() replicaDescs {
	d := func(sub, name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, sub, name), help, nil, nil)
	}
	return replicaDescs{
		forwarded:   d("forward", "forwarded_total", "Requests forwarded to their cluster's owner replica and answered by it."),
		unreachable: d("forward", "owner_unreachable_total", "Requests routed on this replica because their cluster's owner could not be connected to."),
		failed:      d("forward", "failed_total", "Forwarded requests the owner accepted but did not answer completely (502, not retried)."),
		received:    d("forward", "received_total", "Requests another replica forwarded here (valid X-RouteBalance-Forwarded)."),
		refused:     d("forward", "refused_total", "Requests refused for an invalid X-RouteBalance-Forwarded header (403)."),
		held:        d("owner", "leases_held", "Clusters this replica owns (schedules for every replica)."),
		lost:        d("owner", "leases_lost_total", "Owner leases found taken or gone at renewal."),
		redisErrors: d("owner", "redis_errors_total", "Failed Redis calls of the owner leases."),
	}
}

// replicaCollector reads Deps.Replicas at scrape time.
type replicaCollector struct{ m *Metrics }

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.m.replicaDescs
	for _, x := range []*prometheus.Desc{d.forwarded, d.unreachable, d.failed, d.received, d.refused, d.held, d.lost, d.redisErrors} {
		ch <- x
	}
}

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.deps.Replicas
	if f == nil {
		return
	}
	s := f()
	d := c.m.replicaDescs
	cnt := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	cnt(d.forwarded, s.Forwarded)
	cnt(d.unreachable, s.OwnerUnreachable)
	cnt(d.failed, s.ForwardFailed)
	cnt(d.received, s.ForwardReceived)
	cnt(d.refused, s.ForwardRefused)
	if !s.Leases {
		return
	}
	ch <- prometheus.MustNewConstMetric(d.held, prometheus.GaugeValue, float64(s.LeasesHeld))
	cnt(d.lost, s.LeasesLost)
	cnt(d.redisErrors, s.LeaseRedisErrors)
}
