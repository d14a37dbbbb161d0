package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/routebalance/routebalance/api"
	"github.com/routebalance/routebalance/billing/redisspend"
	"github.com/routebalance/routebalance/migrations"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/estimate"
	"github.com/routebalance/routebalance/routing/latency"
	"github.com/routebalance/routebalance/routing/owner"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/quality"
	qualitysql "github.com/routebalance/routebalance/routing/quality/sqlstore"
	"github.com/routebalance/routebalance/routing/respcache"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/limits"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// serveConfig is everything `routebalance serve` reads from flags and env.
type serveConfig struct {
	addr            string
	dataDir         string
	databaseURL     string
	allowPrivate    bool
	jwtSecret       string
	encryptionKey   string
	jwtPrevious     string
	encPrevious     string
	bodyLimit       int
	maxHeaderBytes  int
	shutdownTimeout time.Duration
	maxAttempts     int
	cacheMode       string
	cacheTTL        time.Duration
	requestTimeout  time.Duration
	autopilotEvery  time.Duration
	whatIfTimeout   time.Duration // 0: sim's default
	autopilotReplay bool
	logLevel        slog.Level
	indexDir        string
	latencyDir      string
	billing         billingFlags
	metricsAddr     string
	pprofAddr       string
	metricsToken    string
	trustedProxies  []string
	tracing         telemetry.TracingConfig
	redis           redisFlags
	qdrant          qdrantFlags
}

// env returns the value of ROUTEBALANCE_<name>, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv("ROUTEBALANCE_" + name); ok {
		return v
	}
	return def
}

