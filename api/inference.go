package api

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/quality"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/limits"
)

// KeyResolver turns the secret of an API key ("rb_…") into the principal it
// acts as. The inference handlers call it once per request, concurrently.
// Unknown, malformed and revoked keys return an error matching
// tenants.ErrUnauthorized; other errors are failures. The returned
// Principal is shared and must not be modified. tenants.Service implements
// it.
type KeyResolver interface {
	ResolveKey(ctx context.Context, secret string) (*tenants.Principal, error)
}

// Router admits a request on one instance of a cluster:
// dispatch.Router (schedule.Router implements it).
type Router = dispatch.Router

// Meter receives one usage event per request that reached an instance:
// dispatch.Meter (billing.Meter implements it).
type Meter = dispatch.Meter

// SpendGuard is the spend control run before routing: dispatch.SpendGuard
// (billing.Guard implements it).
type SpendGuard = dispatch.SpendGuard

// QualityObserver learns from a client's quality score of a served
// request: the prompt, the model that answered and the score in [0,1].
// It must be safe for concurrent use and must not block for long.
// estimate.KNN implements it.
type QualityObserver interface {
	ObserveQuality(prompt, model string, q float64)
}

// JudgeOffer is the per-cluster quality judge as the inference API sees
// it (routing/quality.Judge): Wants is asked for each served,
// non-streamed answer before it is read, Offer is then given it. Both
// must be fast and never block. Judge calls themselves do not pass
// through the inference API, so they are never offered.
type JudgeOffer interface {
	Wants(clusterID, requestID string) bool
	Offer(s quality.Sample) bool
}

// ClusterQualityObserver is optional on a QualityObserver: it learns the
// score for the cluster that served the request (its own quality data)
// and is preferred over ObserveQuality. (*quality.Store) implements it.
type ClusterQualityObserver interface {
	ObserveClusterQuality(clusterID, prompt, model string, q float64)
}

// MemoQualityObserver is a QualityObserver that can reuse the estimate
// of the request's routing decision: memo is its Decision.EstimateMemo.
// The estimator then takes the embedding and nearest stored prompt it
// computed for the decision instead of embedding and searching the prompt
// again, and falls back to the prompt when it no longer holds that
// estimate (memo expired, or 0). A memo means something only to the
// estimator that made it (estimate.KNN numbers its estimates from 1), so
// the observer must be the router's estimator itself; /v1/feedback uses
// it only for an observer that does not keep per-cluster data
// (ClusterQualityObserver comes first). estimate.KNN implements it.
type MemoQualityObserver interface {
	ObserveQualityMemo(memo uint64, prompt, model string, q float64)
}

// InferenceConfig holds the OpenAI-compatible API's settings; zero fields
// take the defaults of DefaultInferenceConfig.
type InferenceConfig struct {
	// RetryAfter is the Retry-After sent with 429 when every instance of
	// the cluster is saturated (default 1s).
	RetryAfter time.Duration
	// ClientCheckInterval is how often a request waiting on its upstream
	// checks whether the client's connection is still open (default
	// 200ms). fasthttp does not cancel anything when a client leaves, so
	// the check is what propagates a disconnect upstream.
	ClientCheckInterval time.Duration
	// FeedbackWindow is how many recent requests /v1/feedback can score
	// (default 10000); older ids are forgotten.
	FeedbackWindow int
	// FeedbackPromptBytes caps the prompt kept per request for feedback
	// (default 8 KiB).
	FeedbackPromptBytes int
	// MaxAttempts bounds the instances one request is opened on: the first
	// and the fallbacks after an instance that could not be reached or
	// answered 5xx/429 before its first byte (default 2; see
	// routing/dispatch).
	MaxAttempts int
}

// DefaultInferenceConfig returns the default InferenceConfig.
func DefaultInferenceConfig() InferenceConfig {
	return InferenceConfig{
		RetryAfter:          time.Second,
		ClientCheckInterval: 200 * time.Millisecond,
		FeedbackWindow:      10000,
		FeedbackPromptBytes: 8 << 10,
		MaxAttempts:         dispatch.DefaultConfig().MaxAttempts,
	}
}

// Validate reports a negative setting.
func (c InferenceConfig) Validate() error {
	if c.RetryAfter < 0 || c.ClientCheckInterval < 0 || c.FeedbackWindow < 0 || c.FeedbackPromptBytes < 0 || c.MaxAttempts < 0 {
		return fmt.Errorf("inference config: settings must be >= 0")
	}
	return nil
}

