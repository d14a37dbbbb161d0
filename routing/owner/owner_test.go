package owner

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/internal/redistest"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
)

// replica returns the leases of a replica named id over its own client,
// on the wall clock.
func replica(t *testing.T, prefix, id string, cfg Config) *Leases {
	t.Helper()
	return replicaAt(t, prefix, id, cfg, nil)
}

// replicaAt is replica on clock (nil: the wall clock). A Redis call gets
// 10 s unless cfg says otherwise: past the 250 ms default a lookup routes
// here (the fail mode), which a loaded machine must not trigger in a test
// of the leases themselves.
func replicaAt(t *testing.T, prefix, id string, cfg Config, clock routing.Clock) *Leases {
	t.Helper()
	cfg.Prefix, cfg.ID = prefix, id
	if cfg.URL == "" {
		cfg.URL = "http://" + id + ".test:8080"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	l, err := New(cfg, redistest.NewClient(t), clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// manualClock is a clock the test moves: the leases' local deadlines
// (claim, idle, down) then do not depend on how fast the machine runs.
// The lease TTL itself still runs on Redis's clock.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *manualClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// countingClient counts the scripts run through a Redis client.
type countingClient struct {
	*redis.Client
	calls atomic.Int64
}

func (c *countingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.calls.Add(1)
	return c.Client.Eval(ctx, script, keys, args...)
}

func (c *countingClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	c.calls.Add(1)
	return c.Client.EvalSha(ctx, sha1, keys, args...)
}

// run runs l's renewals until the test ends or stop is called.
func run(t *testing.T, l *Leases) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func TestLeaseAcquireAndForward(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	a := replica(t, prefix, "a", Config{})
	b := replica(t, prefix, "b", Config{})
	ctx := context.Background()

	taken := time.Now()
	if o, fwd := a.Lookup(ctx, "c1"); fwd || o != a.Self() {
		t.Fatalf("first lookup on a: owner %v forward %v, want a itself", o, fwd)
	}
	v, err := rdb.Get(ctx, prefix+":c1").Result()
	if err != nil || v != "a@http://a.test:8080" {
		t.Fatalf("lease value %q (%v), want a@http://a.test:8080", v, err)
	}
	// 10 s less the time since the lookup began (however slow the machine).
	if ttl, since := rdb.PTTL(ctx, prefix+":c1").Val(), time.Since(taken); ttl < 10*time.Second-since-time.Millisecond || ttl > 10*time.Second {
		t.Fatalf("lease pttl %v %v after it was taken, want 10 s less that", ttl, since)
	}
	o, fwd := b.Lookup(ctx, "c1")
	if !fwd || o != (Replica{ID: "a", URL: "http://a.test:8080"}) {
		t.Fatalf("b's lookup: owner %v forward %v, want a forwarded", o, fwd)
	}
	// b takes the next free cluster itself.
	if _, fwd := b.Lookup(ctx, "c2"); fwd || !b.Holds("c2") {
		t.Fatalf("b's lookup of a free cluster: forward %v holds %v, want b to take it", fwd, b.Holds("c2"))
	}
	if !a.Holds("c1") || a.Holds("c2") || b.Holds("c1") {
		t.Fatalf("holds: a c1 %v, a c2 %v, b c1 %v", a.Holds("c1"), a.Holds("c2"), b.Holds("c1"))
	}
	if st := a.Stats(); st.Held != 1 || st.Acquired != 1 {
		t.Fatalf("a's stats %+v, want 1 held, 1 acquired", st)
	}
}

func TestLeaseWithoutURLNeverOwns(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	l, err := New(Config{Prefix: prefix, ID: "n"}, rdb, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, fwd := l.Lookup(context.Background(), "c"); fwd || l.Holds("c") {
		t.Fatalf("forward %v holds %v: a replica without a URL must route a free cluster itself without taking it", fwd, l.Holds("c"))
	}
	if n := rdb.Exists(context.Background(), prefix+":c").Val(); n != 0 {
		t.Fatal("a replica without a URL wrote a lease")
	}
}

func TestLeaseRenewExpireTakeover(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	// A 1 s TTL: the renewals below (every TTL/3, on the wall clock, as
	// Run does) keep the lease unless this goroutine stalls for most of
	// a second; 300 ms was within reach of a loaded machine's stalls.
	cfg := Config{TTL: time.Second, Recheck: 20 * time.Millisecond}
	a := replica(t, prefix, "a", cfg)
	b := replica(t, prefix, "b", cfg)
	a.Lookup(ctx, "c")
	// Renewed: held well past one TTL while a keeps using it.
	deadline := time.Now().Add(2500 * time.Millisecond)
	lastRenew := time.Now()
	for time.Now().Before(deadline) {
		if time.Since(lastRenew) >= cfg.TTL/3 {
			a.renew(ctx)
			lastRenew = time.Now()
		}
		if o, fwd := a.Lookup(ctx, "c"); fwd || o != a.Self() {
			t.Fatalf("a lost its renewed lease: owner %v", o)
		}
		if o, fwd := b.Lookup(ctx, "c"); !fwd || o.ID != "a" {
			t.Fatalf("b sees owner %v forward %v while a renews, want a", o, fwd)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A crash: renewals stop, nothing is released.
	if n := rdb.Exists(ctx, prefix+":c").Val(); n != 1 {
		t.Fatal("the lease vanished without its TTL passing")
	}
	crashed := time.Now()
	var slowest time.Duration // the longest lookup: how late the poll can see the takeover
	testwait.Until(t, "b takes over the crashed owner's cluster", func() bool {
		start := time.Now()
		_, fwd := b.Lookup(ctx, "c")
		slowest = max(slowest, time.Since(start))
		return !fwd && b.Holds("c")
	})
	if d := time.Since(crashed); d > cfg.TTL+cfg.Recheck+2*time.Second+2*slowest {
		t.Errorf("takeover %v after the crash, want within TTL (%v) + recheck (lookups took up to %v)", d, cfg.TTL, slowest)
	}
	if a.Holds("c") {
		t.Fatal("a still claims a lease it could not renew past its deadline")
	}
	if v := rdb.Get(ctx, prefix+":c").Val(); !strings.HasPrefix(v, "b@") {
		t.Fatalf("lease %q after takeover, want b's", v)
	}
}

func TestLeaseLossStopsClaimAtRenewal(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	a := replica(t, prefix, "a", Config{TTL: 600 * time.Millisecond})
	a.Lookup(ctx, "c")
	// Someone else holds it now (an operator, or a split brain healed).
	rdb.Set(ctx, prefix+":c", "z@http://z.test:1", 10*time.Second)
	a.renew(ctx)
	if a.Holds("c") {
		t.Fatal("a still claims a lease a renewal found taken by z")
	}
	if o, fwd := a.Lookup(ctx, "c"); !fwd || o.ID != "z" {
		t.Fatalf("after the loss a sees %v forward %v, want z", o, fwd)
	}
	if st := a.Stats(); st.Lost != 1 || st.Held != 0 {
		t.Fatalf("stats %+v, want 1 lost, 0 held", st)
	}
}

func TestLeaseReleaseAtStopAndIdle(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	a := replica(t, prefix, "a", Config{TTL: 10 * time.Second})
	b := replica(t, prefix, "b", Config{TTL: 10 * time.Second, Recheck: time.Millisecond})
	stop := run(t, a)
	a.Lookup(ctx, "c")
	b.Lookup(ctx, "c")
	stop() // graceful: releases
	if n := rdb.Exists(ctx, prefix+":c").Val(); n != 0 {
		t.Fatal("lease still in Redis after its holder stopped")
	}
	time.Sleep(2 * time.Millisecond)
	if _, fwd := b.Lookup(ctx, "c"); fwd || !b.Holds("c") {
		t.Fatal("b did not take the released lease at once")
	}
	// Idle: a lease with no request for Idle is released at the next
	// renewal (on a clock the test moves: a stall between Touch and renew
	// must not make the touched lease idle).
	clk := &manualClock{t: time.Now()}
	c := replicaAt(t, prefix, "c", Config{TTL: 10 * time.Second, Idle: 50 * time.Millisecond}, clk)
	c.Lookup(ctx, "idle")
	c.Lookup(ctx, "forwarded")
	clk.Add(60 * time.Millisecond)
	c.Touch("forwarded") // its requests arrive forwarded: not idle
	c.renew(ctx)
	if !c.Holds("forwarded") {
		t.Fatal("a lease whose requests arrive by forwards was released as idle")
	}
	if c.Holds("idle") || rdb.Exists(ctx, prefix+":idle").Val() != 0 {
		t.Fatal("an idle lease was not released")
	}
	// Release never deletes another replica's lease.
	rdb.Set(ctx, prefix+":other", "z@http://z.test:1", 10*time.Second)
	c.release(ctx, "other")
	if rdb.Exists(ctx, prefix+":other").Val() != 1 {
		t.Fatal("release deleted a lease held by another replica")
	}
}

func TestLeaseUnreachableAndRedisDown(t *testing.T) {
	_, prefix := redistest.Client(t)
	ctx := context.Background()
	a := replica(t, prefix, "a", Config{})
	clk := &manualClock{t: time.Now()}
	b := replicaAt(t, prefix, "b", Config{Down: 100 * time.Millisecond}, clk)
	a.Lookup(ctx, "c")
	o, fwd := b.Lookup(ctx, "c")
	if !fwd {
		t.Fatal("b does not forward to a")
	}
	b.Unreachable("c", o)
	if _, fwd := b.Lookup(ctx, "c"); fwd {
		t.Fatal("b forwards to an owner it just found unreachable")
	}
	clk.Add(110 * time.Millisecond)
	if _, fwd := b.Lookup(ctx, "c"); !fwd {
		t.Fatal("b does not try the owner again after Down")
	}
	// Redis unreachable: route here, no error, and back off.
	dead := &countingClient{Client: deadClient(t)}
	d, err := New(Config{Prefix: prefix, ID: "d", URL: "http://d.test:1", Timeout: 50 * time.Millisecond, Backoff: time.Hour}, dead, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, fwd := d.Lookup(ctx, "c"); fwd || d.Holds("c") {
		t.Fatal("without Redis a replica must route itself and claim nothing")
	}
	before := dead.calls.Load()
	if _, fwd := d.Lookup(ctx, "c"); fwd {
		t.Fatal("a lookup during the backoff forwards")
	}
	if n := dead.calls.Load() - before; before == 0 || n != 0 {
		t.Errorf("Redis calls: %d by the first lookup, %d by one during the backoff: want some, then none (it must not wait on Redis)", before, n)
	}
	if st := d.Stats(); st.RedisErrors != 1 {
		t.Fatalf("redis errors %d, want 1 (the second lookup is within the backoff)", st.RedisErrors)
	}
}

// deadClient is a Redis client whose server does not exist.
func deadClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{TTL: -1}, {TTL: time.Millisecond}, {TTL: time.Second, Renew: time.Second},
		{ID: "a@b"}, {ID: "a b"}, {URL: "ftp://x"}, {URL: "http://"}, {URL: "not a url"},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", c)
		}
	}
	if err := (Config{ID: "pod-1", URL: "http://10.0.0.1:8080", TTL: 2 * time.Second}).Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
