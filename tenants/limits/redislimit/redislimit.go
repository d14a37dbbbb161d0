// Package redislimit enforces the rate limits of tenants/limits (requests
// per minute, tokens per minute, requests in flight; per API key and per
// tenant) across every replica of the service, in Redis.
//
// Each admission is one Lua script run (one round trip): it refills and
// checks the key's and the tenant's token buckets — the same buckets,
// refill, resize and debt rules as the in-process limiter — and their
// concurrency lease sets, and charges both scopes or neither. Concurrency
// slots are leases with an expiry (a sorted set scored by expiry): a live
// lease is renewed by its replica every LeaseTTL/3, so the slots of a
// replica that crashed free themselves within LeaseTTL. The tokens-per-
// minute charge is corrected when the request ends (Release), as in the
// in-process limiter.
//
// When Redis cannot be reached the limiter fails open (the default: each
// replica enforces the limits on its own, with the in-process limiter, so
// a tenant gets at most N× its limits over N replicas while Redis is down)
// or closed (requests are refused with Refusal.Unavailable). See README.md.
package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/internal/redisfail"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants/limits"
)

// FailMode is what the limiter does while Redis is unreachable
// (internal/redisfail, the rule billing/redisspend shares).
type FailMode = redisfail.Mode

// Fail modes.
const (
	// FailOpen enforces the limits per replica with the in-process
	// limiter while Redis is unreachable (the default).
	FailOpen = redisfail.Open
	// FailClosed refuses every limited request while Redis is unreachable.
	FailClosed = redisfail.Closed
)

// ParseFailMode parses "open" or "closed".
func ParseFailMode(s string) (FailMode, error) {
	m, err := redisfail.Parse(s)
	if err != nil {
		return "", fmt.Errorf("redislimit: %w", err)
	}
	return m, nil
}

// Config holds the limiter's settings; zero fields take the defaults.
type Config struct {
	// Prefix starts every Redis key (default "rb:lim"); tests give each
	// run its own.
	Prefix string
	// Window is the period of the per-minute limits (default 1 min).
	Window time.Duration
	// ConcurrencyRetryAfter is the Retry-After of a concurrency refusal
	// (default 1 s).
	ConcurrencyRetryAfter time.Duration
	// LeaseTTL is how long a concurrency slot outlives its replica
	// (default 30 s); live leases are renewed every LeaseTTL/3.
	LeaseTTL time.Duration
	// Timeout bounds one Redis call (default 250 ms).
	Timeout time.Duration
	// Backoff is how long Redis is not tried after a failed call (default
	// 1 s); meanwhile the fail mode applies at no cost.
	Backoff time.Duration
	// Fail is the fail mode (default FailOpen).
	Fail FailMode
	// Replica names this process in lease ids (default a random id).
	Replica string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Prefix: "rb:lim", Window: time.Minute, ConcurrencyRetryAfter: time.Second,
		LeaseTTL: 30 * time.Second, Timeout: redisfail.DefaultTimeout, Backoff: redisfail.DefaultBackoff, Fail: redisfail.DefaultMode}
}

// Validate reports a negative duration or an unknown fail mode.
func (c Config) Validate() error {
	for _, d := range []time.Duration{c.Window, c.ConcurrencyRetryAfter, c.LeaseTTL, c.Timeout, c.Backoff} {
		if d < 0 {
			return errors.New("redislimit: durations must be >= 0")
		}
	}
	if err := c.Fail.Validate(); err != nil {
		return fmt.Errorf("redislimit: %w", err)
	}
	if c.LeaseTTL > 0 && c.LeaseTTL < 3*time.Millisecond {
		return errors.New("redislimit: lease ttl must be >= 3ms")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.ConcurrencyRetryAfter == 0 {
		c.ConcurrencyRetryAfter = d.ConcurrencyRetryAfter
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	redisfail.FillDefaults(&c.Timeout, &c.Backoff, &c.Fail)
	if c.Replica == "" {
		c.Replica = randomID()
	}
	return c
}

// Client is the part of a go-redis client the limiter uses;
// *redis.Client, *redis.ClusterClient and redis.UniversalClient satisfy it.
type Client interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Limiter is the cluster-wide rate limiter. It is safe for concurrent use;
// Run must be running for long requests to keep their concurrency slots.
type Limiter struct {
	cfg   Config
	rdb   Client
	clock routing.Clock // nil: Redis's own TIME, one clock for every replica
	local *limits.Limiter
	log   *slog.Logger

	seq   atomic.Uint64
	redis redisfail.Breaker // down: Redis is not tried

	mu     sync.Mutex
	leases map[*lease]struct{} // live leases (each holds a slot in both scopes), renewed by Run

	stats struct{ admits, fallbacks, refusedDown, releaseErrors, renewErrors atomic.Int64 }
}

// New returns a limiter over rdb. clock nil means every timestamp is
// Redis's TIME (recommended: replicas' clocks then cannot disagree);
// tests pass a fake clock. The in-process fallback limiter uses clock
// (or the wall clock).
func New(cfg Config, rdb Client, clock routing.Clock, log *slog.Logger) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("redislimit: nil redis client")
	}
	cfg = cfg.withDefaults()
	local, err := limits.New(limits.Config{Window: cfg.Window, ConcurrencyRetryAfter: cfg.ConcurrencyRetryAfter}, clock)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{cfg: cfg, rdb: rdb, clock: clock, local: local, log: log, leases: map[*lease]struct{}{}}, nil
}

