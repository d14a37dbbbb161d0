// Package api is the HTTP face of RouteBalance: the fiber app, its route
// table, middleware and the mapping of domain errors to HTTP. It is the
// only package that imports fiber.
//
// Routes: /healthz, /readyz, /metrics (only with Deps.Metrics and Deps.MetricsToken set: a bearer token), the management API under /api/v1
// (management.go) and the OpenAI-compatible API under /v1 (inference*.go).
// Every error, including unknown routes (404), wrong methods (405) and
// oversized bodies (413), is answered in OpenAI's envelope
// {"error":{"message","type","param","code"}}.
package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
)

// Server is the HTTP application.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// access writes the access lines without slog (Deps.AccessLog).
	access *accessWriter
	// resumer serves on the connections of streams written straight to
	// them (inference_conn_stream.go).
	resumer *connResumer
	ips     ipStrings // the access log's interned client addresses
	// ipFromHeader is set when fiber reads the client address from a
	// proxy header (then the access log asks c.IP()).
	ipFromHeader bool
	app          *fiber.App
	// recent is the inference path's recent-request memory (nil without
	// /v1/feedback), read by the what-if preview.
	recent *recentRequests
	// clock is Deps.Inference.Clock (default the wall clock); the usage
	// report's default range is taken from it.
	clock routing.Clock
	// base is the parent of every request's context; Shutdown cancels it
	// when the grace period ends with requests still running, so they end
	// (and meter what they served) before the caller stops the meter.
	base     context.Context
	stopBase context.CancelFunc
	// running counts requests whose context is live (userContext to the
	// request's cancel, which for a stream is its end).
	running atomic.Int64
}

// Config holds the HTTP settings.
type Config struct {
	// BodyLimit is the largest request body in bytes; larger bodies are
	// answered 413.
	BodyLimit int
	// MaxHeaderBytes is the largest request head (request line and
	// headers) in bytes; a larger one is answered 431
	// headers_too_large. Default 16 KiB, room for long cookies and
	// bearer tokens (fasthttp's own default is 4 KiB). Each connection
	// holds a read buffer of this size.
	MaxHeaderBytes int
	// RequestTimeout is the deadline of every request's UserContext.
	// Streaming handlers that outlive their handler call take over the
	// context's cancel (see requestCancel).
	RequestTimeout time.Duration
	// ReadTimeout bounds reading one request (headers and body);
	// IdleTimeout bounds keep-alive idleness.
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	// Inference configures the OpenAI-compatible API (api/inference.go).
	Inference InferenceConfig
	// TrustedProxies are the addresses or CIDR ranges of reverse proxies
	// (an ingress, a load balancer) whose X-Forwarded-For names the client.
	// Empty (the default) trusts no header: the client address is the
	// connection's peer. The login throttle counts per client address, so
	// behind a proxy this must be set or every client shares one address.
	TrustedProxies []string
}

