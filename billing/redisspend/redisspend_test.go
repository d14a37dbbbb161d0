package redisspend

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/redistest"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

var now = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// recorder is an inner meter that keeps what it was given.
type recorder struct {
	mu  sync.Mutex
	evs []billing.UsageEvent
}

func (r *recorder) Record(ev billing.UsageEvent) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

type replica struct {
	c     *Counters
	guard *Guard
	meter *Meter
	rec   *recorder
}

func newReplicas(t *testing.T, n int, cfg Config) []replica {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	cfg.Prefix = prefix
	if cfg.Timeout == 0 {
		// Past the 250 ms default a call takes the fail mode: a loaded
		// machine must not turn a slow Redis into a budget that did not
		// hold.
		cfg.Timeout = 10 * time.Second
	}
	var out []replica
	for i := range n {
		var cl Client = rdb
		if i > 0 {
			cl = redistest.NewClient(t)
		}
		c, err := New(cfg, cl, fixedClock{now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		out = append(out, replica{c: c, guard: NewGuard(billing.NewGuard(fixedClock{now}, time.Hour), c), meter: NewMeter(rec, c, billing.DefaultPricing()), rec: rec})
	}
	return out
}

func TestBudgetSharedAcrossThreeReplicas(t *testing.T) {
	rs := newReplicas(t, 3, Config{})
	lim := billing.Limits{TenantID: "t1", KeyID: "k1", TenantMonthlyUSD: 1}
	admitted := 0
	for i := range 20 {
		r := rs[i%3]
		if err := r.guard.Check(lim); err != nil {
			var be *billing.BudgetError
			if !errors.As(err, &be) || be.Scope != billing.ScopeTenant {
				t.Fatalf("request %d: %v, want the tenant's budget error", i, err)
			}
			continue
		}
		admitted++
		r.meter.Record(billing.UsageEvent{RequestID: "r", TenantID: "t1", KeyID: "k1", CostUSD: 0.3, FinishedAt: now})
		if err := r.c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Spend 0, 0.3, 0.6, 0.9 are under $1: four pass, whatever replica
	// each lands on; one replica alone would let four through per replica.
	if admitted != 4 {
		t.Fatalf("%d requests admitted over three replicas with a $1 budget and $0.30 each, want 4", admitted)
	}
	tn, kn, err := rs[2].c.Spent(context.Background(), "t1", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if tn != 1_200_000_000 || kn != 1_200_000_000 {
		t.Fatalf("shared spend tenant %d key %d nano-USD, want 1.2e9 each", tn, kn)
	}
	if rs[0].rec.evs[0].Billed != 300_000_000 {
		t.Fatalf("inner meter got billed %v, want the priced 0.3", rs[0].rec.evs[0].Billed)
	}
}

func TestKeyBudget(t *testing.T) {
	rs := newReplicas(t, 2, Config{})
	rs[0].meter.Record(billing.UsageEvent{TenantID: "t1", KeyID: "k1", Billed: 500_000_000, FinishedAt: now})
	if err := rs[0].c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := rs[1].guard.Check(billing.Limits{TenantID: "t1", KeyID: "k1", KeyMonthlyUSD: 0.5, TenantMonthlyUSD: 10})
	var be *billing.BudgetError
	if !errors.As(err, &be) || be.Scope != billing.ScopeKey || be.SpentUSD != 0.5 {
		t.Fatalf("%v, want the key's budget spent at $0.5", err)
	}
	if err := rs[1].guard.Check(billing.Limits{TenantID: "t1", KeyID: "k2", KeyMonthlyUSD: 0.5, TenantMonthlyUSD: 10}); err != nil {
		t.Fatalf("another key of the tenant: %v", err)
	}
}

func TestReconcileRaisesNeverLowers(t *testing.T) {
	rs := newReplicas(t, 1, Config{})
	c := rs[0].c
	ctx := context.Background()
	c.Add(now, "t1", "k1", 5_000)
	c.Add(now, "t2", "", 100)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The ledger knows more of t1 (a replica's increment was lost while
	// Redis was down) and less of t2 (its last requests are not yet written).
	period := billing.PeriodStart(now)
	rows := []billing.PeriodSpend{{TenantID: "t1", KeyID: "k1", Billed: 4000}, {TenantID: "t1", KeyID: "k2", Billed: 3000}, {TenantID: "t2", Billed: 50}}
	if err := c.Reconcile(ctx, period, rows); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, key string
		t, k        int64
	}{{"t1", "k1", 7_000, 5_000}, {"t1", "k2", 7_000, 3_000}, {"t2", "", 100, 0}} {
		tn, kn, err := c.Spent(ctx, tc.tenant, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if tn != tc.t || kn != tc.k {
			t.Errorf("%s/%s: tenant %d key %d, want %d %d", tc.tenant, tc.key, tn, kn, tc.t, tc.k)
		}
	}
	// Another month's counters are separate.
	if err := c.Reconcile(ctx, period.AddDate(0, -1, 0), []billing.PeriodSpend{{TenantID: "t1", Billed: billing.NanoPerUSD}}); err != nil {
		t.Fatal(err)
	}
	if tn, _, _ := c.Spent(ctx, "t1", ""); tn != 7_000 {
		t.Fatalf("last month's reconcile changed this month: %d", tn)
	}
}

// ledgerRows is a Ledger with fixed totals.
type ledgerRows []billing.PeriodSpend

func (l ledgerRows) PeriodSpend(context.Context, time.Time) ([]billing.PeriodSpend, error) {
	return l, nil
}

func TestRunPushesAndReconcilesFirst(t *testing.T) {
	rs := newReplicas(t, 1, Config{Reconcile: time.Hour})
	c := rs[0].c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, ledgerRows{{TenantID: "t1", Billed: 2000}}) }()
	for i := 0; c.Stats().Reconciled == 0; i++ {
		if i > 500 {
			t.Fatal("Run did not reconcile at start within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Add(now, "t1", "", 500)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tn, _, err := c.Spent(context.Background(), "t1", "")
	if err != nil {
		t.Fatal(err)
	}
	// The reconcile ran first (2000), the push at shutdown added 500.
	if tn != 2_500 {
		t.Fatalf("spend %d nano-USD, want the ledger's 2000 + 500 pushed", tn)
	}
}

func deadCounters(t *testing.T, fail FailMode) *Counters {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(Config{Fail: fail}, rdb, fixedClock{now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRedisDownFailOpenUsesTheLocalView(t *testing.T) {
	c := deadCounters(t, FailOpen)
	inner := billing.NewGuard(fixedClock{now}, time.Hour)
	g := NewGuard(inner, c)
	if err := g.Check(billing.Limits{TenantID: "t1", TenantMonthlyUSD: 1}); err != nil {
		t.Fatalf("fail open: %v", err)
	}
	if c.Stats().ReadErrors != 1 {
		t.Fatalf("stats %+v, want one failed read", c.Stats())
	}
}

func TestRedisDownFailClosedRefuses(t *testing.T) {
	c := deadCounters(t, FailClosed)
	g := NewGuard(billing.NewGuard(fixedClock{now}, time.Hour), c)
	err := g.Check(billing.Limits{TenantID: "t1", TenantMonthlyUSD: 1})
	if !IsUnavailable(err) {
		t.Fatalf("fail closed: %v, want ErrUnavailable", err)
	}
	// A request without a budget never needs Redis.
	if err := g.Check(billing.Limits{TenantID: "t1"}); err != nil {
		t.Fatalf("no budget: %v", err)
	}
}

func TestToNano(t *testing.T) {
	for _, tc := range []struct {
		usd  float64
		want int64
	}{{0, 0}, {-1, 0}, {1, 1e9}, {0.3, 300_000_000}, {1.5e-9, 2}, {1e300, 1<<63 - 1}} {
		if got := ToNano(tc.usd); got != tc.want {
			t.Errorf("ToNano(%v) = %d, want %d", tc.usd, got, tc.want)
		}
	}
}
