package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

func open(t *testing.T, e dbtest.Engine) *sqlstore.Store {
	if e.Pool != nil {
		s := sqlstore.NewPostgres(e.Pool)
		t.Cleanup(func() { s.Close() })
		return s
	}
	return sqlstore.NewSQLite(e.SQLite)
}

var t0 = time.Date(2026, 11, 30, 6, 0, 0, 123456000, time.UTC)

func account(t *testing.T, s *sqlstore.Store, n int) tenants.Tenant {
	t.Helper()
	tn := tenants.Tenant{ID: fmt.Sprintf("tenant-%d", n), Name: fmt.Sprintf("T%d", n), CreatedAt: t0, ConfigVersion: 1}
	u := tenants.User{ID: fmt.Sprintf("user-%d", n), TenantID: tn.ID, Email: fmt.Sprintf("u%d@example.com", n), PasswordHash: "$argon2id$x", CreatedAt: t0}
	if err := s.CreateAccount(context.Background(), tn, u, tenants.DefaultSettings()); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	return tn
}

func version(t *testing.T, s *sqlstore.Store, tenantID string) int64 {
	t.Helper()
	tn, err := s.Tenant(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	return tn.ConfigVersion
}

// TestStore is the behavioural suite; it runs on SQLite and Postgres.
func TestStore(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		s := open(t, e)
		a := account(t, s, 1)
		b := account(t, s, 2)

		t.Run("accounts", func(t *testing.T) {
			dup := tenants.User{ID: "user-x", TenantID: "tenant-x", Email: "u1@example.com", PasswordHash: "h", CreatedAt: t0}
			err := s.CreateAccount(ctx, tenants.Tenant{ID: "tenant-x", Name: "X", CreatedAt: t0}, dup, tenants.DefaultSettings())
			if !errors.Is(err, tenants.ErrConflict) {
				t.Fatalf("duplicate email: got %v, want ErrConflict", err)
			}
			if _, err := s.Tenant(ctx, "tenant-x"); !errors.Is(err, tenants.ErrNotFound) {
				t.Fatalf("failed signup left a tenant behind: %v", err)
			}
			u, err := s.UserByEmail(ctx, "u1@example.com")
			if err != nil {
				t.Fatal(err)
			}
			want := tenants.User{ID: "user-1", TenantID: a.ID, Email: "u1@example.com", PasswordHash: "$argon2id$x", CreatedAt: t0}
			if d := cmp.Diff(want, u); d != "" {
				t.Errorf("UserByEmail (-want +got):\n%s", d)
			}
			if _, err := s.UserByEmail(ctx, "nobody@example.com"); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("unknown email: got %v, want ErrNotFound", err)
			}
			st, err := s.Settings(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tenants.DefaultSettings(), st); d != "" {
				t.Errorf("default settings (-want +got):\n%s", d)
			}
		})

		ca := tenants.Cluster{ID: "cluster-a", TenantID: a.ID, Name: "prod", Policy: routing.PolicyConfig{Name: "chimera", Slack: 0.2, SwitchGain: 0.05}, CreatedAt: t0, UpdatedAt: t0}
		cb := tenants.Cluster{ID: "cluster-b", TenantID: b.ID, Name: "other", Policy: routing.PolicyConfig{Name: "routebalance"}, CreatedAt: t0.Add(time.Second), UpdatedAt: t0}

		t.Run("clusters", func(t *testing.T) {
			v0 := version(t, s, a.ID)
			for _, c := range []tenants.Cluster{ca, cb} {
				if err := s.CreateCluster(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			if v := version(t, s, a.ID); v <= v0 {
				t.Errorf("config_version after CreateCluster = %d, want > %d", v, v0)
			}
			got, err := s.Cluster(ctx, a.ID, ca.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(ca, got); d != "" {
				t.Errorf("Cluster (-want +got):\n%s", d)
			}
			list, err := s.Clusters(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]tenants.Cluster{ca}, list); d != "" {
				t.Errorf("Clusters of A (-want +got):\n%s", d)
			}
			ca2 := ca
			ca2.Name, ca2.UpdatedAt = "renamed", t0.Add(time.Minute)
			if err := s.UpdateCluster(ctx, ca2); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Cluster(ctx, a.ID, ca.ID); got.Name != "renamed" {
				t.Errorf("after UpdateCluster name = %q", got.Name)
			}
		})

		inA := tenants.Instance{ID: "inst-a", ClusterID: ca.ID, BaseURL: "http://10.0.0.1:8000", Model: "qwen-7b", GPU: "L4", TensorParallel: 1,
			PriceInPerMTok: 0.1, PriceOutPerMTok: 0.2, MaxConcurrency: 8, QualityPrior: 0.5, Kind: routing.KindChat, SealedAPIKey: []byte{1, 2, 3}, HasAPIKey: true, CreatedAt: t0, UpdatedAt: t0}

		t.Run("instances", func(t *testing.T) {
			if err := s.CreateInstance(ctx, a.ID, inA); err != nil {
				t.Fatal(err)
			}
			got, err := s.Instance(ctx, a.ID, ca.ID, inA.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(inA, got); d != "" {
				t.Errorf("Instance (-want +got):\n%s", d)
			}
			// B cannot put an instance into A's cluster.
			intruder := inA
			intruder.ID = "inst-b"
			if err := s.CreateInstance(ctx, b.ID, intruder); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("instance into another tenant's cluster: got %v, want ErrNotFound", err)
			}
			upd := inA
			upd.Disabled, upd.SealedAPIKey, upd.HasAPIKey, upd.UpdatedAt = true, nil, false, t0.Add(time.Hour)
			upd.Kind = routing.KindEmbedding // the kind is persisted
			v0 := version(t, s, a.ID)
			if err := s.UpdateInstance(ctx, a.ID, upd); err != nil {
				t.Fatal(err)
			}
			if v := version(t, s, a.ID); v <= v0 {
				t.Errorf("config_version after UpdateInstance = %d, want > %d", v, v0)
			}
			list, err := s.Instances(ctx, a.ID, ca.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]tenants.Instance{upd}, list); d != "" {
				t.Errorf("Instances (-want +got):\n%s", d)
			}
		})

		t.Run("cross-tenant ids are not found", func(t *testing.T) {
			checks := map[string]error{}
			_, checks["Cluster"] = s.Cluster(ctx, b.ID, ca.ID)
			_, checks["Instance"] = s.Instance(ctx, b.ID, ca.ID, inA.ID)
			_, checks["Instances"] = s.Instances(ctx, b.ID, ca.ID) // empty, not an error
			checks["UpdateCluster"] = s.UpdateCluster(ctx, tenants.Cluster{ID: ca.ID, TenantID: b.ID, Name: "pwned", UpdatedAt: t0})
			checks["UpdateInstance"] = s.UpdateInstance(ctx, b.ID, inA)
			checks["DeleteInstance"] = s.DeleteInstance(ctx, b.ID, ca.ID, inA.ID)
			checks["DeleteCluster"] = s.DeleteCluster(ctx, b.ID, ca.ID)
			for name, err := range checks {
				if name == "Instances" {
					if err != nil {
						t.Errorf("Instances: %v", err)
					}
					continue
				}
				if !errors.Is(err, tenants.ErrNotFound) {
					t.Errorf("%s with another tenant's id: got %v, want ErrNotFound", name, err)
				}
			}
			if list, _ := s.Instances(ctx, b.ID, ca.ID); len(list) != 0 {
				t.Errorf("Instances leaked %d rows across tenants", len(list))
			}
			if c, _ := s.Cluster(ctx, a.ID, ca.ID); c.Name != "renamed" {
				t.Errorf("A's cluster changed by B: %q", c.Name)
			}
		})

		w := routing.Weights{Quality: 0.6, Cost: 0.2, Latency: 0.2}
		ka := tenants.Key{ID: "key-a", TenantID: a.ID, Name: "ci", Prefix: "rb_abcdefgh", ClusterID: ca.ID, CreatedAt: t0}

		t.Run("keys", func(t *testing.T) {
			if err := s.CreateKey(ctx, ka, "hash-a"); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateKey(ctx, tenants.Key{ID: "key-dup", TenantID: b.ID, Name: "x", Prefix: "rb_x", CreatedAt: t0}, "hash-a"); !errors.Is(err, tenants.ErrConflict) {
				t.Errorf("duplicate hash: got %v, want ErrConflict", err)
			}
			got, err := s.KeyByHash(ctx, "hash-a")
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(ka, got); d != "" {
				t.Errorf("KeyByHash (-want +got):\n%s", d)
			}
			if _, err := s.Key(ctx, b.ID, ka.ID); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("Key across tenants: got %v", err)
			}
			if err := s.UpdateKey(ctx, tenants.Key{ID: ka.ID, TenantID: b.ID, Name: "pwned"}); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("UpdateKey across tenants: got %v", err)
			}
			upd := ka
			revoked := t0.Add(2 * time.Hour)
			upd.Preset, upd.Weights, upd.SLO, upd.RevokedAt = "custom", &w, &tenants.SLO{TTFTMs: 500}, &revoked
			if err := s.UpdateKey(ctx, upd); err != nil {
				t.Fatal(err)
			}
			used := t0.Add(3 * time.Hour)
			if err := s.TouchKeys(ctx, map[string]time.Time{ka.ID: used, "gone": used}); err != nil {
				t.Fatal(err)
			}
			// An older touch never moves last_used_at backwards.
			if err := s.TouchKeys(ctx, map[string]time.Time{ka.ID: t0}); err != nil {
				t.Fatal(err)
			}
			upd.LastUsedAt = &used
			list, err := s.Keys(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]tenants.Key{upd}, list); d != "" {
				t.Errorf("Keys (-want +got):\n%s", d)
			}
			if list, _ := s.Keys(ctx, b.ID); len(list) != 0 {
				t.Errorf("B sees %d of A's keys", len(list))
			}
		})

		t.Run("settings", func(t *testing.T) {
			st := tenants.Settings{DefaultClusterID: ca.ID, Preset: "custom", Weights: w, SLO: tenants.SLO{TTFTMs: 800, TPOTMs: 50, E2EMs: 20000, MaxCostUSDPerRequest: 0.01, MonthlyBudgetUSD: 100}}
			v0 := version(t, s, a.ID)
			if err := s.PutSettings(ctx, a.ID, st); err != nil {
				t.Fatal(err)
			}
			if v := version(t, s, a.ID); v <= v0 {
				t.Errorf("config_version after PutSettings = %d, want > %d", v, v0)
			}
			got, err := s.Settings(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(st, got); d != "" {
				t.Errorf("Settings (-want +got):\n%s", d)
			}
			if _, err := s.Settings(ctx, "no-such-tenant"); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("Settings of unknown tenant: %v", err)
			}
			if got, _ := s.Settings(ctx, b.ID); got.DefaultClusterID != "" {
				t.Errorf("B's settings changed: %+v", got)
			}
		})

		t.Run("delete cluster cascades", func(t *testing.T) {
			if err := s.DeleteCluster(ctx, a.ID, ca.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Instance(ctx, a.ID, ca.ID, inA.ID); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("instance survived its cluster: %v", err)
			}
			k, err := s.Key(ctx, a.ID, ka.ID)
			if err != nil {
				t.Fatal(err)
			}
			if k.ClusterID != "" {
				t.Errorf("key still bound to deleted cluster %q", k.ClusterID)
			}
			st, _ := s.Settings(ctx, a.ID)
			if st.DefaultClusterID != "" {
				t.Errorf("default cluster still %q", st.DefaultClusterID)
			}
			if err := s.DeleteCluster(ctx, a.ID, ca.ID); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("second delete: %v", err)
			}
			if _, err := s.Cluster(ctx, b.ID, cb.ID); err != nil {
				t.Errorf("B's cluster affected: %v", err)
			}
		})
	})
}

// TestWatchSeesOtherReplicas runs on Postgres: a change committed through
// one Store reaches another Store's Watch.
func TestWatchSeesOtherReplicas(t *testing.T) {
	pool := dbtest.Postgres(t)
	a, b := sqlstore.NewPostgres(pool), sqlstore.NewPostgres(pool)
	defer a.Close()
	defer b.Close()
	tn := account(t, a, 7)
	ctx, cancel := context.WithCancel(context.Background())
	changed := make(chan string, 16)
	ready := make(chan struct{}, 4)
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, func(id string) { changed <- id }, func() { ready <- struct{}{} }) }()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not start listening")
	}
	c := tenants.Cluster{ID: "cluster-w", TenantID: tn.ID, Name: "w", Policy: routing.PolicyConfig{Name: "routebalance"}, CreatedAt: t0, UpdatedAt: t0}
	if err := a.CreateCluster(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-changed:
		if id != tn.ID {
			t.Errorf("notified tenant %q, want %q", id, tn.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10 s of a committed change")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch returned %v", err)
	}
}