// Stats counts what the limiter did since it started.
type Stats struct {
	// Admits is admissions decided in Redis (admitted or refused).
	Admits int64
	// Fallbacks is admissions decided by the in-process limiter because
	// Redis was unreachable (fail open).
	Fallbacks int64
	// RefusedDown is requests refused because Redis was unreachable
	// (fail closed).
	RefusedDown int64
	// ReleaseErrors and RenewErrors are failed release and renewal calls
	// (the lease then expires by itself).
	ReleaseErrors, RenewErrors int64
}

// Stats returns the counters.
func (l *Limiter) Stats() Stats {
	return Stats{Admits: l.stats.admits.Load(), Fallbacks: l.stats.fallbacks.Load(), RefusedDown: l.stats.refusedDown.Load(),
		ReleaseErrors: l.stats.releaseErrors.Load(), RenewErrors: l.stats.renewErrors.Load()}
}

func (l *Limiter) wallNow() time.Time {
	if l.clock != nil {
		return l.clock.Now()
	}
	return time.Now()
}

// nowArg is the script's time argument: 0 asks for Redis's TIME.
func (l *Limiter) nowArg() int64 {
	if l.clock == nil {
		return 0
	}
	return l.clock.Now().UnixMilli()
}

func (l *Limiter) down() bool { return l.redis.Down(l.wallNow()) }

func (l *Limiter) markDown(err error) {
	l.redis.Trip(l.wallNow(), l.cfg.Backoff)
	l.log.Warn("redis rate limiter unreachable", slog.String("error", err.Error()), slog.String("fail", string(l.cfg.Fail)), slog.Duration("backoff", l.cfg.Backoff))
}

// keys returns a scope pair's four keys. The tenant id is the hash tag, so
// all four land in one Redis Cluster slot (a key belongs to one tenant).
func (l *Limiter) keys(tenantID, keyID string) []string {
	base := l.cfg.Prefix + ":{" + tenantID + "}"
	return []string{base + ":t", base + ":k:" + keyID, base + ":t:c", base + ":k:" + keyID + ":c"}
}

// Admit is AdmitContext with a background context (bounded by
// Config.Timeout), the shape of the in-process limiter's Admit.
func (l *Limiter) Admit(tenantID string, tl limits.Limits, keyID string, kl limits.Limits, tokens int64) (limits.Ticket, limits.Status, limits.Refusal, bool) {
	return l.AdmitContext(context.Background(), tenantID, tl, keyID, kl, tokens)
}

