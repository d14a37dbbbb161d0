// Package owner gives each cluster one owner replica, by a lease in Redis,
// so that every scheduling decision of a cluster is made by one scheduler
// (routing/schedule/README.md, "Several replicas: herding and the owner
// lease"). A replica that receives a request for a cluster owned by
// another live replica forwards it there (api); the forwarded request
// carries an X-RouteBalance-Forwarded header signed with the replicas'
// shared secret (Signer).
//
// The lease of cluster C is the Redis string <Prefix>:C whose value is
// "<replica-id>@<advertised-url>", set with SET NX PX TTL by the first
// replica that needs an owner for C and finds none, renewed every Renew by
// its holder with a compare-and-set script, deleted (compare-and-delete)
// when the holder stops or has seen no request for C in Idle. A holder
// claims ownership only until its local deadline — the start of its last
// successful acquire or renewal plus TTL minus a margin — so it stops
// claiming before Redis lets another replica take the lease, and at once
// when a renewal finds the lease gone or someone else's.
//
// Which replica owns a cluster: the first to see a request for it while
// the lease is free. There is no cap per replica: with requests spread
// over the replicas by a Service, leases spread like first arrivals do.
//
// Without Redis (an error, a timeout) Lookup answers "route here" and
// does not try Redis again for Backoff: the replicas then schedule on
// their own, as without the lease (herding, never an error).
package owner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/routing"
)

// Config holds the lease settings; zero fields take the defaults.
type Config struct {
	// Prefix starts every lease key (default "rb:own"); tests give each
	// run its own.
	Prefix string
	// ID names this replica in lease values (default a random id); it
	// must not contain '@' or whitespace.
	ID string
	// URL is this replica's base URL as the other replicas reach it
	// (http://<pod-ip>:<port>). Empty: this replica never takes a lease;
	// it forwards to owners and routes clusters without one itself.
	URL string
	// TTL is the lease's lifetime in Redis (default 10 s): a crashed
	// owner's clusters are taken over within it.
	TTL time.Duration
	// Renew is the period of the holder's renewals (default TTL/3).
	Renew time.Duration
	// Idle releases a held lease after that long without a request for
	// its cluster (default 5 min).
	Idle time.Duration
	// Recheck is how long a replica trusts the other owner it read before
	// reading the lease again (default 1 s).
	Recheck time.Duration
	// Down is how long a replica routes a cluster itself after the owner
	// could not be reached (default 1 s).
	Down time.Duration
	// Timeout bounds one Redis call (default 250 ms).
	Timeout time.Duration
	// Backoff is how long Redis is not tried after a failed call (default
	// 1 s).
	Backoff time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Prefix: "rb:own", TTL: 10 * time.Second, Idle: 5 * time.Minute, Recheck: time.Second,
		Down: time.Second, Timeout: 250 * time.Millisecond, Backoff: time.Second}
}