func (c InferenceConfig) withDefaults() InferenceConfig {
	d := DefaultInferenceConfig()
	if c.RetryAfter == 0 {
		c.RetryAfter = d.RetryAfter
	}
	if c.ClientCheckInterval == 0 {
		c.ClientCheckInterval = d.ClientCheckInterval
	}
	if c.FeedbackWindow == 0 {
		c.FeedbackWindow = d.FeedbackWindow
	}
	if c.FeedbackPromptBytes == 0 {
		c.FeedbackPromptBytes = d.FeedbackPromptBytes
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	return c
}

// InferenceDeps are the inference API's collaborators. Keys and Router are
// required for completions (without them the endpoints answer 503); Proxy
// defaults to a proxy with default settings; Meter, Spend and Quality are optional (no
// metering, no spend check, /v1/feedback answers 501). The api hands
// Router, Proxy, Limiter, Spend and Meter to routing/dispatch, which runs
// each completion's journey.
type InferenceDeps struct {
	Keys    KeyResolver
	Router  Router
	Proxy   *proxy.Proxy
	Meter   Meter
	Spend   SpendGuard
	Quality QualityObserver
	// Judge, when set, is offered the served answers its clusters sample.
	Judge JudgeOffer
	// Limiter enforces the rate limits (default: this process's own
	// *limits.Limiter on Clock; cmd injects one, the Redis limiter for
	// several replicas).
	Limiter RateLimiter
	// Clock stamps arrivals and usage events (default the wall clock).
	Clock routing.Clock
	// Tracer receives the spans of every completion request (root, auth,
	// route with its batch wait/estimate/score phases, upstream, meter;
	// telemetry/README.md). nil or a no-op provider (the default) turns
	// tracing off at no cost. telemetry.Tracing.Provider supplies it.
	Tracer trace.TracerProvider
	// Cache is the exact-match response cache for deterministic
	// non-streamed requests (routing/respcache); nil turns it off.
	Cache dispatch.Cache
	// Forward, with several replicas, forwards requests to their
	// cluster's owner replica and checks X-RouteBalance-Forwarded
	// (inference_forward.go); nil: everything routes here and a forwarded
	// header is refused.
	Forward *Forwarder
	// Autopilot runs the controllers of the autopilot preset
	// (routing/autopilot); nil answers that preset with 503.
	Autopilot *autopilot.Registry
}

// inference serves /v1.
type inference struct {
	cfg    InferenceConfig
	deps   InferenceDeps
	log    *slog.Logger
	clock  routing.Clock
	recent *recentRequests
	// dispatch runs each completion's journey; nil without a Router.
	dispatch *dispatch.Dispatcher
	trace    tracer
	// resumer serves a connection's next requests after a stream written
	// straight to it (streamDirect); nil: streams go through fasthttp's
	// body stream writer.
	resumer *connResumer
}

func newInference(cfg InferenceConfig, deps InferenceDeps, log *slog.Logger) *inference {
	if err := cfg.Validate(); err != nil {
		log.Error("invalid inference config, using defaults", slog.String("error", err.Error()))
		cfg = InferenceConfig{}
	}
	cfg = cfg.withDefaults()
	h := &inference{cfg: cfg, deps: deps, log: log, clock: deps.Clock, trace: newTracer(deps.Tracer)}
	if h.clock == nil {
		h.clock = routing.WallClock{}
	}
	if deps.Quality != nil {
		h.recent = newRecentRequests(cfg.FeedbackWindow, cfg.FeedbackPromptBytes)
	}
	if deps.Router == nil {
		return h
	}
	d, err := dispatch.New(dispatch.Config{MaxAttempts: cfg.MaxAttempts}, h.dispatchDeps())
	if err != nil { // cfg was validated and Router and Upstream are set
		panic(err)
	}
	h.dispatch = d
	return h
}

// dispatchDeps hands the journey's collaborators to routing/dispatch,
// with the defaults for a missing proxy or limiter.
func (h *inference) dispatchDeps() dispatch.Deps {
	deps := h.deps
	d := dispatch.Deps{Router: deps.Router, Spend: deps.Spend, Meter: deps.Meter, Limiter: deps.Limiter,
		Status: h.dispatchStatus, Clock: h.clock, Log: h.log, Tracer: deps.Tracer, Cache: deps.Cache}
	if deps.Proxy != nil {
		d.Upstream = deps.Proxy
	} else {
		p, err := proxy.New(proxy.Config{}, proxy.Deps{Log: h.log, Clock: h.clock})
		if err != nil { // the zero Config is valid; this cannot happen
			panic(err)
		}
		d.Upstream = p
	}
	if d.Limiter == nil {
		l, err := limits.New(limits.Config{}, h.clock)
		if err != nil { // the zero Config is valid; this cannot happen
			panic(err)
		}
		d.Limiter = l
	}
	return d
}

// mountInference registers the OpenAI-compatible API under /v1, and
// vLLM's /tokenize and /detokenize at the root (where vLLM serves them).
func (s *Server) mountInference(root fiber.Router) {
	h := newInference(s.cfg.Inference, s.deps.Inference, s.log)
	h.resumer = s.resumer
	root.Post("/tokenize", h.tokenizer(proxy.Tokenize))
	root.Post("/detokenize", h.tokenizer(proxy.Detokenize))
	r := root.Group("/v1")
	s.recent = h.recent // read by the what-if preview (whatif.go)
	r.Post("/chat/completions", h.complete(proxy.Chat))
	r.Post("/completions", h.complete(proxy.Completions))
	r.Post("/embeddings", h.complete(proxy.Embeddings))
	r.Post("/responses", h.complete(proxy.Responses))
	r.Get("/models", h.models)
	r.Get("/models/+", h.model)
	r.Post("/feedback", h.feedback)
}
