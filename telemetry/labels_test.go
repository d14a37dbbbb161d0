package telemetry

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing/schedule"
)

// TestNoTenantStringsInLabels: issue 16 item 2. Cluster and instance ids
// and model names never appear in the exposition; they are replaced by
// keyed pseudonyms (the same for the same key, different for another
// key), and each kind holds at most MaxLabelValues distinct values.
func TestNoTenantStringsInLabels(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcessMetrics = false
	cfg.LabelKey = bytes.Repeat([]byte("k"), 32)
	cfg.MaxLabelValues = 3
	state := func(string) []schedule.InstanceState {
		return []schedule.InstanceState{{ID: "inst-secret-0", Model: "acme-private-model-v7", Healthy: true}}
	}
	m, err := New(cfg, Deps{State: state})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		ev := billing.UsageEvent{ClusterID: fmt.Sprintf("cluster-secret-%d", i), InstanceID: fmt.Sprintf("inst-secret-%d", i),
			Model: "acme-private-model-v7", Policy: "routebalance", Status: "ok", HTTPStatus: 200, E2E: time.Second, CostUSD: 0.5}
		m.ObserveUsage(ev, 0.75)
		m.trackCluster(ev.ClusterID)
	}
	m.ObserveUsage(billing.UsageEvent{ClusterID: "cluster-secret-0", Model: "acme-private-model-v7", Policy: "made-up\npolicy", Status: "weird", HTTPStatus: 99999}, 0)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, leak := range []string{"secret", "acme", "made-up", "weird", "99999"} {
		if strings.Contains(body, leak) {
			t.Errorf("exposition contains %q", leak)
		}
	}
	want := Label(cfg.LabelKey, "cluster", "cluster-secret-0")
	if !strings.Contains(body, `cluster="`+want+`"`) {
		t.Errorf("exposition lacks the pseudonym %s of cluster-secret-0:\n%.2000s", want, body)
	}
	if Label([]byte("another key, another pseudonym!!"), "cluster", "cluster-secret-0") == want {
		t.Error("the pseudonym does not depend on the key")
	}
	// 10 clusters, at most 3 distinct pseudonyms plus "other".
	clusters := map[string]bool{}
	for _, mt := range family(t, m, "routebalance_requests_total") {
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == "cluster" {
				clusters[lp.GetValue()] = true
			}
		}
	}
	if len(clusters) > 4 || !clusters[LabelOther] {
		t.Errorf("cluster label values %v: want at most 3 pseudonyms and %q", clusters, LabelOther)
	}
}