// AdmitContext admits one request of a key (keyID, its limits kl) of a
// tenant (tenantID, tl) estimated to cost tokens (prompt + max_tokens),
// with the in-process limiter's contract: when ok, one request and tokens
// are charged to both scopes cluster-wide and a concurrency slot is held
// in both scopes until the ticket is released;
// when not ok nothing is charged and the refusal says why. A request no
// limit applies to costs no round trip.
func (l *Limiter) AdmitContext(ctx context.Context, tenantID string, tl limits.Limits, keyID string, kl limits.Limits, tokens int64) (limits.Ticket, limits.Status, limits.Refusal, bool) {
	if tl == (limits.Limits{}) && kl == (limits.Limits{}) {
		return limits.Ticket{}, limits.Status{}, limits.Refusal{}, true
	}
	if tokens < 0 {
		tokens = 0
	}
	if l.down() {
		return l.failed(tenantID, tl, keyID, kl, tokens)
	}
	ls := &lease{l: l, keys: l.keys(tenantID, keyID), id: l.cfg.Replica + ":" + strconv.FormatUint(l.seq.Add(1), 36),
		charged: tokens, ttpm: tl.TPM, ktpm: kl.TPM}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	res, err := admitScript.Run(ctx, l.rdb, ls.keys, l.nowArg(), l.cfg.Window.Milliseconds(), l.cfg.LeaseTTL.Milliseconds(), ls.id, tokens,
		tl.RPM, tl.TPM, tl.MaxConcurrency, kl.RPM, kl.TPM, kl.MaxConcurrency, l.cfg.ConcurrencyRetryAfter.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 14 {
		err = fmt.Errorf("admit script answered %d values, want 14", len(res))
	}
	if err != nil {
		l.markDown(err)
		return l.failed(tenantID, tl, keyID, kl, tokens)
	}
	l.stats.admits.Add(1)
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	st := limits.Status{
		HasRequests: res[6] == 1, LimitRequests: res[7], RemainingRequests: res[8], ResetRequests: ms(res[9]),
		HasTokens: res[10] == 1, LimitTokens: res[11], RemainingTokens: res[12], ResetTokens: ms(res[13]),
	}
	if res[0] != 1 {
		r := limits.Refusal{Scope: limits.ScopeKey, Limit: res[5], TooLarge: res[3] == 1, RetryAfter: ms(res[4])}
		if res[1] == 2 {
			r.Scope = limits.ScopeTenant
		}
		switch res[2] {
		case 1:
			r.Kind = limits.KindConcurrency
		case 2:
			r.Kind = limits.KindRequests
		default:
			r.Kind = limits.KindTokens
		}
		return limits.Ticket{}, st, r, false
	}
	l.mu.Lock()
	l.leases[ls] = struct{}{}
	l.mu.Unlock()
	return limits.SharedTicket(ls), st, limits.Refusal{}, true
}

// failed applies the fail mode to a request Redis could not decide.
func (l *Limiter) failed(tenantID string, tl limits.Limits, keyID string, kl limits.Limits, tokens int64) (limits.Ticket, limits.Status, limits.Refusal, bool) {
	if l.cfg.Fail == FailClosed {
		l.stats.refusedDown.Add(1)
		retry := l.redis.Remaining(l.wallNow())
		return limits.Ticket{}, limits.Status{}, limits.Refusal{Scope: limits.ScopeTenant, Unavailable: true, RetryAfter: max(retry, time.Second)}, false
	}
	l.stats.fallbacks.Add(1)
	return l.local.Admit(tenantID, tl, keyID, kl, tokens)
}

// lease is one admission held in Redis.
type lease struct {
	l          *Limiter
	keys       []string
	id         string
	charged    int64
	ttpm, ktpm int64
}

var _ limits.Lease = (*lease)(nil)

// Release frees the lease's slots and corrects its token charge; a failed
// call is logged and counted (the slots then expire after LeaseTTL and the
// correction is lost).
func (ls *lease) Release(tokens int64, known bool) {
	l := ls.l
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
	delta, k := int64(0), 0
	if known {
		delta, k = ls.charged-tokens, 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	if err := releaseScript.Run(ctx, l.rdb, ls.keys, l.nowArg(), l.cfg.Window.Milliseconds(), ls.id, k, delta, ls.ttpm, ls.ktpm).Err(); err != nil {
		l.stats.releaseErrors.Add(1)
		l.log.Warn("redis rate limiter: release failed; the lease expires by itself", slog.String("error", err.Error()))
	}
}

// Live is the number of this process's unreleased leases.
func (l *Limiter) Live() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases)
}

// Run renews this process's live leases every LeaseTTL/3 until ctx ends.
func (l *Limiter) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.Renew(ctx)
		}
	}
}

// Renew extends every live lease of this process once, in one pipeline.
func (l *Limiter) Renew(ctx context.Context) {
	l.mu.Lock()
	live := make([]*lease, 0, len(l.leases))
	for ls := range l.leases {
		live = append(live, ls)
	}
	l.mu.Unlock()
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	ttl := l.cfg.LeaseTTL.Milliseconds()
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ls := range live {
			renewScript.Eval(ctx, p, ls.keys[2:], l.nowArg(), ttl, ls.id)
		}
		return nil
	})
	if err != nil {
		l.stats.renewErrors.Add(1)
		l.log.Warn("redis rate limiter: lease renewal failed", slog.String("error", err.Error()), slog.Int("leases", len(live)))
	}
}

// randomID names a replica that was given no name.
func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