// Validate reports negative durations, a renewal period not below the
// TTL, a replica id that cannot be stored, and a URL that is not
// http(s)://host.
func (c Config) Validate() error {
	for _, d := range []time.Duration{c.TTL, c.Renew, c.Idle, c.Recheck, c.Down, c.Timeout, c.Backoff} {
		if d < 0 {
			return errors.New("owner: durations must be >= 0")
		}
	}
	if c.TTL > 0 && c.TTL < 30*time.Millisecond {
		return errors.New("owner: lease ttl must be >= 30ms")
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultConfig().TTL
	}
	if c.Renew >= ttl {
		return fmt.Errorf("owner: renew period %v must be below the lease ttl %v", c.Renew, ttl)
	}
	if strings.ContainsAny(c.ID, "@ \t\r\n") {
		return fmt.Errorf("owner: replica id %q must not contain '@' or whitespace", c.ID)
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(c.URL, " \t\r\n") {
			return fmt.Errorf("owner: advertised url %q must be http(s)://host[:port]", c.URL)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.TTL == 0 {
		c.TTL = d.TTL
	}
	if c.Renew == 0 {
		c.Renew = c.TTL / 3
	}
	if c.Idle == 0 {
		c.Idle = d.Idle
	}
	if c.Recheck == 0 {
		c.Recheck = d.Recheck
	}
	if c.Down == 0 {
		c.Down = d.Down
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.Backoff == 0 {
		c.Backoff = d.Backoff
	}
	if c.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c
}

// margin is how much earlier than Redis a holder stops claiming its
// lease: a tenth of the TTL, at most 1 s (clock-rate differences between
// the replica and Redis over one TTL are far smaller).
func (c Config) margin() time.Duration { return min(c.TTL/10, time.Second) }

// Replica is a lease holder as stored in the lease value.
type Replica struct {
	ID  string
	URL string
}

// String is the lease value, "<id>@<url>".
func (r Replica) String() string { return r.ID + "@" + r.URL }

// parseReplica reads a lease value.
func parseReplica(v string) (Replica, bool) {
	id, u, ok := strings.Cut(v, "@")
	if !ok || id == "" || u == "" {
		return Replica{}, false
	}
	return Replica{ID: id, URL: u}, true
}

// Client is the part of a go-redis client the leases use.
type Client interface {
	redis.Scripter
}

// entry is what this replica knows of one cluster's lease.
type entry struct {
	mine      bool
	owner     Replica   // !mine: the holder read from Redis
	until     time.Time // mine: claim deadline; !mine: trust owner until then
	downUntil time.Time // !mine: owner unreachable, route here until then
	lastUsed  time.Time // mine: last request for the cluster
}

// Leases is this replica's view of the cluster leases. It is safe for
// concurrent use; Run must be running for held leases to be renewed.
type Leases struct {
	cfg   Config
	rdb   Client
	clock routing.Clock
	log   *slog.Logger
	self  Replica

	downUntil atomic.Int64 // unix ns; Redis is not tried before it
	stopped   atomic.Bool  // Stop was called: take no lease

	mu sync.Mutex
	m  map[string]*entry

	stats struct{ acquired, lost, released, renewErrors, redisErrors atomic.Int64 }
}

// New returns the leases of the replica cfg names, over rdb. clock nil is
// the wall clock (the lease TTL itself runs on Redis's clock).
func New(cfg Config, rdb Client, clock routing.Clock, log *slog.Logger) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("owner: nil redis client")
	}
	cfg = cfg.withDefaults()
	if clock == nil {
		clock = routing.WallClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Leases{cfg: cfg, rdb: rdb, clock: clock, log: log, self: Replica{ID: cfg.ID, URL: cfg.URL}, m: map[string]*entry{}}, nil
}

// Self is this replica as it appears in its leases.
func (l *Leases) Self() Replica { return l.self }

// key is the Redis key of cluster's lease.
func (l *Leases) key(cluster string) string { return l.cfg.Prefix + ":" + cluster }

// Lookup returns the replica that schedules cluster's requests: forward
// is true when that is another live replica, reached at owner.URL; false
// means route here (this replica holds the lease, took it now, cannot
// hold leases and sees none held, the owner was unreachable within Down,
// or Redis failed). Called by the request path of every replica for
// every request; one Redis round trip when the cached answer is older
// than Recheck (or the lease was never seen), none otherwise.
func (l *Leases) Lookup(ctx context.Context, cluster string) (owner Replica, forward bool) {
	now := l.clock.Now()
	l.mu.Lock()
	e := l.m[cluster]
	if e != nil {
		switch {
		case e.mine && now.Before(e.until):
			e.lastUsed = now
			l.mu.Unlock()
			return l.self, false
		case !e.mine && now.Before(e.downUntil):
			l.mu.Unlock()
			return Replica{}, false
		case !e.mine && now.Before(e.until):
			o := e.owner
			l.mu.Unlock()
			return o, true
		}
	}
	l.mu.Unlock()
	if now.UnixNano() < l.downUntil.Load() {
		return Replica{}, false
	}
	v, err := l.acquire(ctx, cluster, now)
	if err != nil {
		return Replica{}, false
	}
	if v == "" { // free, and this replica may not hold leases
		l.mu.Lock()
		l.m[cluster] = &entry{until: now.Add(l.cfg.Recheck)}
		l.mu.Unlock()
		return Replica{}, false
	}
	if v == l.self.String() {
		l.mu.Lock()
		if e := l.m[cluster]; e == nil || !e.mine {
			l.stats.acquired.Add(1)
			l.log.Info("took the owner lease of a cluster", slog.String("cluster", cluster), slog.String("replica", l.self.ID))
		}
		l.m[cluster] = &entry{mine: true, until: now.Add(l.cfg.TTL - l.cfg.margin()), lastUsed: now}
		l.mu.Unlock()
		return l.self, false
	}
	o, ok := parseReplica(v)
	l.mu.Lock()
	if !ok { // not a lease value: route here, read it again later
		l.m[cluster] = &entry{until: now.Add(l.cfg.Recheck)}
		l.mu.Unlock()
		return Replica{}, false
	}
	l.m[cluster] = &entry{owner: o, until: now.Add(l.cfg.Recheck)}
	l.mu.Unlock()
	return o, true
}

// Unreachable tells the leases that owner could not be reached for
// cluster: the cluster is routed here for Down (then the lease is read
// again). Called by the forwarding step after a failed connection.
func (l *Leases) Unreachable(cluster string, owner Replica) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[cluster]; e != nil && !e.mine && e.owner == owner {
		e.downUntil = now.Add(l.cfg.Down)
		e.until = e.downUntil // read the lease again after Down
	}
}

// Touch records a request for cluster that reached this replica without
// a Lookup (forwarded here by another replica), so a held lease is not
// released as idle while the cluster's traffic arrives only by forwards.
func (l *Leases) Touch(cluster string) {
	now := l.clock.Now()
	l.mu.Lock()
	if e := l.m[cluster]; e != nil && e.mine {
		e.lastUsed = now
	}
	l.mu.Unlock()
}

// Holds reports whether this replica currently claims cluster (tests,
// diagnostics).
func (l *Leases) Holds(cluster string) bool {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[cluster]
	return e != nil && e.mine && now.Before(e.until)
}

// acquire runs the take-or-read script; "" means the lease is free and
// this replica does not take leases.
func (l *Leases) acquire(ctx context.Context, cluster string, now time.Time) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	me := ""
	if l.self.URL != "" && !l.stopped.Load() {
		me = l.self.String()
	}
	v, err := acquireScript.Run(ctx, l.rdb, []string{l.key(cluster)}, me, l.cfg.TTL.Milliseconds()).Text()
	if err != nil && !errors.Is(err, redis.Nil) {
		l.redisFailed("read the owner lease", err, now)
		return "", err
	}
	return v, nil
}

