package api

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/dispatch/dispatchtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
)

// scrape fetches url and parses the text exposition format.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series finds the metric of family name whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetricsEndpoint sends requests through the real scheduler (one
// instance refuses connections, so round-robin fails over) and checks the
// series /metrics exposes on the main listener.
func TestMetricsEndpoint(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 3})
	dead := vllmtest.RefusedURL(t)
	p := principal("t1", []tenants.Instance{inst("dead", dead, "m"), inst("live", up.URL, "m")})
	p.Cluster.Policy.Name = "round-robin"
	keys := &keyTable{keys: map[string]*tenants.Principal{testKey: p}}
	real := startRouter(t)
	meter := &meterLog{}
	labelKey := []byte("metrics-label-key-for-this-test!")
	tel, err := telemetry.New(telemetry.Config{LabelKey: labelKey}, telemetry.Deps{
		State: real.State,
		MeterStats: func() billing.MeterStats {
			n := int64(len(meter.events()))
			return billing.MeterStats{Recorded: n}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	counting := &dispatchtest.Router{Inner: tel.Router(real)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(Config{Inference: InferenceConfig{ClientCheckInterval: 20 * time.Millisecond}}, Deps{Log: log, Metrics: tel.Handler(), MetricsToken: "scrape-token",
		Inference: InferenceDeps{Keys: keys, Router: counting, Meter: tel.Meter(meter, billing.DefaultPricing())}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.App().Listener(ln) }()
	t.Cleanup(func() { _ = s.App().ShutdownWithTimeout(5 * time.Second) })
	e := &infEnv{url: "http://" + ln.Addr().String()}

	failovers := 0
	for i, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello there"}]}`, stream)
		resp, out := e.post(t, "/v1/chat/completions", testKey, body, nil)
		if resp.StatusCode != 200 || resp.Header.Get(hdrInstance) != "live" {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
		if resp.Header.Get(hdrFailedOver) != "" {
			failovers++
		}
	}
	if resp, _ := e.post(t, "/v1/chat/completions", testKey, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, nil); resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
	granted, _, _ := counting.Settled(t)
	testwait.Until(t, "two usage events", func() bool { return len(meter.events()) == 2 })
	evs := meter.events()

	if resp, err := http.Get(e.url + "/metrics"); err != nil || resp.StatusCode != 401 {
		t.Fatalf("/metrics without the bearer token: %v %v, want 401", resp.StatusCode, err)
	}
	fams := scrape(t, e.url+"/metrics", "scrape-token")
	// Tenant-typed strings are pseudonyms (telemetry.Label).
	cl := telemetry.Label(labelKey, "cluster", p.Cluster.ID)
	mm := telemetry.Label(labelKey, "model", "m")
	live, deadL := telemetry.Label(labelKey, "instance", "live"), telemetry.Label(labelKey, "instance", "dead")
	req := map[string]string{"cluster": cl, "model": mm, "instance": live, "policy": "round-robin", "status": "ok"}
	code200 := map[string]string{"code": "200"}
	for k, v := range req {
		code200[k] = v
	}
	var prompt, output, cost float64
	for _, ev := range evs {
		prompt += float64(ev.PromptTokens)
		output += float64(ev.OutputTokens)
		cost += ev.Cost.USD()
	}
	if output != 6 {
		t.Fatalf("usage events %+v", evs)
	}
	checks := []struct {
		name   string
		labels map[string]string
		value  func(*dto.Metric) float64
		want   float64
	}{
		{"routebalance_requests_total", code200, counter, 2},
		{"routebalance_request_duration_seconds", req, histCount, 2},
		{"routebalance_usage_tokens_total", map[string]string{"cluster": cl, "model": mm, "instance": live, "kind": "output"}, counter, output},
		{"routebalance_usage_tokens_total", map[string]string{"cluster": cl, "model": mm, "instance": live, "kind": "prompt"}, counter, prompt},
		{"routebalance_usage_cost_usd_total", map[string]string{"cluster": cl, "model": mm, "instance": live}, counter, cost},
		{"routebalance_billed_usd_total", map[string]string{"cluster": cl, "model": mm}, counter, cost}, // markup 1
		{"routebalance_decision_duration_seconds", map[string]string{"cluster": cl, "policy": "round-robin"}, histCount, float64(granted)},
		{"routebalance_decision_batch_size", map[string]string{"cluster": cl, "policy": "round-robin"}, histCount, float64(granted)},
		{"routebalance_route_rejections_total", map[string]string{"cluster": cl, "reason": "unknown_model"}, counter, 1},
		{"routebalance_instance_in_flight", map[string]string{"cluster": cl, "instance": live, "model": mm}, gauge, 0},
		{"routebalance_instance_queue_length", map[string]string{"cluster": cl, "instance": live, "model": mm}, gauge, 0},
		{"routebalance_instance_healthy", map[string]string{"cluster": cl, "instance": live, "model": mm}, gauge, 1},
		{"routebalance_billing_meter_recorded_total", nil, counter, 2},
		{"routebalance_time_to_first_token_seconds", map[string]string{"cluster": cl, "model": mm, "instance": live}, histCount, 2},
		// the scheduler predicts E2E and TTFT for every decision (latency
		// priors); only the streamed request observed a first token, so
		// only it is a TTFT calibration sample (the non-streamed one's
		// "TTFT" would be its E2E)
		{"routebalance_prediction_ratio", map[string]string{"cluster": cl, "model": mm, "quantity": "e2e"}, histCount, 2},
		{"routebalance_prediction_ratio", map[string]string{"cluster": cl, "model": mm, "quantity": "ttft"}, histCount, 1},
	}
	if failovers > 0 {
		checks = append(checks,
			struct {
				name   string
				labels map[string]string
				value  func(*dto.Metric) float64
				want   float64
			}{"routebalance_failovers_total", map[string]string{"cluster": cl}, counter, float64(failovers)},
			struct {
				name   string
				labels map[string]string
				value  func(*dto.Metric) float64
				want   float64
			}{"routebalance_upstream_errors_total", map[string]string{"cluster": cl, "instance": deadL}, counter, float64(failovers)})
	} else {
		t.Error("round-robin over [dead, live] sent no request to dead first")
	}
	for _, c := range checks {
		m := series(fams, c.name, c.labels)
		if m == nil {
			t.Errorf("no series %s%v", c.name, c.labels)
			continue
		}
		if got := c.value(m); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, name := range []string{"routebalance_instance_pending_tokens", "routebalance_instance_predicted_tpot_seconds",
		"routebalance_instance_scrape_age_seconds", "routebalance_instance_stale", "routebalance_queue_wait_seconds"} {
		if series(fams, name, map[string]string{"cluster": cl, "instance": live}) == nil {
			t.Errorf("no series %s for instance live", name)
		}
	}
	// Tenant ids and key ids never become labels.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "tenant" || lp.GetValue() == p.Tenant.ID || lp.GetValue() == p.Key.ID {
					t.Errorf("%s carries tenant identity in label %s=%q", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

func counter(m *dto.Metric) float64   { return m.GetCounter().GetValue() }
func gauge(m *dto.Metric) float64     { return m.GetGauge().GetValue() }
func histCount(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) }