// DefaultConfig returns the defaults: 8 MiB bodies, 16 KiB request heads,
// 10 min requests (long generations stream for minutes), 30 s reads, 2
// min idle.
func DefaultConfig() Config {
	return Config{BodyLimit: 8 << 20, MaxHeaderBytes: 16 << 10, RequestTimeout: 10 * time.Minute, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.BodyLimit <= 0 || c.RequestTimeout <= 0 || c.ReadTimeout <= 0 || c.IdleTimeout <= 0 {
		return errors.New("api: body limit and timeouts must be positive")
	}
	return nil
}

// Readiness reports whether the service can serve: the database answers
// and its migrations are applied. Called by GET /readyz; must honour ctx.
type Readiness func(ctx context.Context) error

// ClusterState returns the scheduler's live view of one cluster's
// instances, JSON-encodable, or nil when the scheduler has no state for the
// cluster yet. serve.go adapts (*schedule.Router).State to it.
type ClusterState func(clusterID string) any

// Deps are the collaborators the handlers use.
type Deps struct {
	Log *slog.Logger
	// AccessLog, when set, receives the access log's lines directly, in
	// the format of slog.NewJSONHandler (give it the writer Log's JSON
	// handler writes to): encoded into a pooled buffer, no allocation per
	// line. Log's level still decides which lines are written. Nil: the
	// lines go through Log.
	AccessLog io.Writer
	// Tenants runs the management API and authenticates sessions.
	Tenants *tenants.Service
	// Ready backs /readyz; nil reports ready.
	Ready Readiness
	// State backs GET /api/v1/clusters/{id}/state; nil means no scheduler
	// is wired and the endpoint reports the registered instances only.
	State ClusterState
	// QualityData serves /api/v1/clusters/{id}/quality-data; nil answers
	// 501 there.
	QualityData QualityData
	// QualityJudge serves /api/v1/clusters/{id}/quality-judge; nil
	// answers 501 there.
	QualityJudge QualityJudge
	// Inference holds the OpenAI-compatible API's collaborators
	// (api/inference.go).
	Inference InferenceDeps
	// Billing serves /api/v1/billing (overview, checkout, Stripe webhook).
	Billing BillingService
	// Usage serves /api/v1/usage from the ledger.
	Usage UsageReader
	// Requests serves the request log, /api/v1/requests(.csv), from the ledger.
	Requests RequestReader
	// BillingTenant, when set, replaces the session check of the billing
	// and usage endpoints (tests).
	BillingTenant TenantFunc
	// SignupHook is told about each sign-up (creates the Stripe customer).
	SignupHook SignupHook
	// WhatIf answers POST /api/v1/clusters/{id}/whatif
	// (routing/sim.Previewer); nil answers 503.
	WhatIf Previewer
	// Metrics, when set together with MetricsToken, is served at GET
	// /metrics (telemetry.Metrics.Handler) to requests bearing
	// "Authorization: Bearer <MetricsToken>"; without a token it is not
	// served on this listener at all (the public one): metrics belong on
	// their own listener (--metrics-addr).
	Metrics      http.Handler
	MetricsToken string
}

// New builds the fiber app and its routes.
func New(cfg Config, deps Deps) *Server {
	def := DefaultConfig()
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = def.BodyLimit
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = def.MaxHeaderBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = def.RequestTimeout
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = def.ReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = def.IdleTimeout
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Log, clock: deps.Inference.Clock, ips: ipStrings{max: 4096}}
	s.base, s.stopBase = context.WithCancel(context.Background())
	if deps.AccessLog != nil {
		s.access = newAccessWriter(deps.AccessLog)
	}
	if s.clock == nil {
		s.clock = routing.WallClock{}
	}
	s.app = fiber.New(fiber.Config{
		BodyLimit:             cfg.BodyLimit,
		ReadBufferSize:        cfg.MaxHeaderBytes, // fasthttp reads the whole head into it
		ReadTimeout:           cfg.ReadTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		// Behind trusted proxies the client is the first valid address of
		// X-Forwarded-For (a header from anyone else is ignored).
		EnableTrustedProxyCheck: len(cfg.TrustedProxies) > 0,
		TrustedProxies:          cfg.TrustedProxies,
		ProxyHeader:             proxyHeader(cfg.TrustedProxies),
		EnableIPValidation:      true,
		// No endpoint reads a form: a multipart body is not parsed
		// (fasthttp would, before any handler or authentication, spilling
		// large parts to temporary files) and the inference endpoints
		// answer its Content-Type 415.
		DisablePreParseMultipartForm: true,
		// Unknown methods on known paths are 405, not 404.
		// (fiber checks the other methods' trees for the path.)
	})
	// A stream written straight to its connection hands the connection
	// back to the server from a hijack handler (streamDirect): fasthttp
	// must leave hijacked connections open.
	s.app.Server().KeepHijackedConns = true
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = cfg.ReadTimeout // as fasthttp's keep-alive wait
	}
	s.resumer = newConnResumer(s.app.Server().ServeConn, idle)
	s.ipFromHeader = s.app.Config().ProxyHeader != ""
	s.app.Use(s.requestID, s.accessLog, s.recoverPanic, s.userContext)
	s.app.Use("/api", apiHeaders)
	s.app.Get("/healthz", s.healthz)
	s.app.Get("/readyz", s.readyz)
	if deps.Metrics != nil && deps.MetricsToken != "" {
		s.app.Get("/metrics", s.requireMetricsToken, adaptor.HTTPHandler(deps.Metrics))
	} else if deps.Metrics != nil {
		s.log.Warn("metrics handler given without a bearer token: /metrics is not served on the main listener")
	}
	s.mountBillingWebhook(s.app) // Stripe authenticates with its signature, not a session
	s.mountManagement(s.app.Group("/api/v1"))
	s.mountBilling(s.app.Group("/api/v1"))
	s.mountInference(s.app)
	s.mountWeb(s.app) // last: its catch-all serves the dashboard
	return s
}

// apiHeaders marks every /api answer as not to be stored (they carry
// bearer tokens, API keys and tenant data) nor sniffed as another type.
func apiHeaders(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return c.Next()
}

func proxyHeader(trusted []string) string {
	if len(trusted) == 0 {
		return ""
	}
	return fiber.HeaderXForwardedFor
}

// requireMetricsToken admits a scrape bearing the metrics token (constant-
// time comparison).
func (s *Server) requireMetricsToken(c *fiber.Ctx) error {
	scheme, token, ok := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") ||
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(s.deps.MetricsToken)) != 1 {
		return unauthorized("/metrics needs Authorization: Bearer <metrics token>")
	}
	return c.Next()
}

// App returns the fiber app (for Listen, Shutdown and tests).
func (s *Server) App() *fiber.App { return s.app }

// Shutdown stops accepting connections and waits for in-flight requests
// (streams included) until ctx ends. Requests still running then are
// cancelled — a stream ends as if its client had left — and Shutdown
// waits up to cutSettle more for them to finish, so that what they served
// is metered before the caller stops the meter. It returns ctx's error
// when requests had to be cut.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.resumer != nil {
		s.resumer.close() // connections resting after a stream, between requests
	}
	err := s.app.ShutdownWithContext(ctx)
	if err == nil && s.running.Load() == 0 {
		return nil
	}
	s.stopBase()
	deadline := time.Now().Add(cutSettle)
	for s.running.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.running.Load(); n > 0 {
		s.log.Error("requests still running after the shutdown grace and their cancellation; their usage may be spilled or lost", slog.Int64("requests", n))
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// cutSettle bounds how long Shutdown waits for cancelled requests to end.
const cutSettle = 5 * time.Second