// redisFailed counts a failed call, logs it and stops trying Redis for
// Backoff (so at most one line per Backoff).
func (l *Leases) redisFailed(what string, err error, now time.Time) {
	l.stats.redisErrors.Add(1)
	until := now.Add(l.cfg.Backoff).UnixNano()
	if prev := l.downUntil.Load(); prev < now.UnixNano() && l.downUntil.CompareAndSwap(prev, until) {
		l.log.Warn("owner leases: redis unreachable; clusters are routed by whichever replica receives them", slog.String("op", what), slog.String("error", err.Error()), slog.Duration("retry_in", l.cfg.Backoff))
	}
}

// Run renews the held leases every Renew and releases the idle ones until
// ctx ends, then releases every held lease (so another replica takes over
// at once instead of after TTL). It returns nil.
func (l *Leases) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			l.ReleaseAll(rctx)
			cancel()
			return nil
		case <-t.C:
			l.renew(ctx)
		}
	}
}

// renew renews each held lease, dropping those found lost and releasing
// those idle for Idle.
func (l *Leases) renew(ctx context.Context) {
	now := l.clock.Now()
	l.mu.Lock()
	var keep, idle []string
	for c, e := range l.m {
		switch {
		case !e.mine:
			if now.Sub(e.until) > l.cfg.Idle { // forget remote owners not asked about
				delete(l.m, c)
			}
		case now.Sub(e.lastUsed) >= l.cfg.Idle || !now.Before(e.until):
			// Idle, or past its claim deadline (renewals failed): stop
			// claiming and let it go.
			delete(l.m, c)
			idle = append(idle, c)
		default:
			keep = append(keep, c)
		}
	}
	l.mu.Unlock()
	for _, c := range idle {
		l.release(ctx, c)
	}
	me := l.self.String()
	for _, c := range keep {
		start := l.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		ok, err := renewScript.Run(rctx, l.rdb, []string{l.key(c)}, me, l.cfg.TTL.Milliseconds()).Int()
		cancel()
		if err != nil {
			// Keep claiming until the local deadline: Redis may still hold
			// the lease; if not, the deadline ends the claim first.
			l.stats.renewErrors.Add(1)
			l.redisFailed("renew an owner lease", err, start)
			continue
		}
		l.mu.Lock()
		e := l.m[c]
		if e == nil || !e.mine {
			l.mu.Unlock()
			continue
		}
		if ok == 1 {
			e.until = start.Add(l.cfg.TTL - l.cfg.margin())
			l.mu.Unlock()
			continue
		}
		delete(l.m, c)
		l.mu.Unlock()
		l.stats.lost.Add(1)
		l.log.Warn("lost the owner lease of a cluster; it is no longer scheduled here", slog.String("cluster", c), slog.String("replica", l.self.ID))
	}
}

