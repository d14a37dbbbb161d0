package tenants_test

import (
	"context"
	"strings"
	"sync"
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

type recordObserver struct {
	mu      sync.Mutex
	tenants []string
}

func (o *recordObserver) TenantChanged(id string) {
	o.mu.Lock()
	o.tenants = append(o.tenants, id)
	o.mu.Unlock()
}
func (o *recordObserver) AllChanged() { o.TenantChanged("*") }

// TestObserveAndRoutingClusters: issue 16 item 3. Deleting an instance or
// a cluster tells the observers (the scheduler's syncer) at once, and
// RoutingClusters then reports the tenant's clusters without it, with the
// new version.
func TestObserveAndRoutingClusters(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
		svc, _ := newService(t, e, clk)
		obs := &recordObserver{}
		svc.Observe(obs)
		tn, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "obs@example.com", Password: "analytical-engine-1", Name: "O"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := svc.CreateCluster(ctx, tn.ID, tenants.ClusterInput{Name: "c"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range []string{"m1", "m2"} {
			in, err := svc.CreateInstance(ctx, tn.ID, c.ID, tenants.InstanceInput{BaseURL: ptr("http://127.0.0.1:9"), Model: ptr(m), APIKey: ptr("sk-" + m)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, in.ID)
		}
		rcs, err := svc.RoutingClusters(ctx, tn.ID)
		if err != nil || len(rcs) != 1 || len(rcs[0].Instances) != 2 || rcs[0].Instances[1].APIKey.Reveal() != "sk-m2" {
			t.Fatalf("RoutingClusters = %+v, %v", rcs, err)
		}
		v1 := rcs[0].Version
		obs.mu.Lock()
		obs.tenants = nil
		obs.mu.Unlock()
		if err := svc.DeleteInstance(ctx, tn.ID, c.ID, ids[1]); err != nil {
			t.Fatal(err)
		}
		rcs, err = svc.RoutingClusters(ctx, tn.ID)
		if err != nil || len(rcs) != 1 || len(rcs[0].Instances) != 1 || rcs[0].Version <= v1 {
			t.Fatalf("after instance delete: %+v, %v (version was %d)", rcs, err, v1)
		}
		if err := svc.DeleteCluster(ctx, tn.ID, c.ID); err != nil {
			t.Fatal(err)
		}
		if rcs, err = svc.RoutingClusters(ctx, tn.ID); err != nil || len(rcs) != 0 {
			t.Fatalf("after cluster delete: %+v, %v", rcs, err)
		}
		svc.InvalidateTenant("other") // another replica's change
		obs.mu.Lock()
		got := obs.tenants
		obs.mu.Unlock()
		want := []string{tn.ID, tn.ID, "other"}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("observer saw %v, want %v", got, want)
		}
		if rcs, err := svc.RoutingClusters(ctx, "no-such-tenant"); err != nil || len(rcs) != 0 {
			t.Errorf("unknown tenant: %v, %v", rcs, err)
		}
	})
}
