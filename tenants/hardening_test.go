package tenants_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/tenants"
)

// TestNoClusterReasonSaysSeveral: issue 16 "Also". A key of a tenant with
// several clusters, no binding and no default resolves without a cluster,
// and the reason says there are several and how to choose, not that there
// is none.
func TestNoClusterReasonSaysSeveral(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	svc, _ := newService(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, clk)
	tn, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "multi@example.com", Password: "analytical-engine-1", Name: "M"})
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := svc.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.ResolveKey(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cluster != nil || !strings.Contains(p.NoClusterReason(), "no cluster") {
		t.Errorf("no clusters: cluster %v, reason %q", p.Cluster, p.NoClusterReason())
	}
	for _, n := range []string{"a", "b"} {
		if _, err := svc.CreateCluster(ctx, tn.ID, tenants.ClusterInput{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if p, err = svc.ResolveKey(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r := p.NoClusterReason()
	if p.Cluster != nil || !strings.Contains(r, "2 clusters") || !strings.Contains(r, "default_cluster_id") || strings.Contains(r, "no cluster") {
		t.Errorf("two clusters, none chosen: cluster %v, reason %q", p.Cluster, r)
	}
}
