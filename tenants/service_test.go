package tenants_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func newService(t testing.TB, e dbtest.Engine, clk *clock) (*tenants.Service, *sqlstore.Store) {
	t.Helper()
	var st *sqlstore.Store
	if e.Pool != nil {
		st = sqlstore.NewPostgres(e.Pool)
	} else {
		st = sqlstore.NewSQLite(e.SQLite)
	}
	sess, err := tenants.NewSessions(tenants.DefaultSessionConfig([]byte(strings.Repeat("s", 32))), clk)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := tenants.NewSealer([]byte(strings.Repeat("e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := tenants.DefaultConfig()
	cfg.Password.MemoryKiB, cfg.Password.Time = 8*1024, 1
	cfg.AllowPrivateEndpoints = true
	svc, err := tenants.NewService(cfg, tenants.Deps{Store: st, Sessions: sess, Sealer: sealer, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func ptr[T any](v T) *T { return &v }

// TestServiceResolveKey covers accounts, key resolution, its cache and the
// principal's version on both engines.
func TestServiceResolveKey(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
		svc, st := newService(t, e, clk)

		tn, pair, err := svc.Signup(ctx, tenants.SignupInput{Email: " Ada@Example.com", Password: "analytical-engine-1", Name: "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "ada@example.com", Password: "analytical-engine-2", Name: "Ada"}); !errors.Is(err, tenants.ErrConflict) {
			t.Errorf("duplicate signup: %v", err)
		}
		if _, err := svc.Login(ctx, "ada@example.com", "analytical-engine-1"); err != nil {
			t.Errorf("login: %v", err)
		}
		_, errWrong := svc.Login(ctx, "ada@example.com", "wrong-password-1")
		_, errUnknown := svc.Login(ctx, "bob@example.com", "wrong-password-1")
		if !errors.Is(errWrong, tenants.ErrUnauthorized) || errWrong.Error() != errUnknown.Error() {
			t.Errorf("wrong password %q vs unknown email %q: want the same unauthorized error", errWrong, errUnknown)
		}
		if _, err := svc.Refresh(ctx, pair.RefreshToken); err != nil {
			t.Errorf("refresh: %v", err)
		}

		key, secret, err := svc.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "ci"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.ResolveKey(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if p.Cluster != nil || p.Key.ID != key.ID || p.Tenant.ID != tn.ID {
			t.Errorf("principal before any cluster: %+v", p)
		}
		if _, ok := p.RoutingCluster(); ok {
			t.Error("RoutingCluster ok without a cluster")
		}

		c, err := svc.CreateCluster(ctx, tn.ID, tenants.ClusterInput{Name: "prod"})
		if err != nil {
			t.Fatal(err)
		}
		in, err := svc.CreateInstance(ctx, tn.ID, c.ID, tenants.InstanceInput{BaseURL: ptr("http://127.0.0.1:9"), Model: ptr("qwen"), GPU: ptr("L4"), APIKey: ptr("sk-up")})
		if err != nil {
			t.Fatal(err)
		}
		if in.QualityPrior != 0.5 || in.TensorParallel != 1 || !in.HasAPIKey {
			t.Errorf("instance defaults: %+v", in)
		}
		p2, err := svc.ResolveKey(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if p2.Version <= p.Version {
			t.Errorf("version did not grow after adding a cluster and instance: %d → %d", p.Version, p2.Version)
		}
		rc, ok := p2.RoutingCluster()
		if !ok || rc.ID != c.ID || len(rc.Instances) != 1 || rc.Instances[0].APIKey.Reveal() != "sk-up" || rc.Version != p2.Version {
			t.Fatalf("routing cluster = %+v", rc)
		}
		if p3, _ := svc.ResolveKey(ctx, secret); p3 != p2 {
			t.Error("second resolve did not come from the cache")
		}

		if _, err := svc.UpdateInstance(ctx, tn.ID, c.ID, in.ID, tenants.InstanceInput{Disabled: ptr(true)}); err != nil {
			t.Fatal(err)
		}
		p4, _ := svc.ResolveKey(ctx, secret)
		if p4.Version <= p2.Version || !p4.Instances[0].Disabled {
			t.Errorf("instance update not visible at once: version %d → %d, disabled=%v", p2.Version, p4.Version, p4.Instances[0].Disabled)
		}

		if _, err := svc.PutSettings(ctx, tn.ID, tenants.SettingsInput{Preset: "cost"}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.UpdateKey(ctx, tn.ID, key.ID, tenants.KeyPatch{Preset: ptr("quality"), SLO: &tenants.SLO{TTFTMs: 300}}); err != nil {
			t.Fatal(err)
		}
		p5, _ := svc.ResolveKey(ctx, secret)
		wq, _ := routing.PresetWeights("quality")
		if p5.Settings.Preset != "quality" || p5.Settings.Weights != wq || p5.Settings.SLO.TTFTMs != 300 {
			t.Errorf("key overrides not applied: %+v", p5.Settings)
		}

		// Usage is batched: nothing is written until the flush.
		ks, _ := st.Keys(ctx, tn.ID)
		if ks[0].LastUsedAt != nil {
			t.Errorf("last_used_at written before the flush: %v", ks[0].LastUsedAt)
		}
		if err := svc.FlushKeyUsage(ctx); err != nil {
			t.Fatal(err)
		}
		ks, _ = st.Keys(ctx, tn.ID)
		if ks[0].LastUsedAt == nil || !ks[0].LastUsedAt.Equal(clk.t) {
			t.Errorf("last_used_at = %v, want %v", ks[0].LastUsedAt, clk.t)
		}

		if err := svc.RevokeKey(ctx, tn.ID, key.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ResolveKey(ctx, secret); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("revoked key still resolves: %v", err)
		}
		for _, bad := range []string{"", "rb_short", strings.Replace(secret, "rb_", "sk_", 1)} {
			if _, err := svc.ResolveKey(ctx, bad); !errors.Is(err, tenants.ErrUnauthorized) {
				t.Errorf("ResolveKey(%q) = %v", bad, err)
			}
		}
		other, _, _ := tenants.NewKeySecret()
		if _, err := svc.ResolveKey(ctx, other); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("unknown key resolves: %v", err)
		}

		// Cache TTL bounds staleness of changes made elsewhere.
		k2, s2, _ := svc.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "two", ClusterID: c.ID})
		if _, err := svc.ResolveKey(ctx, s2); err != nil {
			t.Fatal(err)
		}
		now := clk.t
		k2.RevokedAt = &now
		if err := st.UpdateKey(ctx, k2); err != nil { // behind the service's back
			t.Fatal(err)
		}
		clk.t = clk.t.Add(tenants.DefaultConfig().KeyCacheTTL + time.Second)
		if _, err := svc.ResolveKey(ctx, s2); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("key revoked elsewhere still resolves after the TTL: %v", err)
		}
	})
}

// TestRevokeRacesResolve hammers ResolveKey while the key is revoked: once
// RevokeKey has returned, no call may succeed, cached or not.
func TestRevokeRacesResolve(t *testing.T) {
	e := dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}
	ctx := context.Background()
	svc, _ := newService(t, e, &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)})
	tn, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "r@example.com", Password: "race-condition-1", Name: "R"})
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := svc.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	var revoked atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				after := revoked.Load()
				_, err := svc.ResolveKey(ctx, secret)
				if after && err == nil {
					errs <- "resolved after RevokeKey returned"
					return
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	if err := svc.RevokeKey(ctx, tn.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	revoked.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if _, err := svc.ResolveKey(ctx, secret); !errors.Is(err, tenants.ErrUnauthorized) {
		t.Errorf("after revoke: %v", err)
	}
}

func TestLoginThrottle(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	svc, _ := newService(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, clk)
	if _, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "l@example.com", Password: "right-password-1", Name: "L"}); err != nil {
		t.Fatal(err)
	}
	max := tenants.DefaultConfig().LoginMaxFailures
	for i := 0; i < max; i++ {
		if _, err := svc.Login(ctx, "l@example.com", "wrong-password-1"); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if _, err := svc.Login(ctx, "L@example.com", "right-password-1"); !errors.Is(err, tenants.ErrTooManyAttempts) {
		t.Fatalf("right password after %d failures: %v, want ErrTooManyAttempts", max, err)
	}
	// Unknown emails are throttled the same way (no account enumeration).
	for i := 0; i < max; i++ {
		svc.Login(ctx, "ghost@example.com", "wrong-password-1") //nolint:errcheck
	}
	if _, err := svc.Login(ctx, "ghost@example.com", "wrong-password-1"); !errors.Is(err, tenants.ErrTooManyAttempts) {
		t.Errorf("unknown email not throttled: %v", err)
	}
	clk.t = clk.t.Add(tenants.DefaultConfig().LoginWindow)
	if _, err := svc.Login(ctx, "l@example.com", "right-password-1"); err != nil {
		t.Fatalf("login after the window: %v", err)
	}
	// A success resets the count.
	for i := 0; i < max-1; i++ {
		svc.Login(ctx, "l@example.com", "wrong-password-1") //nolint:errcheck
	}
	if _, err := svc.Login(ctx, "l@example.com", "right-password-1"); err != nil {
		t.Fatalf("login before the limit: %v", err)
	}
	if _, err := svc.Login(ctx, "l@example.com", "wrong-password-1"); !errors.Is(err, tenants.ErrUnauthorized) {
		t.Errorf("count not reset by a success: %v", err)
	}
}

