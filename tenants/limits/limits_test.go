package limits

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

func newTest(t *testing.T) (*Limiter, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l, err := New(Config{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	return l, clk
}

// admitN admits n requests and returns how many passed; admitted tickets
// are released at once.
func admitN(l *Limiter, n int, tl, kl Limits, key string, cost int64) (passed int, last Refusal) {
	for range n {
		tk, _, r, ok := l.Admit("t", tl, key, kl, cost)
		if ok {
			passed++
			tk.Release()
		} else {
			last = r
		}
	}
	return passed, last
}

func TestRequestWindowRolls(t *testing.T) {
	l, clk := newTest(t)
	kl := Limits{RPM: 6}
	passed, r := admitN(l, 10, Limits{}, kl, "k", 0)
	if passed != 6 {
		t.Fatalf("passed %d of 10 with rpm 6", passed)
	}
	want := Refusal{Scope: ScopeKey, Kind: KindRequests, Limit: 6, RetryAfter: 10 * time.Second}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	clk.add(10 * time.Second) // one request's worth refills
	if p, _ := admitN(l, 3, Limits{}, kl, "k", 0); p != 1 {
		t.Errorf("after 10s: passed %d, want 1", p)
	}
	clk.add(time.Minute) // full again, not beyond
	if p, _ := admitN(l, 10, Limits{}, kl, "k", 0); p != 6 {
		t.Errorf("after a minute: passed %d, want 6", p)
	}
}

func TestTokensChargedAndCorrected(t *testing.T) {
	l, clk := newTest(t)
	kl := Limits{TPM: 1000}
	tk, st, _, ok := l.Admit("t", Limits{}, "k", kl, 600) // prompt + max_tokens
	if !ok {
		t.Fatal("first request refused")
	}
	if st.RemainingTokens != 400 || st.LimitTokens != 1000 || st.ResetTokens != 36*time.Second {
		t.Errorf("status after admission %+v", st)
	}
	if _, _, r, ok := l.Admit("t", Limits{}, "k", kl, 600); ok || r.Kind != KindTokens || r.RetryAfter != 12*time.Second {
		t.Errorf("second 600-token request: ok=%v refusal %+v", ok, r)
	}
	tk.Observe(100) // it used only 100: 500 come back
	tk.Release()
	tk.Release() // second release is a no-op
	tk2, st, _, ok := l.Admit("t", Limits{}, "k", kl, 600)
	if !ok || st.RemainingTokens != 300 {
		t.Fatalf("after correction: ok=%v %+v", ok, st)
	}
	tk2.Observe(1500) // used more than estimated: 300+600-1500 = -600, debt
	tk2.Release()
	_, st, r, ok := l.Admit("t", Limits{}, "k", kl, 1)
	if ok || st.RemainingTokens != 0 || r.RetryAfter != 36060*time.Millisecond {
		t.Errorf("in debt: ok=%v status %+v refusal %+v", ok, st, r)
	}
	clk.add(time.Minute)
	if _, _, _, ok := l.Admit("t", Limits{}, "k", kl, 1001); ok {
		t.Error("a request larger than the TPM was admitted")
	}
	if _, _, r, _ := l.Admit("t", Limits{}, "k", kl, 1001); !r.TooLarge {
		t.Errorf("too large not flagged: %+v", r)
	}
}

func TestConcurrencyReleasedOnEveryPath(t *testing.T) {
	l, _ := newTest(t)
	tl := Limits{MaxConcurrency: 2}
	a, _, _, ok1 := l.Admit("t", tl, "k1", Limits{}, 0)
	b, _, _, ok2 := l.Admit("t", tl, "k2", Limits{}, 0)
	_, _, r, ok3 := l.Admit("t", tl, "k3", Limits{}, 0)
	if !ok1 || !ok2 || ok3 || r.Scope != ScopeTenant || r.Kind != KindConcurrency || r.RetryAfter != time.Second {
		t.Fatalf("admissions %v %v %v refusal %+v", ok1, ok2, ok3, r)
	}
	// success path, panic path (deferred release), never-observed path
	a.Observe(10)
	a.Release()
	func() {
		defer func() { _ = recover() }()
		defer b.Release()
		panic("handler blew up")
	}()
	var zero Ticket
	zero.Release() // a refused request's zero ticket is harmless
	for i := range 4 {
		tk, _, _, ok := l.Admit("t", tl, "k1", Limits{}, 0)
		if !ok {
			t.Fatalf("round %d: slot not freed", i)
		}
		tk.Release()
		tk.Release()
	}
	if e := l.tenants["t"]; e.inflight != 0 {
		t.Errorf("tenant in flight %d after all released", e.inflight)
	}
}

func TestKeysIndependentTenantShared(t *testing.T) {
	l, _ := newTest(t)
	kl := Limits{RPM: 2}
	if p, _ := admitN(l, 5, Limits{RPM: 3}, kl, "a", 0); p != 2 {
		t.Errorf("key a passed %d, want 2", p)
	}
	p, r := admitN(l, 5, Limits{RPM: 3}, kl, "b", 0)
	if p != 1 || r.Scope != ScopeTenant {
		t.Errorf("key b passed %d (want 1, the tenant's last), refusal %+v", p, r)
	}
	if p, _ := admitN(l, 5, Limits{}, kl, "c", 0); p != 2 {
		t.Errorf("key c with the tenant limit lifted passed %d, want 2", p)
	}
}

func TestLimitChangeKeepsUsage(t *testing.T) {
	l, _ := newTest(t)
	if p, _ := admitN(l, 5, Limits{}, Limits{RPM: 2}, "k", 0); p != 2 {
		t.Fatalf("passed %d", p)
	}
	if p, _ := admitN(l, 5, Limits{}, Limits{RPM: 5}, "k", 0); p != 3 {
		t.Errorf("raised to 5 after 2 used: passed %d, want 3", p)
	}
	if p, _ := admitN(l, 5, Limits{}, Limits{}, "k", 0); p != 5 {
		t.Errorf("unlimited: passed %d", p)
	}
	if p, _ := admitN(l, 5, Limits{}, Limits{RPM: 1}, "k", 0); p != 1 {
		t.Errorf("limit 1 from unlimited: passed %d", p)
	}
}

func TestHoldsAcrossGoroutines(t *testing.T) {
	l, _ := newTest(t)
	const n, limit = 200, 37
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			tk, _, _, ok := l.Admit("t", Limits{RPM: limit}, key, Limits{}, 0)
			if ok {
				tk.Release()
				mu.Lock()
				passed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if passed != limit {
		t.Errorf("passed %d of %d concurrent requests, want exactly %d", passed, n, limit)
	}
}

func TestSweepForgetsIdleOnly(t *testing.T) {
	l, clk := newTest(t)
	held, _, _, _ := l.Admit("t", Limits{}, "busy", Limits{MaxConcurrency: 1}, 0)
	tk, _, _, _ := l.Admit("t", Limits{}, "idle", Limits{RPM: 1}, 0)
	tk.Release()
	clk.add(3 * time.Minute)
	l.Admit("t2", Limits{}, "other", Limits{}, 0)
	if _, ok := l.keys["idle"]; ok {
		t.Error("idle key kept")
	}
	if _, ok := l.keys["busy"]; !ok {
		t.Error("key with a request in flight dropped")
	}
	held.Release()
}

// BenchmarkAdmitRelease measures one admission and release of a known key
// with every limit set (go test -bench Admit -benchmem ./tenants/limits).
func BenchmarkAdmitRelease(b *testing.B) {
	l, err := New(Config{}, &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		b.Fatal(err)
	}
	lim := Limits{RPM: 1 << 40, TPM: 1 << 40, MaxConcurrency: 1 << 20}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _, _, ok := l.Admit("t", lim, "k", lim, 100)
			if !ok {
				b.Fatal("refused")
			}
			tk.Observe(50)
			tk.Release()
		}
	})
}