func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv("ROUTEBALANCE_" + name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// commonFlags registers the database flags shared by serve and migrate.
func commonFlags(fs *flag.FlagSet, dataDir, databaseURL *string) {
	fs.StringVar(dataDir, "data-dir", env("DATA_DIR", "./data"), "directory for the SQLite database and generated secrets (env ROUTEBALANCE_DATA_DIR)")
	def := env("DATABASE_URL", os.Getenv("DATABASE_URL"))
	fs.StringVar(databaseURL, "database-url", def, "Postgres URL (postgres://…); empty uses SQLite in the data dir (env ROUTEBALANCE_DATABASE_URL or DATABASE_URL)")
}

func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", env("ADDR", "127.0.0.1:8080"), "listen address (env ROUTEBALANCE_ADDR)")
	commonFlags(fs, &c.dataDir, &c.databaseURL)
	fs.BoolVar(&c.allowPrivate, "allow-private-endpoints", envBool("ALLOW_PRIVATE_ENDPOINTS", false), "let tenants register loopback and private-range instance URLs (link-local and metadata addresses are always refused) (env ROUTEBALANCE_ALLOW_PRIVATE_ENDPOINTS)")
	fs.StringVar(&c.jwtSecret, "jwt-secret", env("JWT_SECRET", ""), "HS256 secret for sessions, at least 32 bytes; generated into <data-dir>/jwt.secret when empty (env ROUTEBALANCE_JWT_SECRET)")
	fs.StringVar(&c.encryptionKey, "encryption-key", env("ENCRYPTION_KEY", ""), "AES-256 key for upstream credentials, 32 bytes as base64 or hex; generated into <data-dir>/encryption.key when empty (env ROUTEBALANCE_ENCRYPTION_KEY)")
	previousKeyFlags(fs, &c.jwtPrevious, &c.encPrevious)
	limit, _ := strconv.Atoi(env("BODY_LIMIT", strconv.Itoa(api.DefaultConfig().BodyLimit)))
	fs.IntVar(&c.bodyLimit, "body-limit", limit, "largest request body in bytes (env ROUTEBALANCE_BODY_LIMIT)")
	headLimit, _ := strconv.Atoi(env("MAX_HEADER_BYTES", strconv.Itoa(api.DefaultConfig().MaxHeaderBytes)))
	fs.IntVar(&c.maxHeaderBytes, "max-header-bytes", headLimit, "largest request line plus headers in bytes; larger is 431 headers_too_large; each connection holds a read buffer this size (env ROUTEBALANCE_MAX_HEADER_BYTES)")
	attempts, _ := strconv.Atoi(env("MAX_ATTEMPTS", strconv.Itoa(api.DefaultInferenceConfig().MaxAttempts)))
	fs.IntVar(&c.maxAttempts, "max-attempts", attempts, "instances one inference request may be opened on: the first and the fallbacks after a connection failure, 5xx or 429 before the first byte (auto requests fall back to another model) (env ROUTEBALANCE_MAX_ATTEMPTS)")
	fs.StringVar(&c.cacheMode, "response-cache", env("RESPONSE_CACHE", "off"), "exact-match cache of deterministic (temperature 0), non-streamed answers, per tenant: off, memory (this process's LRU) or redis (shared; needs --redis-url) (env ROUTEBALANCE_RESPONSE_CACHE)")
	cttl, _ := time.ParseDuration(env("RESPONSE_CACHE_TTL", respcache.DefaultTTL.String()))
	fs.DurationVar(&c.cacheTTL, "response-cache-ttl", cttl, "how long a cached answer is served (env ROUTEBALANCE_RESPONSE_CACHE_TTL)")
	grace, _ := time.ParseDuration(env("SHUTDOWN_TIMEOUT", "30s"))
	reqTimeout, _ := time.ParseDuration(env("REQUEST_TIMEOUT", api.DefaultConfig().RequestTimeout.String()))
	fs.DurationVar(&c.requestTimeout, "request-timeout", reqTimeout, "deadline of one request, streams included: an upstream still silent or streaming then is cut off and the request metered as it stands (env ROUTEBALANCE_REQUEST_TIMEOUT)")
	apEvery, _ := time.ParseDuration(env("AUTOPILOT_INTERVAL", "5s"))
	fs.DurationVar(&c.autopilotEvery, "autopilot-interval", apEvery, "control interval of the autopilot preset's controllers (routing/autopilot) (env ROUTEBALANCE_AUTOPILOT_INTERVAL)")
	wiTimeout, _ := time.ParseDuration(env("WHATIF_TIMEOUT", sim.DefaultWhatIfConfig().Timeout.String()))
	fs.DurationVar(&c.whatIfTimeout, "whatif-timeout", wiTimeout, "wall-clock budget of one what-if replay (POST /api/v1/clusters/{id}/whatif); past it the preview answers 503 whatif_timeout (env ROUTEBALANCE_WHATIF_TIMEOUT)")
	fs.BoolVar(&c.autopilotReplay, "autopilot-predict", env("AUTOPILOT_PREDICT", "true") != "false", "the autopilot's model-predictive part: each step replays the cluster's recent traffic from the live fleet state for each candidate weight vector (routing/sim.LivePredictor); false: feedback only (env ROUTEBALANCE_AUTOPILOT_PREDICT)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", grace, "how long in-flight requests and streams may run after SIGINT/SIGTERM (env ROUTEBALANCE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.indexDir, "index-dir", env("INDEX_DIR", ""), "quality/length index written by routebalance index build; empty routes on the instances' quality priors (env ROUTEBALANCE_INDEX_DIR)")
	fs.StringVar(&c.latencyDir, "latency-dir", env("LATENCY_DIR", ""), "directory of <tier>.tpot.bin/<tier>.ttft.bin XGBoost models from scripts/train_tpot.py; tiers without one use the online analytic model (env ROUTEBALANCE_LATENCY_DIR)")
	addBillingFlags(fs, &c.billing)
	fs.StringVar(&c.pprofAddr, "pprof-addr", env("PPROF_ADDR", ""), "serve Go's /debug/pprof/ profiles on this address (keep it private: loopback or a debug port); empty turns them off (env ROUTEBALANCE_PPROF_ADDR)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("METRICS_ADDR", defaultMetricsAddr), "serve Prometheus /metrics on this address, its own listener (loopback by default; empty: none) (env ROUTEBALANCE_METRICS_ADDR)")
	fs.StringVar(&c.metricsToken, "metrics-token", env("METRICS_TOKEN", ""), "also serve /metrics on the main listener to scrapes bearing this token (Authorization: Bearer <token>), and require it on --metrics-addr too; empty: /metrics is never on the main listener (env ROUTEBALANCE_METRICS_TOKEN)")
	c.trustedProxies = splitList(env("TRUSTED_PROXIES", ""))
	fs.Func("trusted-proxies", "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For names the client (login throttling counts per client address); empty trusts no header (env ROUTEBALANCE_TRUSTED_PROXIES)", func(v string) error {
		c.trustedProxies = splitList(v)
		return nil
	})
	c.tracing = telemetry.DefaultTracingConfig()
	fs.StringVar(&c.tracing.Endpoint, "otlp-endpoint", env("OTLP_ENDPOINT", ""), "export OpenTelemetry traces by OTLP/HTTP to this collector URL, e.g. http://otel-collector:4318 (/v1/traces is appended to a bare URL); empty turns tracing off (env ROUTEBALANCE_OTLP_ENDPOINT)")
	fs.StringVar(&c.tracing.ServiceName, "otlp-service-name", env("OTLP_SERVICE_NAME", c.tracing.ServiceName), "service.name of the exported traces (env ROUTEBALANCE_OTLP_SERVICE_NAME)")
	ratio := env("TRACE_SAMPLE_RATIO", "1")
	fs.Func("trace-sample-ratio", "fraction of new traces kept, in (0, 1]; a sampled incoming parent is always followed (env ROUTEBALANCE_TRACE_SAMPLE_RATIO)", func(s string) error { ratio = s; return nil })
	c.redis.register(fs)
	c.qdrant.register(fs)
	level := env("LOG_LEVEL", "info")
	fs.Func("log-level", "debug, info, warn or error (env ROUTEBALANCE_LOG_LEVEL)", func(s string) error { level = s; return nil })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected arguments %q\n", fs.Args())
		return c, errUsage
	}
	if err := c.logLevel.UnmarshalText([]byte(level)); err != nil {
		return c, fmt.Errorf("--log-level: %w", err)
	}
	r, err := strconv.ParseFloat(ratio, 64)
	if err != nil || r <= 0 {
		return c, fmt.Errorf("--trace-sample-ratio: %q is not a number in (0, 1]", ratio)
	}
	c.tracing.SampleRatio = r
	if err := c.tracing.Validate(); err != nil {
		return c, fmt.Errorf("--otlp-endpoint/--trace-sample-ratio: %w", err)
	}
	if c.bodyLimit <= 0 || c.maxHeaderBytes <= 0 || c.shutdownTimeout <= 0 || c.requestTimeout <= 0 || c.autopilotEvery <= 0 {
		return c, errors.New("--body-limit, --max-header-bytes, --shutdown-timeout, --request-timeout and --autopilot-interval must be positive")
	}
	return c, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// database is the open storage of either engine.
type database struct {
	engine string // "postgres" or "sqlite"
	pool   *pgxpool.Pool
	sqlite *sql.DB
}

// openDatabase connects to Postgres when url is set, else opens (creating)
// <dataDir>/routebalance.db.
func openDatabase(ctx context.Context, dataDir, url string) (*database, error) {
	if url != "" {
		if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
			return nil, errors.New("--database-url must be a postgres:// URL")
		}
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := pool.Ping(pctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
		return &database{engine: "postgres", pool: pool}, nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	db, err := sqlstore.OpenSQLite(filepath.Join(dataDir, "routebalance.db"))
	if err != nil {
		return nil, err
	}
	return &database{engine: "sqlite", sqlite: db}, nil
}

func (d *database) migrate(ctx context.Context) ([]int, error) {
	if d.pool != nil {
		return migrations.ApplyPostgres(ctx, d.pool)
	}
	return migrations.ApplySQLite(ctx, d.sqlite)
}

// ready reports whether the database answers and nothing is pending.
func (d *database) ready(ctx context.Context) error {
	var pending []int
	var err error
	if d.pool != nil {
		pending, err = migrations.PendingPostgres(ctx, d.pool)
	} else {
		pending, err = migrations.PendingSQLite(ctx, d.sqlite)
	}
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if len(pending) > 0 {
		return fmt.Errorf("migrations pending: %v", pending)
	}
	return nil
}

func (d *database) tenantStore() *sqlstore.Store {
	if d.pool != nil {
		return sqlstore.NewPostgres(d.pool)
	}
	return sqlstore.NewSQLite(d.sqlite)
}

// qualityStore keeps clusters' uploaded quality data in the database.
func (d *database) qualityStore() *qualitysql.Store {
	if d.pool != nil {
		return qualitysql.NewPostgres(d.pool)
	}
	return qualitysql.NewSQLite(d.sqlite)
}

// qualityBinder gives the scheduler each cluster's estimator
// (schedule.ClusterBinder); a core without a binding would get the
// operator-wide estimate.
type qualityBinder struct {
	*quality.ClusterEstimator // of no cluster: the operator-wide estimate
	store                     *quality.Store
}

func newQualityBinder(s *quality.Store) qualityBinder {
	return qualityBinder{ClusterEstimator: s.ForCluster(""), store: s}
}

func (b qualityBinder) ForCluster(clusterID string) schedule.Estimator {
	return b.store.ForCluster(clusterID)
}

func (d *database) close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.sqlite != nil {
		d.sqlite.Close()
	}
}

// loadSecret returns the decoded flag value, or the content of
// <dataDir>/<file>, creating it with n random bytes (mode 0600) on first
// run. Values are base64 (standard or URL, padded or not) or hex.
func loadSecret(flagValue, dataDir, file string, n int, log *slog.Logger) ([]byte, error) {
	if flagValue != "" {
		return decodeSecret(flagValue)
	}
	path := filepath.Join(dataDir, file)
	b, err := os.ReadFile(path)
	if err == nil {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("secret file is readable by others; chmod 600 it", slog.String("path", path))
		}
		return decodeSecret(strings.TrimSpace(string(b)))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	secret := make([]byte, n)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(secret) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	log.Info("generated secret", slog.String("path", path))
	return secret, nil
}

func decodeSecret(v string) ([]byte, error) {
	// Hex first: a hex string is also valid base64 and would decode wrongly.
	if b, err := hex.DecodeString(v); err == nil && len(b) >= 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil && len(b) >= 32 {
			return b, nil
		}
	}
	if len(v) >= 32 {
		return []byte(v), nil // a long passphrase used as is
	}
	return nil, errors.New("secret must be at least 32 bytes (base64, hex or a 32+ character string)")
}

// upstreamClient returns an HTTP client for calls to tenants' instances
// that refuses, at connect time, every address the endpoint policy refuses
// (DNS rebinding), and follows no redirect (the upstream key must reach the
// registered host:port only). timeout 0 means no overall timeout (streams).
func upstreamClient(p tenants.EndpointPolicy, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: p.DialControl}
	return &http.Client{
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
		},
	}
}