// Stop makes this replica take no lease from now on and releases those it
// holds, so the other replicas take its clusters over at once. Called at
// the start of a shutdown, while requests still drain (they are then
// forwarded to the new owners or routed here).
func (l *Leases) Stop(ctx context.Context) {
	l.stopped.Store(true)
	l.ReleaseAll(ctx)
}

// ReleaseAll stops claiming every held lease and deletes those still this
// replica's in Redis. Called at shutdown (by Run).
func (l *Leases) ReleaseAll(ctx context.Context) {
	l.mu.Lock()
	var held []string
	for c, e := range l.m {
		if e.mine {
			held = append(held, c)
		}
		delete(l.m, c)
	}
	l.mu.Unlock()
	for _, c := range held {
		l.release(ctx, c)
	}
}

// release deletes cluster's lease if it is still this replica's.
func (l *Leases) release(ctx context.Context, cluster string) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	if err := releaseScript.Run(rctx, l.rdb, []string{l.key(cluster)}, l.self.String()).Err(); err != nil {
		l.redisFailed("release an owner lease", err, l.clock.Now())
		return
	}
	l.stats.released.Add(1)
}

// Stats counts what the leases did since they were made.
type Stats struct {
	// Held is the leases this replica claims now.
	Held int
	// Acquired, Lost and Released count leases taken, found taken by
	// another replica (or gone) at renewal, and given up (idle, shutdown).
	Acquired, Lost, Released int64
	// RedisErrors counts failed Redis calls (RenewErrors of them renewals).
	RedisErrors, RenewErrors int64
}

// Stats returns the counters.
func (l *Leases) Stats() Stats {
	now := l.clock.Now()
	l.mu.Lock()
	held := 0
	for _, e := range l.m {
		if e.mine && now.Before(e.until) {
			held++
		}
	}
	l.mu.Unlock()
	return Stats{Held: held, Acquired: l.stats.acquired.Load(), Lost: l.stats.lost.Load(), Released: l.stats.released.Load(),
		RedisErrors: l.stats.redisErrors.Load(), RenewErrors: l.stats.renewErrors.Load()}
}

// acquireScript takes the free lease KEYS[1] for ARGV[1] (unless ARGV[1]
// is empty) for ARGV[2] ms — or extends it when ARGV[1] holds it already
// (a claim past its local deadline) — and returns its holder ("" when
// free).
var acquireScript = redis.NewScript(`
if ARGV[1] ~= '' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return ARGV[1]
end
local v = redis.call('GET', KEYS[1])
if not v then return '' end
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return v
`)

// renewScript extends KEYS[1] by ARGV[2] ms if ARGV[1] still holds it:
// 1 renewed, 0 lost.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes KEYS[1] if ARGV[1] holds it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