// TestRevokeReachesOtherReplica runs two Services on one Postgres schema,
// the second watching for changes: a key revoked through the first stops
// resolving on the second without waiting for its cache TTL.
func TestRevokeReachesOtherReplica(t *testing.T) {
	pool := dbtest.Postgres(t)
	e := dbtest.Engine{Name: "postgres", Pool: pool}
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	one, _ := newService(t, e, clk)
	two, st2 := newService(t, e, clk)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{}, 4)
	go st2.Watch(wctx, two.InvalidateTenant, func() { two.InvalidateAll(); ready <- struct{}{} }) //nolint:errcheck
	<-ready

	tn, _, err := one.Signup(ctx, tenants.SignupInput{Email: "rep@example.com", Password: "replica-pass-1", Name: "R"})
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := one.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.ResolveKey(ctx, secret); err != nil { // now cached on two
		t.Fatal(err)
	}
	if err := one.RevokeKey(ctx, tn.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	// The clock is frozen, so the TTL cannot expire: only the notification
	// can make two refuse the key. Poll (bounded) for its arrival.
	deadline := time.Now().Add(testwait.Bound)
	for {
		if _, err := two.ResolveKey(ctx, secret); errors.Is(err, tenants.ErrUnauthorized) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica two still resolves the revoked key %v after the revoke", testwait.Bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
