package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/internal/redistest"
	"github.com/routebalance/routebalance/tenants/limits"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// replicas returns n limiters on one Redis prefix, each with its own
// connection pool (n replicas), sharing clk.
func replicas(t *testing.T, n int, cfg Config, clk *fakeClock) []*Limiter {
	t.Helper()
	c, prefix := redistest.Client(t)
	cfg.Prefix = prefix
	if cfg.Timeout == 0 {
		// Past the 250 ms default a call fails open: a loaded machine
		// must not turn a slow Redis into a limit that did not hold.
		cfg.Timeout = 10 * time.Second
	}
	var out []*Limiter
	for i := range n {
		var rdb Client = c
		if i > 0 {
			rdb = redistest.NewClient(t)
		}
		cfg.Replica = fmt.Sprintf("r%d", i)
		l, err := New(cfg, rdb, clk, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func TestRPMIsSharedAcrossReplicas(t *testing.T) {
	clk := newClock()
	ls := replicas(t, 2, Config{}, clk)
	kl := limits.Limits{RPM: 20}
	passed := 0
	for i := range 80 {
		tk, _, r, ok := ls[i%2].Admit("t1", limits.Limits{}, "k1", kl, 0)
		if ok {
			passed++
			tk.Release()
			continue
		}
		if r.Kind != limits.KindRequests || r.Scope != limits.ScopeKey || r.Limit != 20 || r.Unavailable {
			t.Fatalf("refusal %+v, want the key's requests limit", r)
		}
	}
	if passed != 20 {
		t.Fatalf("%d of 80 requests passed over two replicas with rpm 20, want 20", passed)
	}
	clk.add(3 * time.Second) // one request's worth refills (60 s / 20)
	if _, _, _, ok := ls[1].Admit("t1", limits.Limits{}, "k1", kl, 0); !ok {
		t.Fatal("refused after one request's worth refilled")
	}
	if _, _, r, ok := ls[0].Admit("t1", limits.Limits{}, "k1", kl, 0); ok || r.RetryAfter != 3*time.Second {
		t.Fatalf("ok=%v retry %v, want refused with retry 3s", ok, r.RetryAfter)
	}
	for _, l := range ls {
		if s := l.Stats(); s.Fallbacks != 0 || s.RefusedDown != 0 {
			t.Fatalf("stats %+v: Redis was up", s)
		}
	}
}

func TestTokensCorrectedAfterTheFact(t *testing.T) {
	clk := newClock()
	ls := replicas(t, 2, Config{}, clk)
	tl := limits.Limits{TPM: 1000}
	tk, st, _, ok := ls[0].Admit("t1", tl, "k1", limits.Limits{}, 800)
	if !ok {
		t.Fatal("first request refused")
	}
	want := limits.Status{HasTokens: true, LimitTokens: 1000, RemainingTokens: 200, ResetTokens: 48 * time.Second}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if _, _, r, ok := ls[1].Admit("t1", tl, "k2", limits.Limits{}, 800); ok || r.Kind != limits.KindTokens || r.Scope != limits.ScopeTenant {
		t.Fatalf("ok=%v %+v, want the tenant's token limit", ok, r)
	}
	tk.Observe(100) // it used 100 of the 800 charged
	tk.Release()
	tk.Release() // idempotent
	if _, st, _, ok := ls[1].Admit("t1", tl, "k2", limits.Limits{}, 800); !ok || st.RemainingTokens != 100 {
		t.Fatalf("ok=%v remaining %d after the refund, want admitted with 100 left", ok, st.RemainingTokens)
	}
	// A request that used more than charged puts the bucket in debt.
	tk, _, _, _ = ls[0].Admit("t1", tl, "k1", limits.Limits{}, 0)
	tk.Observe(600)
	tk.Release()
	if _, _, r, ok := ls[0].Admit("t1", tl, "k1", limits.Limits{}, 1); ok || r.RetryAfter != 30*time.Second+60*time.Millisecond {
		t.Fatalf("ok=%v retry %v in debt of 500, want refused for 30.06s", ok, r.RetryAfter)
	}
	if _, _, r, ok := ls[0].Admit("t1", tl, "k1", limits.Limits{}, 1001); ok || !r.TooLarge {
		t.Fatalf("ok=%v %+v, want too large", ok, r)
	}
}

func TestConcurrencyLeasesAcrossReplicasAndExpiry(t *testing.T) {
	clk := newClock()
	ls := replicas(t, 2, Config{LeaseTTL: 3 * time.Second}, clk)
	tl := limits.Limits{MaxConcurrency: 2}
	a, _, _, ok1 := ls[0].Admit("t1", tl, "k1", limits.Limits{}, 0)
	_, _, _, ok2 := ls[1].Admit("t1", tl, "k2", limits.Limits{}, 0) // held by replica 1, which "crashes"
	if !ok1 || !ok2 {
		t.Fatal("the first two requests were refused")
	}
	if _, _, r, ok := ls[0].Admit("t1", tl, "k3", limits.Limits{}, 0); ok || r.Kind != limits.KindConcurrency || r.RetryAfter != time.Second {
		t.Fatalf("ok=%v %+v, want the tenant's concurrency cap", ok, r)
	}
	a.Release()
	b, _, _, ok := ls[0].Admit("t1", tl, "k3", limits.Limits{}, 0)
	if !ok {
		t.Fatal("refused after a slot was released")
	}
	// Replica 0 renews its live lease; replica 1 is gone and renews nothing.
	clk.add(2 * time.Second)
	ls[0].Renew(context.Background())
	clk.add(1500 * time.Millisecond) // replica 1's lease expired, replica 0's renewed one did not
	if _, _, _, ok := ls[0].Admit("t1", tl, "k4", limits.Limits{}, 0); !ok {
		t.Fatal("a crashed replica's expired lease still holds its slot")
	}
	if _, _, _, ok := ls[0].Admit("t1", tl, "k5", limits.Limits{}, 0); ok {
		t.Fatal("a renewed lease lost its slot")
	}
	if got := ls[0].Live(); got != 2 {
		t.Fatalf("replica 0 holds %d live leases, want 2", got)
	}
	b.Release()
	if got := ls[0].Live(); got != 1 {
		t.Fatalf("after a release replica 0 holds %d live leases, want 1", got)
	}
}

func TestBothScopesChargedOrNeither(t *testing.T) {
	clk := newClock()
	ls := replicas(t, 1, Config{}, clk)
	tl, kl := limits.Limits{RPM: 3}, limits.Limits{RPM: 5}
	for range 3 {
		if _, _, _, ok := ls[0].Admit("t1", tl, "k1", kl, 0); !ok {
			t.Fatal("refused within both limits")
		}
	}
	_, st, r, ok := ls[0].Admit("t1", tl, "k1", kl, 0)
	if ok || r.Scope != limits.ScopeTenant {
		t.Fatalf("ok=%v %+v, want the tenant's limit", ok, r)
	}
	if st.RemainingRequests != 0 || st.LimitRequests != 3 {
		t.Fatalf("status %+v, want the tenant's 0 of 3", st)
	}
	// The refused request did not charge the key: with the tenant raised,
	// the key has 2 left.
	if _, st, _, ok := ls[0].Admit("t1", limits.Limits{}, "k1", kl, 0); !ok || st.RemainingRequests != 1 {
		t.Fatalf("ok=%v remaining %d, want the key's 5-3-1 = 1", ok, st.RemainingRequests)
	}
}

func TestUnlimitedCostsNoRoundTrip(t *testing.T) {
	l, err := New(Config{Fail: FailClosed}, deadClient(t), newClock(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := l.Admit("t1", limits.Limits{}, "k1", limits.Limits{}, 100); !ok {
		t.Fatal("an unlimited request was refused")
	}
}

// deadClient is a client of a port nothing listens on: Redis down.
func deadClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisDownFailOpenEnforcesPerReplica(t *testing.T) {
	clk := newClock()
	l, err := New(Config{}, deadClient(t), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	kl := limits.Limits{RPM: 2}
	passed := 0
	for range 5 {
		if tk, _, r, ok := l.Admit("t1", limits.Limits{}, "k1", kl, 0); ok {
			passed++
			tk.Release()
		} else if r.Unavailable {
			t.Fatalf("fail-open refused as unavailable: %+v", r)
		}
	}
	if passed != 2 {
		t.Fatalf("fail open passed %d of 5 with rpm 2, want 2 (the in-process limiter)", passed)
	}
	if s := l.Stats(); s.Fallbacks != 5 || s.Admits != 0 {
		t.Fatalf("stats %+v, want 5 fallbacks", s)
	}
}

func TestRedisDownFailClosedRefuses(t *testing.T) {
	clk := newClock()
	l, err := New(Config{Fail: FailClosed, Backoff: 2 * time.Second}, deadClient(t), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, r, ok := l.Admit("t1", limits.Limits{}, "k1", limits.Limits{RPM: 100}, 0)
	want := limits.Refusal{Scope: limits.ScopeTenant, Unavailable: true, RetryAfter: 2 * time.Second}
	if ok {
		t.Fatal("fail closed admitted with Redis down")
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	if s := l.Stats(); s.RefusedDown != 1 {
		t.Fatalf("stats %+v, want 1 refused", s)
	}
}

// TestSameDecisionsAsInProcess replays one random sequence of admissions,
// releases with observed tokens, limit changes and clock steps through the
// in-process limiter and through two Redis replicas: every decision,
// refusal and status must be the same.
func TestSameDecisionsAsInProcess(t *testing.T) {
	clk := newClock()
	ls := replicas(t, 2, Config{}, clk)
	local, err := limits.New(limits.Config{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	lims := []limits.Limits{{RPM: 10, TPM: 5000, MaxConcurrency: 3}, {RPM: 4}, {TPM: 3000}, {RPM: 6, MaxConcurrency: 2}, {}}
	tl, kl := lims[0], lims[1]
	type held struct{ a, b limits.Ticket }
	var live []held
	for step := range 400 {
		switch op := rng.IntN(10); {
		case op < 5:
			cost := int64(rng.IntN(1500))
			key := fmt.Sprintf("k%d", rng.IntN(2))
			ta, sa, ra, oka := local.Admit("t1", tl, key, kl, cost)
			tb, sb, rb, okb := ls[step%2].Admit("t1", tl, key, kl, cost)
			if oka != okb {
				t.Fatalf("step %d: in-process ok=%v, redis ok=%v (%+v / %+v)", step, oka, okb, ra, rb)
			}
			// Redis keeps milliseconds; the headers round up to them too.
			ra.RetryAfter = ceilMs(ra.RetryAfter)
			sa.ResetRequests, sa.ResetTokens = ceilMs(sa.ResetRequests), ceilMs(sa.ResetTokens)
			if diff := cmp.Diff(ra, rb, msTolerance); diff != "" {
				t.Fatalf("step %d: refusal (-in-process +redis):\n%s", step, diff)
			}
			if diff := cmp.Diff(sa, sb, msTolerance); diff != "" {
				t.Fatalf("step %d: status (-in-process +redis):\n%s", step, diff)
			}
			if oka {
				live = append(live, held{ta, tb})
			}
		case op < 8 && len(live) > 0:
			k := rng.IntN(len(live))
			h := live[k]
			live = append(live[:k], live[k+1:]...)
			if rng.IntN(3) > 0 {
				used := int64(rng.IntN(2000))
				h.a.Observe(used)
				h.b.Observe(used)
			}
			h.a.Release()
			h.b.Release()
		case op == 8:
			clk.add(time.Duration(rng.IntN(8000)) * time.Millisecond)
		default:
			tl, kl = lims[rng.IntN(len(lims)-1)], lims[rng.IntN(len(lims))] // the tenant always limited: see TestUnlimitedCostsNoRoundTrip
		}
	}
}

// ceilMs rounds d up to the millisecond.
func ceilMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// msTolerance lets durations differ by a millisecond (float rounding of
// the same arithmetic in Lua and Go, at the ceiling).
var msTolerance = cmp.Comparer(func(a, b time.Duration) bool {
	d := a - b
	return d <= time.Millisecond && d >= -time.Millisecond
})
