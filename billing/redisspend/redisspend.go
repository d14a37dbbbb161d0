// Package redisspend keeps every tenant's and key's billed spend of the
// current month in Redis, in integer nano-USD, so the monthly budgets of
// billing.Guard hold across replicas: every replica adds what it meters
// (Meter), checks budgets against the shared totals (Guard), and raises
// the totals to at least the ledger's every reconcile interval (Run), which
// repairs increments lost while Redis was down or restarted.
//
// Overrun bound (README.md): a request is admitted while the shared spend is
// below the budget and counted when it is metered, so across any number of
// replicas the spend can pass the budget by at most the cost of the
// requests in flight when it crossed plus those admitted within one push
// delay — the same bound as one replica, independent of N.
package redisspend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/redisfail"
)

// NanoPerUSD is the unit of the counters: 1 nano-USD = 1e-9 USD.
const NanoPerUSD = 1e9

// ToNano converts USD to nano-USD, rounding to the nearest; non-finite or
// negative amounts count 0.
func ToNano(usd float64) int64 {
	if !(usd > 0) || math.IsInf(usd, 0) {
		return 0
	}
	v := math.Round(usd * NanoPerUSD)
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// FromNano converts nano-USD to USD.
func FromNano(n int64) float64 { return float64(n) / NanoPerUSD }

// FailMode says what Guard.Check does when Redis cannot be read
// (internal/redisfail, the rule tenants/limits/redislimit shares).
type FailMode = redisfail.Mode

// Fail modes.
const (
	// FailOpen falls back to this replica's own view (billing.Guard: the
	// ledger reloaded every SpendRefresh plus its own pending spend).
	FailOpen = redisfail.Open
	// FailClosed refuses requests of tenants or keys that have a budget.
	FailClosed = redisfail.Closed
)

// ErrUnavailable is returned by Guard.Check when the shared spend cannot be
// read and the fail mode is closed; the api answers 503.
var ErrUnavailable = errors.New("budget check unavailable: the shared spend store is unreachable")

// Config holds the counters' settings; zero fields take the defaults.
type Config struct {
	// Prefix starts every Redis key (default "rb:spend").
	Prefix string
	// Timeout bounds one Redis call (default 250 ms).
	Timeout time.Duration
	// Backoff is how long Redis is not read after a failed call (default 1 s).
	Backoff time.Duration
	// Fail is Guard.Check's fail mode (default FailOpen).
	Fail FailMode
	// Queue is how many metered amounts wait to be pushed (default 65536);
	// beyond it amounts are dropped and the next reconcile restores them
	// from the ledger.
	Queue int
	// Reconcile is how often Run raises the counters to the ledger's
	// totals (default 30 s).
	Reconcile time.Duration
	// KeepFor is how long a month's counters are kept (default 40 days).
	KeepFor time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Prefix: "rb:spend", Timeout: redisfail.DefaultTimeout, Backoff: redisfail.DefaultBackoff, Fail: redisfail.DefaultMode,
		Queue: 65536, Reconcile: 30 * time.Second, KeepFor: 40 * 24 * time.Hour}
}

