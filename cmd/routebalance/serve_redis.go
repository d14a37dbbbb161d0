package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/billing/redisspend"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/owner"
	"github.com/routebalance/routebalance/routing/respcache"
	"github.com/routebalance/routebalance/tenants/limits/redislimit"
)

// redisFlags are serve's settings of the state shared by replicas.
type redisFlags struct {
	url     string
	prefix  string
	fail    string
	timeout time.Duration
	// The owner lease (routing/owner): one replica schedules each cluster.
	ownerLease   bool
	ownerTTL     time.Duration
	advertiseURL string
	replicaID    string
}

// register adds the flags to fs.
func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "redis-url", env("REDIS_URL", ""), "Redis URL (redis://[:password@]host:6379/db, rediss:// for TLS) for rate limits and budgets shared by every replica; empty enforces them per replica (env ROUTEBALANCE_REDIS_URL)")
	fs.StringVar(&r.prefix, "redis-prefix", env("REDIS_PREFIX", "rb"), "prefix of every Redis key (<prefix>:lim:…, <prefix>:spend:…), so deployments can share one Redis (env ROUTEBALANCE_REDIS_PREFIX)")
	fs.StringVar(&r.fail, "redis-fail", env("REDIS_FAIL", string(redislimit.FailOpen)), "when Redis is unreachable: open (each replica enforces limits and budgets on its own view) or closed (limited or budgeted requests get 503) (env ROUTEBALANCE_REDIS_FAIL)")
	d, _ := time.ParseDuration(env("REDIS_TIMEOUT", "250ms"))
	fs.DurationVar(&r.timeout, "redis-timeout", d, "bound on one Redis call before the fail mode applies (env ROUTEBALANCE_REDIS_TIMEOUT)")
	fs.BoolVar(&r.ownerLease, "owner-lease", envBool("OWNER_LEASE", true), "with --redis-url: schedule each cluster on one owner replica (a lease in Redis) and forward its requests there from the other replicas; false: every replica schedules what it receives (env ROUTEBALANCE_OWNER_LEASE)")
	ttl, _ := time.ParseDuration(env("OWNER_LEASE_TTL", owner.DefaultConfig().TTL.String()))
	fs.DurationVar(&r.ownerTTL, "owner-lease-ttl", ttl, "lifetime of an owner lease, renewed every third of it: a crashed owner's clusters move within it (env ROUTEBALANCE_OWNER_LEASE_TTL)")
	fs.StringVar(&r.advertiseURL, "advertise-url", env("ADVERTISE_URL", ""), "base URL the other replicas reach this one at (http://<pod-ip>:8080; the Helm chart sets it from status.podIP); empty: http://<--addr> when --addr names an address, else this replica owns no cluster (env ROUTEBALANCE_ADVERTISE_URL)")
	fs.StringVar(&r.replicaID, "replica-id", env("REPLICA_ID", ""), "this replica's name in owner leases and X-RouteBalance-Replica (the Helm chart sets the pod name); empty: <hostname>-<random> (env ROUTEBALANCE_REPLICA_ID)")
}

// shared is what the replicas share through Redis; nil without --redis-url.
type shared struct {
	client   *redis.Client
	limiter  *redislimit.Limiter
	counters *redisspend.Counters
}

// newShared connects to Redis (a failed ping is logged, not fatal: the fail
// mode covers an outage at start as at any other time).
func newShared(ctx context.Context, f redisFlags, log *slog.Logger) (*shared, error) {
	if f.url == "" {
		return nil, nil
	}
	fail, err := redislimit.ParseFailMode(f.fail)
	if err != nil {
		return nil, fmt.Errorf("--redis-fail: %w", err)
	}
	if f.prefix == "" {
		return nil, fmt.Errorf("--redis-prefix must not be empty")
	}
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--redis-timeout must be positive")
	}
	opt, err := redis.ParseURL(f.url)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	// Fail fast, never retry a script (a retried admission could charge
	// twice), respect the per-call deadlines.
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = f.timeout, f.timeout, f.timeout
	opt.DialerRetries = 1
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		log.Warn("redis unreachable at start; limits and budgets follow --redis-fail until it answers", slog.String("addr", opt.Addr), slog.String("fail", string(fail)), slog.String("error", err.Error()))
	}
	lim, err := redislimit.New(redislimit.Config{Prefix: f.prefix + ":lim", Timeout: f.timeout, Fail: fail}, c, nil, log)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	cnt, err := redisspend.New(redisspend.Config{Prefix: f.prefix + ":spend", Timeout: f.timeout, Fail: redisspend.FailMode(fail)}, c, nil, log)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	log.Info("limits and budgets shared through redis", slog.String("addr", opt.Addr), slog.Int("db", opt.DB), slog.String("fail", string(fail)))
	return &shared{client: c, limiter: lim, counters: cnt}, nil
}

// newResponseCache builds the --response-cache store: nil for "off", the
// in-process LRU for "memory", the shared Redis store for "redis" (which
// needs --redis-url).
func newResponseCache(mode string, ttl time.Duration, sh *shared, prefix string) (dispatch.Cache, error) {
	cfg := respcache.Config{TTL: ttl}
	switch mode {
	case "", "off":
		return nil, nil
	case "memory":
		return respcache.NewLRU(cfg, nil)
	case "redis":
		if sh == nil {
			return nil, errors.New("--response-cache redis needs --redis-url")
		}
		return respcache.NewRedis(sh.client, prefix+":cache:", cfg)
	}
	return nil, fmt.Errorf("--response-cache must be off, memory or redis, got %q", mode)
}

// replicaID is --replica-id, or <hostname>-<random> (several serve
// processes on one host must differ).
func replicaID(flagged string) string {
	if flagged != "" {
		return flagged
	}
	h, err := os.Hostname()
	if err != nil || h == "" || strings.ContainsAny(h, "@ \t\r\n") {
		h = "replica"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return h + "-" + hex.EncodeToString(b[:])
}

// advertiseURL is --advertise-url, or http://<addr> when the listener is
// bound to one address; "" for an unspecified address (0.0.0.0, ::),
// which the other replicas cannot dial.
func advertiseURL(flagged string, addr net.Addr) string {
	if flagged != "" {
		return flagged
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return ""
	}
	return "http://" + tcp.String()
}

// newOwnerLeases makes the owner leases of this replica (nil without
// Redis or with --owner-lease=false).
func newOwnerLeases(sh *shared, f redisFlags, id string, addr net.Addr, log *slog.Logger) (*owner.Leases, error) {
	if sh == nil || !f.ownerLease {
		return nil, nil
	}
	u := advertiseURL(f.advertiseURL, addr)
	if u == "" {
		log.Warn("owner leases: no --advertise-url and --addr is not one address; this replica forwards to owners but owns no cluster", slog.String("addr", addr.String()))
	}
	l, err := owner.New(owner.Config{Prefix: f.prefix + ":own", ID: id, URL: u, TTL: f.ownerTTL, Timeout: f.timeout}, sh.client, nil, log)
	if err != nil {
		return nil, fmt.Errorf("owner lease: %w", err)
	}
	log.Info("clusters scheduled by their owner replica (lease in redis)", slog.String("replica", id), slog.String("advertise_url", u), slog.Duration("lease_ttl", f.ownerTTL))
	return l, nil
}