// runServe runs the service until ctx is cancelled (SIGINT/SIGTERM).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	db, err := openDatabase(ctx, cfg.dataDir, cfg.databaseURL)
	if err != nil {
		return err
	}
	defer db.close()
	applied, err := db.migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	log.Info("database ready", slog.String("engine", db.engine), slog.Any("applied", applied))

	jwtSecret, err := loadSecret(cfg.jwtSecret, cfg.dataDir, "jwt.secret", 32, log)
	if err != nil {
		return fmt.Errorf("jwt secret: %w", err)
	}
	encKey, err := loadSecret(cfg.encryptionKey, cfg.dataDir, "encryption.key", 32, log)
	if err != nil {
		return fmt.Errorf("encryption key: %w", err)
	}
	if len(encKey) != 32 {
		return fmt.Errorf("encryption key must be exactly 32 bytes, got %d", len(encKey))
	}
	if db.engine == "postgres" && (cfg.jwtSecret == "" || cfg.encryptionKey == "") {
		log.Warn("secrets come from the data dir; every replica sharing this database needs the same --jwt-secret and --encryption-key")
	}

	sessCfg := tenants.DefaultSessionConfig(jwtSecret)
	if sessCfg.PreviousSecrets, err = decodeSecretList(cfg.jwtPrevious); err != nil {
		return fmt.Errorf("previous jwt secrets: %w", err)
	}
	sessions, err := tenants.NewSessions(sessCfg, nil)
	if err != nil {
		return err
	}
	prevKeys, err := decodeSecretList(cfg.encPrevious)
	if err != nil {
		return fmt.Errorf("previous encryption keys: %w", err)
	}
	sealer, err := tenants.NewSealer(encKey, prevKeys...)
	if err != nil {
		return err
	}
	tcfg := tenants.DefaultConfig()
	tcfg.AllowPrivateEndpoints = cfg.allowPrivate
	store := db.tenantStore()
	defer store.Close()
	svc, err := tenants.NewService(tcfg, tenants.Deps{Store: store, Sessions: sessions, Sealer: sealer, Log: log})
	if err != nil {
		return err
	}

	// Background workers run until the HTTP server has drained, so that
	// requests finishing during shutdown are still metered and recorded.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	workers, bg := errgroup.WithContext(bg)
	workers.Go(func() error { return svc.Run(bg) })
	// Changes committed by other replicas (Postgres NOTIFY) drop this
	// replica's cached key resolutions at once.
	// Watch calls lost each time it (re)starts listening; the first call
	// also says the feed is live (feedLive, awaited before listening).
	feedLive := make(chan struct{})
	var feedOnce sync.Once
	lost := func() {
		svc.InvalidateAll()
		feedOnce.Do(func() { close(feedLive) })
	}
	workers.Go(func() error { return store.Watch(bg, svc.InvalidateTenant, lost) })

	deps := api.Deps{Log: log, AccessLog: stderr, Tenants: svc, Ready: db.ready}

	// Estimators: latency models always (online least squares from the
	// tier priors, plus trained XGBoost models from --latency-dir); the
	// quality/length index when --index-dir names one.
	lat, err := latency.New(latency.Config{})
	if err != nil {
		return fmt.Errorf("latency models: %w", err)
	}
	if cfg.latencyDir != "" {
		tiers, err := lat.LoadXGBDir(cfg.latencyDir)
		if err != nil {
			return err
		}
		log.Info("latency models loaded", slog.String("dir", cfg.latencyDir), slog.Any("tiers", tiers))
	}

	// Scheduler: one Router for every tenant's cluster. Its scrapers and
	// probes dial through the endpoint policy, like every upstream call.
	scfg := schedule.Config{}.WithDefaults()
	sdeps := schedule.Deps{Logger: log, HTTPClient: upstreamClient(svc.Endpoints(), scfg.Fleet.ScrapeTimeout), Latency: lat}
	var knn *estimate.KNN
	if cfg.indexDir != "" {
		if knn, err = estimate.Open(cfg.indexDir, estimate.Config{}); err != nil {
			return fmt.Errorf("--index-dir: %w", err)
		}
		log.Info("quality index loaded", slog.String("dir", cfg.indexDir), slog.Int("prompts", knn.Len()), slog.Any("models", knn.Models()))
	}
	// Each cluster's own quality data (uploads, feedback) in front of the
	// operator-wide index, persisted in the database.
	qdeps := quality.Deps{Log: log, Persist: db.qualityStore()}
	if qdeps.Qdrant, err = cfg.qdrant.open(ctx, log); err != nil {
		return err
	} else if qdeps.Qdrant != nil {
		defer qdeps.Qdrant.Close()
	}
	if err := attachGlobalQdrant(ctx, qdeps.Qdrant, cfg.indexDir, knn, log); err != nil {
		return err
	}
	if knn != nil {
		qdeps.Global = knn
	}
	qstore, err := quality.New(quality.Config{}, qdeps)
	if err != nil {
		return err
	}
	if n, err := qstore.Restore(ctx); err != nil {
		return err
	} else if n > 0 {
		log.Info("cluster quality data restored, indexing", slog.Int("clusters", n))
	}
	workers.Go(func() error { return qstore.Run(bg) })
	// Uploads and deletes taken by another replica are rebuilt or dropped
	// here too (fed by the change feed below, after the judge).
	workers.Go(func() error { return qstore.Follow(bg) })
	sdeps.Estimator = newQualityBinder(qstore)
	deps.QualityData = qstore
	router, err := schedule.NewRouter(scfg, sdeps)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	workers.Go(func() error { return router.Run(bg) })
	// Every configuration change (this replica's, or another's through
	// NOTIFY) is applied to the scheduler at once: a deleted cluster's
	// state and scrapers go, a deleted instance stops being scraped.
	syncer := schedule.NewSyncer(router, svc, log)
	svc.Observe(syncer)
	workers.Go(func() error { return syncer.Run(bg) })
	deps.State = func(clusterID string) any {
		if st := router.State(clusterID); len(st) > 0 {
			return st
		}
		return nil
	}

	// Proxy: one upstream client for every instance; it too dials through
	// the endpoint policy.
	px, err := proxy.New(proxy.Config{}, proxy.Deps{Log: log, Control: svc.Endpoints().DialControl})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer px.Close()

	// Billing: meter (usage ledger, spill files in <data-dir>/meter; its
	// final flush runs after the HTTP server has drained), spend guard and
	// Stripe sync.
	bill, err := newBilling(cfg.billing, db, cfg.dataDir, log)
	if err != nil {
		return err
	}
	workers.Go(func() error { return bill.meter.Run(bg) })
	workers.Go(func() error { return bill.syncer.Run(bg) })
	deps.Billing, deps.Usage, deps.SignupHook = bill.syncer, bill.store, bill.syncer
	deps.Requests = bill.store

	// The inference path meters every request and checks spend before
	// routing (402 over budget or unpaid past the grace period).
	// Metrics observe the inference path through wrappers around the
	// router and the meter, and read live state at scrape time.
	tcfgMetrics := telemetry.DefaultConfig()
	// Label pseudonyms are keyed by the session secret, so every replica
	// (same --jwt-secret) labels a cluster alike and nobody without the
	// secret can map them back.
	tcfgMetrics.LabelKey = metricsLabelKey(jwtSecret)
	var fwdStats atomic.Pointer[api.Forwarder]
	var leaseStats atomic.Pointer[owner.Leases]
	tel, err := telemetry.New(tcfgMetrics, telemetry.Deps{State: router.State, MeterStats: bill.meter.Stats, Outbox: bill.store, Log: log,
		Replicas: replicaStats(&fwdStats, &leaseStats), Qdrant: qdrantStats(qdeps.Qdrant)})
	if err != nil {
		return err
	}
	// Traces go to the OTLP collector when one is configured; otherwise
	// the provider is a no-op and the inference path skips every span.
	tracing, err := telemetry.NewTracing(ctx, cfg.tracing)
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(fctx); err != nil {
			log.Warn("flush traces", slog.Any("err", err))
		}
	}()
	if tracing.Enabled() {
		log.Info("tracing", slog.String("otlp_endpoint", cfg.tracing.Endpoint), slog.Float64("sample_ratio", cfg.tracing.SampleRatio))
	}
	// Rate limits of keys and tenants (tenants/limits): one limiter for
	// the process, on the wall clock.
	limiter, err := limits.New(limits.Config{}, nil)
	if err != nil {
		return fmt.Errorf("rate limiter: %w", err)
	}
	deps.Inference = api.InferenceDeps{Keys: svc, Router: tel.Router(router), Proxy: px, Meter: tel.Meter(bill.meter, bill.pricing), Spend: bill.guard,
		Limiter: limiter, Tracer: tracing.Provider()}
	// Several replicas: rate limits and budgets counted in Redis
	// (serve_redis.go); without it each replica enforces them alone.
	sh, err := newShared(ctx, cfg.redis, log)
	if err != nil {
		return err
	}
	if sh != nil {
		defer sh.client.Close()
		deps.Inference.Limiter = sh.limiter
		deps.Inference.Meter = redisspend.NewMeter(deps.Inference.Meter, sh.counters, bill.pricing)
		deps.Inference.Spend = redisspend.NewGuard(bill.guard, sh.counters)
		workers.Go(func() error { return sh.limiter.Run(bg) })
		workers.Go(func() error { return sh.counters.Run(bg, bill.store) })
	}
	cache, err := newResponseCache(cfg.cacheMode, cfg.cacheTTL, sh, cfg.redis.prefix)
	if err != nil {
		return err
	}
	if cache != nil {
		deps.Inference.Cache = cache
	}
	deps.Inference.Quality = qstore // POST /v1/feedback teaches the cluster's own index
	// The per-cluster LLM judge: its calls go through a dispatcher of
	// their own (routed in the tenant's cluster, metered as judge usage),
	// never through the inference API, so they are never sampled.
	judgeDisp, err := dispatch.New(dispatch.Config{}, dispatch.Deps{Router: deps.Inference.Router, Upstream: px,
		Meter: deps.Inference.Meter, Spend: deps.Inference.Spend, Log: log})
	if err != nil {
		return fmt.Errorf("judge dispatcher: %w", err)
	}
	judge := quality.NewJudge(quality.JudgeConfig{}, quality.JudgeDeps{Caller: judgeCaller{d: judgeDisp, clock: routing.WallClock{}},
		Learner: qstore, Store: db.qualityStore(), Log: log})
	if _, err := judge.Restore(ctx); err != nil {
		return err
	}
	workers.Go(func() error { return judge.Run(bg) })
	// Quality data and judge settings changed by another replica (NOTIFY
	// on the tenant change feed) are applied here too.
	qualityChanged := func(tenantID string) { qstore.Changed(tenantID); judge.Changed(tenantID) }
	workers.Go(func() error { return store.Watch(bg, qualityChanged, func() { qualityChanged("") }) })
	deps.QualityJudge, deps.Inference.Judge = judge, judge
	// The what-if preview replays the ledger's traffic through a fresh
	// Core with the same estimators, read-only (routing/sim.Previewer).
	sample, err := demoSample()
	if err != nil {
		return err
	}
	pdeps := sim.PreviewDeps{WhatIf: sim.WhatIfDeps{Latency: lat, Schedule: scfg}, Traffic: ledgerTraffic{bill.store},
		State: router, Sample: sample}
	if knn != nil {
		pdeps.WhatIf.Estimator = knn
	}
	previewer, err := sim.NewPreviewer(sim.PreviewConfig{Sim: sim.WhatIfConfig{Timeout: cfg.whatIfTimeout}}, pdeps)
	if err != nil {
		return fmt.Errorf("what-if preview: %w", err)
	}
	deps.WhatIf = previewer

	// The autopilot preset: a controller per (cluster, target set), stepped
	// every --autopilot-interval on the windows of the requests it routed
	// and, with --autopilot-predict, a replay per candidate of the
	// cluster's recent traffic from the live fleet state, through the
	// what-if Previewer (each step's replays within half an interval, at
	// most 1 s).
	var apPred *sim.LivePredictor
	var newPred func(string, autopilot.Targets) autopilot.Predictor
	if cfg.autopilotReplay {
		apPred = sim.NewLivePredictor(sim.LivePredictorConfig{Budget: min(time.Second, cfg.autopilotEvery/2)}, previewer)
		newPred = func(string, autopilot.Targets) autopilot.Predictor { return apPred }
	}
	apReg, err := autopilot.NewRegistry(autopilot.LiveConfig{Interval: cfg.autopilotEvery}, nil, newPred, tel.AutopilotHooks(), log)
	if err != nil {
		return fmt.Errorf("autopilot: %w", err)
	}
	workers.Go(func() error { return apReg.Run(bg) })
	deps.Inference.Autopilot = apReg

	if cfg.metricsToken != "" {
		deps.Metrics, deps.MetricsToken = tel.Handler(), cfg.metricsToken
	}
	if cfg.metricsAddr == "" && cfg.metricsToken == "" {
		log.Warn("metrics are not served: set --metrics-addr or --metrics-token")
	}
	if cfg.metricsAddr != "" {
		stopMetrics, err := serveMetrics(cfg.metricsAddr, tel.Handler(), cfg.metricsToken, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

	if cfg.pprofAddr != "" {
		stopPprof, err := servePprof(cfg.pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}

	// On Postgres, take requests only once the change feed listens: a key
	// resolved before that would be cached, then dropped by the feed's
	// first invalidation at an arbitrary later moment (an outage right
	// after it left nothing cached to serve from). Bounded: a feed that
	// cannot start within 10 s is logged and retried in the background.
	if db.engine == "postgres" {
		select {
		case <-feedLive:
		case <-time.After(10 * time.Second):
			log.Warn("tenant change feed not listening after 10 s; serving, keys are re-read when it starts")
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	// Several replicas: each cluster is scheduled by its owner replica
	// (a lease in Redis); the others forward its requests there, signed
	// with a key derived from the shared session secret.
	id := replicaID(cfg.redis.replicaID)
	leases, err := newOwnerLeases(sh, cfg.redis, id, ln.Addr(), log)
	if err != nil {
		return err
	}
	signer, err := owner.NewSigner(jwtSecret, 0)
	if err != nil {
		return err
	}
	var owners api.Owners
	if leases != nil {
		owners = leases
		leaseStats.Store(leases)
		workers.Go(func() error { return leases.Run(bg) })
	}
	fwd := api.NewForwarder(api.ForwardConfig{Replica: id}, owners, signer, log)
	fwdStats.Store(fwd)
	deps.Inference.Forward = fwd

	acfg := api.DefaultConfig()
	acfg.BodyLimit = cfg.bodyLimit
	acfg.MaxHeaderBytes = cfg.maxHeaderBytes
	acfg.Inference.MaxAttempts = cfg.maxAttempts
	acfg.RequestTimeout = cfg.requestTimeout
	acfg.TrustedProxies = cfg.trustedProxies
	srv := api.New(acfg, deps)
	if apPred != nil {
		apPred.SetPrompts(srv.PromptMemory())
	}

	log.Info("listening", slog.String("addr", ln.Addr().String()), slog.Bool("allow_private_endpoints", cfg.allowPrivate))
	fmt.Fprintf(stdout, "routebalance listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.App().Listener(ln) }()

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", slog.Duration("grace", cfg.shutdownTimeout))
	case serveErr = <-served:
		log.Error("server stopped", slog.Any("err", serveErr))
	case <-bg.Done():
		serveErr = workers.Wait()
		log.Error("background worker stopped", slog.Any("err", serveErr))
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if leases != nil {
		// Hand the clusters over now rather than after the lease TTL.
		leases.Stop(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests cut at the shutdown deadline", slog.Any("err", err))
	}
	stopBackground()
	if err := workers.Wait(); err != nil && !errors.Is(err, context.Canceled) && serveErr == nil {
		serveErr = err
	}
	log.Info("stopped")
	return serveErr
}