// Validate reports a negative setting or an unknown fail mode.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.Backoff < 0 || c.Queue < 0 || c.Reconcile < 0 || c.KeepFor < 0 {
		return errors.New("redisspend: settings must be >= 0")
	}
	if err := c.Fail.Validate(); err != nil {
		return fmt.Errorf("redisspend: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	redisfail.FillDefaults(&c.Timeout, &c.Backoff, &c.Fail)
	if c.Queue == 0 {
		c.Queue = d.Queue
	}
	if c.Reconcile == 0 {
		c.Reconcile = d.Reconcile
	}
	if c.KeepFor == 0 {
		c.KeepFor = d.KeepFor
	}
	return c
}

// Client is the part of a go-redis client the counters use.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Ledger is the billing ledger's read of a period's totals (billing's
// pgstore and sqlitestore implement it).
type Ledger interface {
	PeriodSpend(ctx context.Context, since time.Time) ([]billing.PeriodSpend, error)
}

// amount is one metered request's spend, queued for Redis.
type amount struct {
	period   time.Time
	tenantID string
	keyID    string
	nano     int64
}

// Counters are the shared month spend. Add never blocks; Run pushes what
// was added and reconciles with the ledger. Safe for concurrent use.
type Counters struct {
	cfg   Config
	rdb   Client
	clock billing.Clock
	log   *slog.Logger
	queue chan amount

	redis  redisfail.Breaker // down: Redis is not read
	pushMu sync.Mutex        // one push at a time (Run's and Flush's)
	stats  struct{ pushed, dropped, pushErrors, reconciled, readErrors atomic.Int64 }
}

// New returns the counters over rdb; clock nil is the wall clock.
func New(cfg Config, rdb Client, clock billing.Clock, log *slog.Logger) (*Counters, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("redisspend: nil redis client")
	}
	cfg = cfg.withDefaults()
	if clock == nil {
		clock = wallClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Counters{cfg: cfg, rdb: rdb, clock: clock, log: log, queue: make(chan amount, cfg.Queue)}, nil
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Stats counts what the counters did.
type Stats struct {
	// Pushed is amounts written to Redis; Dropped amounts the full queue
	// refused (restored by the next reconcile).
	Pushed, Dropped int64
	// PushErrors and ReadErrors are failed Redis calls; Reconciled is
	// completed reconciles with the ledger.
	PushErrors, ReadErrors, Reconciled int64
}

// Stats returns the counters' counters.
func (c *Counters) Stats() Stats {
	return Stats{Pushed: c.stats.pushed.Load(), Dropped: c.stats.dropped.Load(), PushErrors: c.stats.pushErrors.Load(),
		ReadErrors: c.stats.readErrors.Load(), Reconciled: c.stats.reconciled.Load()}
}

// key is the hash of a tenant's spend in the month starting at period:
// field "t" is the tenant's total, "k:<key id>" each key's.
func (c *Counters) key(period time.Time, tenantID string) string {
	return c.cfg.Prefix + ":{" + tenantID + "}:" + period.UTC().Format("2006-01")
}

// Add counts nano of spend for a tenant and key (keyID may be empty) in the
// month of at. It never blocks.
func (c *Counters) Add(at time.Time, tenantID, keyID string, nano int64) {
	if nano <= 0 {
		return
	}
	select {
	case c.queue <- amount{period: billing.PeriodStart(at), tenantID: tenantID, keyID: keyID, nano: nano}:
	default:
		c.stats.dropped.Add(1)
	}
}

// Spent returns the shared spend of the tenant and of the key in the
// current month, in nano-USD. While Redis is marked down it fails fast.
func (c *Counters) Spent(ctx context.Context, tenantID, keyID string) (tenant, key int64, err error) {
	if c.redis.Down(time.Now()) {
		return 0, 0, ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	fields := []string{"t"}
	if keyID != "" {
		fields = append(fields, "k:"+keyID)
	}
	vals, err := c.rdb.HMGet(ctx, c.key(billing.PeriodStart(c.clock.Now()), tenantID), fields...).Result()
	if err != nil {
		c.stats.readErrors.Add(1)
		c.redis.Trip(time.Now(), c.cfg.Backoff)
		c.log.Warn("redis spend counters unreachable", slog.String("error", err.Error()), slog.String("fail", string(c.cfg.Fail)))
		return 0, 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	parse := func(v any) int64 {
		s, _ := v.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	tenant = parse(vals[0])
	if len(vals) > 1 {
		key = parse(vals[1])
	}
	return tenant, key, nil
}

// Run pushes added amounts as they come (batched while a push is in
// flight) and reconciles with ledger every Config.Reconcile (first at
// once) until ctx ends; then it pushes what is queued. ledger may be nil.
func (c *Counters) Run(ctx context.Context, ledger Ledger) error {
	tick := time.NewTicker(c.cfg.Reconcile)
	defer tick.Stop()
	if ledger != nil {
		c.reconcileOnce(ctx, ledger)
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*c.cfg.Timeout)
			defer cancel()
			return c.Flush(fctx)
		case a := <-c.queue:
			// Bounded by Config.Timeout; not cut short by shutdown, which
			// would lose the amount from Redis until the next reconcile.
			_ = c.push(context.WithoutCancel(ctx), a)
		case <-tick.C:
			if ledger != nil {
				c.reconcileOnce(ctx, ledger)
			}
		}
	}
}

func (c *Counters) reconcileOnce(ctx context.Context, ledger Ledger) {
	period := billing.PeriodStart(c.clock.Now())
	rows, err := ledger.PeriodSpend(ctx, period)
	if err == nil {
		err = c.Reconcile(ctx, period, rows)
	}
	if err != nil && ctx.Err() == nil {
		c.log.Warn("redis spend counters: reconcile with the ledger failed", slog.String("error", err.Error()))
	}
}

// Flush pushes everything queued now (tests and shutdown).
func (c *Counters) Flush(ctx context.Context) error {
	select {
	case a := <-c.queue:
		return c.push(ctx, a)
	default:
		return nil
	}
}

// push writes first and everything else queued in one pipeline of
// HINCRBYs, summed per field.
func (c *Counters) push(ctx context.Context, first amount) error {
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	type field struct{ key, field string }
	sums := map[field]int64{}
	n := 0
	add := func(a amount) {
		k := c.key(a.period, a.tenantID)
		sums[field{k, "t"}] += a.nano
		if a.keyID != "" {
			sums[field{k, "k:" + a.keyID}] += a.nano
		}
		n++
	}
	add(first)
drain:
	for n < 10000 {
		select {
		case a := <-c.queue:
			add(a)
		default:
			break drain
		}
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	keys := map[string]bool{}
	_, err := c.rdb.Pipelined(pctx, func(p redis.Pipeliner) error {
		for f, v := range sums {
			p.HIncrBy(pctx, f.key, f.field, v)
			keys[f.key] = true
		}
		for k := range keys {
			p.PExpire(pctx, k, c.cfg.KeepFor)
		}
		return nil
	})
	if err != nil {
		// The amounts are lost from Redis (not from the ledger): the next
		// reconcile raises the counters to the ledger's totals.
		c.stats.pushErrors.Add(int64(n))
		c.log.Warn("redis spend counters: push failed; the next reconcile restores it from the ledger", slog.String("error", err.Error()), slog.Int("amounts", n))
		return err
	}
	c.stats.pushed.Add(int64(n))
	return nil
}

// raiseScript sets each field (ARGV pairs) to at least its value: KEYS[1]
// the hash, ARGV[1] its expiry ms, then field, value, ….
var raiseScript = redis.NewScript(`
local n = 0
for i = 2, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i])) or 0
  local v = tonumber(ARGV[i + 1])
  if cur < v then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    n = n + 1
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
`)

// Reconcile raises the counters of period to at least the ledger's totals
// (rows as billing.Ledger.PeriodSpend returns them: billed nano-USD per tenant
// and key). It never lowers a counter: the shared total also holds what
// replicas metered and have not yet written.
func (c *Counters) Reconcile(ctx context.Context, period time.Time, rows []billing.PeriodSpend) error {
	type tenant struct {
		total int64
		keys  map[string]int64
	}
	per := map[string]*tenant{}
	for _, r := range rows {
		t := per[r.TenantID]
		if t == nil {
			t = &tenant{keys: map[string]int64{}}
			per[r.TenantID] = t
		}
		n := int64(r.Billed)
		t.total += n
		if r.KeyID != "" {
			t.keys[r.KeyID] += n
		}
	}
	if len(per) == 0 {
		c.stats.reconciled.Add(1)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 4*c.cfg.Timeout)
	defer cancel()
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, t := range per {
			args := []any{c.cfg.KeepFor.Milliseconds(), "t", t.total}
			for k, v := range t.keys {
				args = append(args, "k:"+k, v)
			}
			raiseScript.Eval(ctx, p, []string{c.key(period, id)}, args...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisspend: reconcile: %w", err)
	}
	c.stats.reconciled.Add(1)
	return nil
}
