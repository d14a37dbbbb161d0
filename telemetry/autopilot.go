package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/routebalance/routebalance/routing/autopilot"
)

// autopilotMetrics are the series of the autopilot's controllers, one set
// per (cluster, target set); targets is autopilot.Targets.String().
type autopilotMetrics struct {
	windows  *prometheus.CounterVec // by met (true, false)
	attained *prometheus.GaugeVec
	weight   *prometheus.GaugeVec // by weight (quality, cost, latency)
	p95      *prometheus.GaugeVec // by quantity (e2e, ttft)
}

// AutopilotHooks registers the autopilot's series (once per Metrics) and
// returns the hooks that update them after every control step:
// routebalance_autopilot_windows_total{cluster,targets,met},
// routebalance_autopilot_last_window_met{cluster,targets} (1 or 0),
// routebalance_autopilot_weight{cluster,targets,weight} and
// routebalance_autopilot_window_p95_seconds{cluster,targets,quantity}.
// Attainment over a range is
// rate(windows_total{met="true"}) / rate(windows_total).
func (m *Metrics) AutopilotHooks() autopilot.Hooks {
	m.autopilotOnce.Do(func() { m.autopilot = m.newAutopilotMetrics() })
	am := m.autopilot
	return autopilot.Hooks{Step: func(cluster string, t autopilot.Targets, w autopilot.WindowStatus, d autopilot.DecisionStatus) {
		cl, tg := m.labels.cluster(cluster), t.String()
		if w.N > 0 {
			met := "false"
			x := 0.0
			if w.TargetMet {
				met, x = "true", 1
			}
			am.windows.WithLabelValues(cl, tg, met).Inc()
			am.attained.WithLabelValues(cl, tg).Set(x)
			if w.P95E2EMs >= 0 {
				am.p95.WithLabelValues(cl, tg, "e2e").Set(w.P95E2EMs / 1e3)
			}
			if w.P95TTFTMs >= 0 {
				am.p95.WithLabelValues(cl, tg, "ttft").Set(w.P95TTFTMs / 1e3)
			}
		}
		am.weight.WithLabelValues(cl, tg, "quality").Set(d.Weights.Quality)
		am.weight.WithLabelValues(cl, tg, "cost").Set(d.Weights.Cost)
		am.weight.WithLabelValues(cl, tg, "latency").Set(d.Weights.Latency)
	}}
}

func (m *Metrics) newAutopilotMetrics() *autopilotMetrics {
	lab := []string{"cluster", "targets"}
	am := &autopilotMetrics{
		windows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "autopilot_windows_total",
			Help: "Autopilot feedback windows with requests, by whether the p95 targets were met."}, append(lab, "met")),
		attained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "autopilot_last_window_met",
			Help: "1 when the autopilot's last window met its targets, 0 when it missed."}, lab),
		weight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "autopilot_weight",
			Help: "The weight the autopilot set, by weight (quality, cost, latency)."}, append(lab, "weight")),
		p95: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "autopilot_window_p95_seconds",
			Help: "The p95 of the autopilot's last window, by quantity (e2e, ttft)."}, append(lab, "quantity")),
	}
	m.reg.MustRegister(am.windows, am.attained, am.weight, am.p95)
	return am
}
