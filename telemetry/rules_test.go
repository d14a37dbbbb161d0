package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/schedule"
)

// populated returns Metrics with every series family observed at least
// once, so the registry can be gathered for all names.
func populated(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	outbox := outboxFunc(func(context.Context, time.Time, int) ([]billing.OutboxItem, error) {
		return []billing.OutboxItem{{Hour: time.Now().Add(-2 * time.Hour)}}, nil
	})
	m, err := New(DefaultConfig(), Deps{Log: quiet(), Outbox: outbox,
		State:      func(string) []schedule.InstanceState { return []schedule.InstanceState{{ID: "i", Model: "m"}} },
		MeterStats: func() billing.MeterStats { return billing.MeterStats{} },
		Replicas:   func() ReplicaStats { return ReplicaStats{Leases: true} },
		Qdrant:     func() QdrantStats { return QdrantStats{} }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeScheduler{d: routing.Decision{Instance: routing.Instance{ID: "i", Model: "m"}, PredictedE2E: time.Second, PredictedTTFT: time.Second}}
	r := m.Router(f)
	c := &routing.Cluster{ID: "c"}
	a, _ := r.Route(context.Background(), c, &routing.Request{Exclude: []string{"x"}})
	a.Release(routing.Outcome{E2E: time.Second, TTFT: time.Second})
	a, _ = r.Route(context.Background(), c, &routing.Request{})
	a.Release(routing.Outcome{Err: errors.New("x"), Upstream: true})
	f.err = routing.ErrNoCapacity
	_, _ = r.Route(context.Background(), c, &routing.Request{})
	m.Meter(nil, billing.DefaultPricing()).Record(billing.UsageEvent{ClusterID: "c", Model: "m", InstanceID: "i", Status: "ok", HTTPStatus: 200, TTFT: time.Second})
	m.AutopilotHooks().Step("c", autopilot.Targets{P95E2E: time.Second}, autopilot.WindowStatus{N: 1, P95E2EMs: 1, P95TTFTMs: 1, TargetMet: true}, autopilot.DecisionStatus{})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dto.MetricType{}
	for _, f := range fams {
		out[f.GetName()] = f.GetType()
	}
	return out
}

type outboxFunc func(context.Context, time.Time, int) ([]billing.OutboxItem, error)

func (f outboxFunc) PendingOutbox(ctx context.Context, now time.Time, limit int) ([]billing.OutboxItem, error) {
	return f(ctx, now, limit)
}

var metricName = regexp.MustCompile(`\broutebalance_[a-zA-Z0-9_]+`)

// checkNames fails for every routebalance_* name in exprs that the
// registry does not expose (histograms also as _bucket, _count, _sum).
func checkNames(t *testing.T, where string, exprs []string, known map[string]dto.MetricType) int {
	t.Helper()
	n := 0
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			n++
			if _, ok := known[name]; ok {
				continue
			}
			found := false
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				if base, ok := strings.CutSuffix(name, suf); ok && known[base] == dto.MetricType_HISTOGRAM {
					found = true
				}
			}
			if !found {
				t.Errorf("%s uses %s, which the registry does not expose", where, name)
			}
		}
	}
	return n
}

func TestDocumentedNamesExist(t *testing.T) {
	known := populated(t)
	for _, want := range []string{"routebalance_requests_total", "routebalance_instance_in_flight", "routebalance_billing_outbox_pending",
		"routebalance_billing_meter_backlog", "routebalance_prediction_ratio", "routebalance_failovers_total"} {
		if _, ok := known[want]; !ok {
			t.Fatalf("populated registry lacks %s: %v", want, known)
		}
	}

	// Prometheus rules: well-formed, with severity and summary.
	raw, err := os.ReadFile("../infra/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var exprs, alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v needs alert, expr, labels.severity and annotations.summary", r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs = append(exprs, r.Expr)
			alerts = append(alerts, r.Alert)
		}
	}
	sort.Strings(alerts)
	for _, want := range []string{"RouteBalanceHigh5xxRate", "RouteBalanceInstanceDown", "RouteBalanceOutboxBacklog", "RouteBalancePredictorDrift"} {
		if i := sort.SearchStrings(alerts, want); i == len(alerts) || alerts[i] != want {
			t.Errorf("alerts.yaml lacks %s", want)
		}
	}
	if n := checkNames(t, "alerts.yaml", exprs, known); n < len(exprs) {
		t.Errorf("only %d metric names in %d rules", n, len(exprs))
	}

	// Grafana: every panel target's expr and the template queries.
	raw, err = os.ReadFile("../infra/grafana/routebalance.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("routebalance.json: %v", err)
	}
	exprs = exprs[:0]
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(dash)
	if len(exprs) < 20 {
		t.Fatalf("only %d queries in the dashboard", len(exprs))
	}
	checkNames(t, "routebalance.json", exprs, known)

	// docs/metrics.md documents every family the code exposes.
	raw, err = os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range known {
		if strings.HasPrefix(name, Namespace+"_") && !strings.Contains(string(raw), "`"+name+"`") {
			t.Errorf("docs/metrics.md does not document %s", name)
		}
	}
	checkNames(t, "docs/metrics.md", []string{string(raw)}, known)
}
