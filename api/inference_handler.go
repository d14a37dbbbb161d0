package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/owner"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/respcache"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/limits"
)

// Response headers that explain a routing decision.
const (
	hdrInstance          = "X-RouteBalance-Instance"
	hdrModel             = "X-RouteBalance-Model"
	hdrPolicyOut         = "X-RouteBalance-Policy"
	hdrDecisionUs        = "X-RouteBalance-Decision-Us"
	hdrBatchSize         = "X-RouteBalance-Batch-Size"
	hdrPredictedQuality  = "X-RouteBalance-Predicted-Quality"
	hdrQualitySource     = "X-RouteBalance-Quality-Source"
	hdrPredictedE2EMs    = "X-RouteBalance-Predicted-E2E-Ms"
	hdrPredictedCostUSD  = "X-RouteBalance-Predicted-Cost-Usd"
	hdrRelaxed           = "X-RouteBalance-Relaxed"
	hdrQueueWaitMs       = "X-RouteBalance-Queue-Wait-Ms"
	hdrFailedOver        = "X-RouteBalance-Failed-Over"
	hdrAttempts          = "X-RouteBalance-Attempts"
	hdrCache             = "X-RouteBalance-Cache"
	statusClientClosed   = 499 // nginx's "client closed request"; never seen by the client
	errCodeModelNotFound = "model_not_found"
)

// exchangeID returns the request's id for routing, metering and
// feedback: the id the request-id middleware assigned, made unique when
// the client chose it (a client's X-Request-Id is kept as a prefix, since
// metering is idempotent by id and a reused id must not hide a request).
// The response's X-Request-Id carries the final id.
func exchangeID(c *fiber.Ctx) string {
	id := requestIDOf(c)
	switch {
	case id == "":
		id = newRequestID()
	case id == c.Get(HeaderRequestID):
		id = id + "-" + randomSuffix()
	default:
		return id
	}
	c.Locals(localRequestID, id)
	c.Set(HeaderRequestID, id)
	return id
}

// bearer extracts the API key from "Authorization: Bearer rb_…".
func bearer(c *fiber.Ctx) (string, bool) {
	h := strings.TrimSpace(c.Get(fiber.HeaderAuthorization))
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret = strings.TrimSpace(secret)
	return secret, secret != ""
}

// authenticate resolves the request's API key or writes the 401/500 and
// returns nil.
func (h *inference) authenticate(ctx context.Context, c *fiber.Ctx) (*tenants.Principal, error) {
	if h.deps.Keys == nil {
		return nil, sendError(c, http.StatusServiceUnavailable, typeUnavailable, "not_configured", "", "the inference API is not configured on this server")
	}
	secret, ok := bearer(c)
	if !ok {
		return nil, sendError(c, http.StatusUnauthorized, typeAuthentication, "missing_api_key", "",
			"you didn't provide an API key; send it as 'Authorization: Bearer rb_…'")
	}
	p, err := h.deps.Keys.ResolveKey(ctx, secret)
	if errors.Is(err, tenants.ErrUnauthorized) {
		return nil, sendError(c, http.StatusUnauthorized, typeAuthentication, "invalid_api_key", "", "invalid or revoked API key")
	}
	if err != nil {
		h.log.Error("resolve API key", slog.String("error", err.Error()))
		return nil, sendError(c, http.StatusInternalServerError, typeServer, "", "", "could not check the API key; try again")
	}
	return p, nil
}

// sendParamError answers a *paramError with 400.
func sendParamError(c *fiber.Ctx, err error) error {
	var pe *paramError
	if errors.As(err, &pe) {
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", pe.param, pe.msg)
	}
	return sendError(c, http.StatusBadRequest, typeInvalidRequest, "", "", err.Error())
}

// servedModels lists the distinct models of a cluster's enabled instances.
func servedModels(c *routing.Cluster) []string {
	seen := map[string]bool{}
	var out []string
	for _, in := range c.Instances {
		if in.Disabled || seen[in.Model] {
			continue
		}
		seen[in.Model] = true
		out = append(out, in.Model)
	}
	sort.Strings(out)
	return out
}

// exchange is the HTTP side of one completion request: what the handler
// parsed, and the dispatch.Client that puts the journey's facts on the
// response. The journey itself (admit, route, fail over, relay, release,
// meter) is routing/dispatch's.
type exchange struct {
	h         *inference
	c         *fiber.Ctx
	id        string
	p         *tenants.Principal
	cluster   *routing.Cluster
	body      *completionBody
	root      trace.Span // the request's root span, ended by endRoot
	tried     int        // instances decided on so far (X-RouteBalance-Attempts)
	buf       bodyBuffer // a non-streamed answer
	arrival   time.Time
	weights   routing.Weights       // what the request is routed with
	autopilot *autopilot.Controller // the request's controller (preset autopilot), else nil
	// A stream's hand-off (stream): Begin closes begun once the headers
	// are set, then waits for fasthttp's body writer on writer.
	begun  chan struct{}
	writer chan *bufio.Writer
	sw     streamWriter // what Begin hands a stream's relay
	// A stream written straight to the connection (streamDirect): Begin
	// renders the headers into it and hands it to the relay.
	direct *directStream
	req    routing.Request
	call   dispatch.Call
}

// streamWriter is a stream's body writer: fasthttp's, whose Flush hands
// the bytes through a pipe to the connection's goroutine, which writes
// them to the socket. After the first event's Flush the relay yields its
// thread once, so that goroutine sends the first event before the relay
// goes on parsing the next ones (when the upstream has several events
// buffered, the relay would otherwise run on until the pipe's queue of 4
// writes is full, unless another thread picks the writer up first — on a
// busy machine it often does not). Later events are not delayed that way
// in practice: between two tokens the relay waits for the upstream.
type streamWriter struct {
	*bufio.Writer
	yielded bool
}

// Flush flushes and, the first time, yields (see streamWriter).
func (w *streamWriter) Flush() error {
	err := w.Writer.Flush()
	if !w.yielded {
		w.yielded = true
		runtime.Gosched()
	}
	return err
}

var _ dispatch.Client = (*exchange)(nil)

// Limited sets the x-ratelimit-* headers.
func (x *exchange) Limited(st limits.Status) { setRateHeaders(x.c, st) }

// Decided sets the decision headers and counts the attempt.
func (x *exchange) Decided(a *routing.Assignment) {
	x.tried++
	setDecisionHeaders(x.c, a)
	setWeightsHeader(x.c, x.weights)
	x.c.Set(hdrAttempts, strconv.Itoa(x.tried))
}

// FailedOver names the instances fallen back from, in order.
func (x *exchange) FailedOver(instanceID string) {
	if prev := x.c.GetRespHeader(hdrFailedOver); prev != "" {
		instanceID = prev + "," + instanceID
	}
	x.c.Set(hdrFailedOver, instanceID)
}

// Begin remembers the request for feedback and returns the body writer:
// the buffer of a non-streamed answer, or, for a stream, fasthttp's body
// writer once the handler has returned with the stream's headers.
func (x *exchange) Begin(a *routing.Assignment, _ int) proxy.Writer {
	if a != nil {
		x.h.remember(x, a)
	}
	if x.begun == nil && x.direct == nil {
		return &x.buf
	}
	c := x.c
	c.Status(http.StatusOK)
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	if x.direct != nil {
		x.h.resumer.streams.Add(1)
		x.direct.begin(&c.Context().Response.Header)
		return x.direct
	}
	close(x.begun)
	// fasthttp starts the body writer as soon as it is set
	// (SetBodyStreamWriter), so this receive always completes.
	x.sw.Writer = <-x.writer
	return &x.sw
}

// complete serves POST /v1/chat/completions, /v1/completions,
// /v1/responses (routed like chat) and /v1/embeddings (never streamed,
// routed to embedding instances): it
// authenticates and parses the request into a dispatch.Call, runs it and
// writes the answer.
func (h *inference) complete(ep proxy.Endpoint) fiber.Handler {
	spanName := "POST " + string(ep)
	return func(c *fiber.Ctx) (err error) {
		x := &exchange{h: h, c: c, id: exchangeID(c)}
		arrival := h.clock.Now()
		x.arrival = arrival
		// The request context carries the server's request deadline; the
		// handler takes its cancel over (requestContext) and calls it when
		// it returns, or, for a stream, which outlives the handler, when
		// the stream ends. Client departure is noticed by the connection
		// watcher, which cancels ctx.
		ctx, cancel := requestContext(c)
		ctx = h.trace.extract(ctx, c)
		ctx, x.root = h.trace.StartServer(ctx, spanName)
		if x.root.IsRecording() {
			x.root.SetAttributes(telemetry.AttrRequestID.String(x.id))
			c.Locals(localTraceID, x.root.SpanContext().TraceID().String())
		}
		handedOff := false
		defer func() {
			if handedOff {
				return
			}
			cancel()
			status := c.Response().StatusCode()
			if err != nil {
				status = errorStatus(err)
			}
			x.endRoot(status)
		}()
		call, err := h.prepare(ctx, x, ep, arrival)
		if call == nil {
			return err
		}
		stopWatch := watchClient(c.Context().Conn(), h.cfg.ClientCheckInterval, cancel)
		if handled, ho, err := h.deps.Forward.step(ctx, x, func() { stopWatch(); cancel() }); handled {
			if handedOff = ho; !ho {
				stopWatch()
			}
			return err
		}
		if !x.body.stream {
			res, err := h.dispatch.Dispatch(ctx, *call)
			stopWatch()
			x.observe(res, err)
			return x.answer(ctx, res, err)
		}
		handedOff, err = x.stream(ctx, call, func() { stopWatch(); cancel() })
		return err
	}
}

// prepare authenticates and parses the request into a Call, or writes the
// refusal and returns nil.
func (h *inference) prepare(ctx context.Context, x *exchange, ep proxy.Endpoint, arrival time.Time) (*dispatch.Call, error) {
	c := x.c
	actx, asp := h.trace.Start(ctx, "auth")
	p, err := h.authenticate(actx, c)
	if asp.IsRecording() {
		if p == nil {
			asp.SetStatus(codes.Error, "not authenticated")
		} else {
			asp.SetAttributes(telemetry.AttrTenant.String(p.Tenant.ID))
		}
	}
	asp.End()
	if p == nil {
		return nil, err
	}
	x.p = p
	if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, sendError(c, http.StatusUnsupportedMediaType, typeInvalidRequest, "", "", "compressed request bodies are not accepted")
	}
	if !jsonContentType(c.Get(fiber.HeaderContentType)) {
		return nil, sendError(c, http.StatusUnsupportedMediaType, typeInvalidRequest, "unsupported_media_type", "Content-Type", contentTypeMessage)
	}
	body, err := parseRequest(c, ep)
	if err != nil {
		return nil, sendParamError(c, err)
	}
	x.body = body
	targets, auto, err := resolveAutopilot(&body.rb, p)
	if err != nil {
		return nil, sendParamError(c, err)
	}
	var weights routing.Weights
	if !auto {
		if weights, err = resolveWeights(&body.rb, p); err != nil {
			return nil, sendParamError(c, err)
		}
	}
	cl, ok := p.RoutingCluster()
	if !ok {
		return nil, sendError(c, http.StatusBadRequest, typeInvalidRequest, "no_cluster", "", p.NoClusterReason())
	}
	if auto {
		var ok bool
		if weights, ok, err = h.autopilotWeights(c, x, cl, targets); !ok {
			return nil, err
		}
	}
	x.weights = weights
	x.cluster = cl
	if x.root.IsRecording() {
		x.root.SetAttributes(telemetry.AttrCluster.String(cl.ID), telemetry.AttrStream.Bool(body.stream))
	}
	if h.dispatch == nil {
		return nil, sendError(c, http.StatusServiceUnavailable, typeUnavailable, "not_configured", "", "no router is configured on this server")
	}
	return newCall(x, ep, weights, arrival), nil
}

// parseRequest reads the body, then the X-RouteBalance-* headers and the
// body's "routebalance" object on top of them (the body wins).
func parseRequest(c *fiber.Ctx, ep proxy.Endpoint) (*completionBody, error) {
	parse := parseCompletion
	switch ep {
	case proxy.Embeddings:
		parse = func(raw []byte, _ proxy.Endpoint) (*completionBody, error) { return parseEmbedding(raw) }
	case proxy.Responses:
		parse = func(raw []byte, _ proxy.Endpoint) (*completionBody, error) { return parseResponses(raw) }
	}
	body, err := parse(c.BodyRaw(), ep)
	if err != nil {
		return nil, err
	}
	if err := body.rb.parseHeaders(func(k string) string { return strings.Clone(c.Get(k)) }); err != nil { // fasthttp reuses header memory: copy
		return nil, err
	}
	if raw, ok := present(body.fields, "routebalance"); ok {
		if err := body.rb.parseBody(raw); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// newCall builds the dispatch.Call of a parsed request.
func newCall(x *exchange, ep proxy.Endpoint, weights routing.Weights, arrival time.Time) *dispatch.Call {
	p, body := x.p, x.body
	req := &x.req // in the exchange: no allocation of its own
	*req = routing.Request{
		ID: x.id, Prompt: body.prompt, PromptTokens: body.promptTokens, MaxTokens: body.maxTokens,
		Model: body.model, Weights: weights, SLO: resolveSLO(&body.rb, p), BudgetUSD: body.rb.budgetUSD,
		Workflow: body.rb.workflow, Policy: body.rb.policy, Arrival: arrival, Priority: routing.PriorityNormal,
	}
	if body.rb.priority != nil {
		req.Priority = *body.rb.priority
	}
	if ep == proxy.Embeddings {
		// Only embedding instances serve it, balanced by load: quality
		// and output length do not apply to an embedding.
		req.Kind = routing.KindEmbedding
		if req.Policy == "" {
			req.Policy = schedule.PolicyShortestQueue
		}
	}
	spend := billing.Limits{TenantID: p.Tenant.ID, KeyID: p.Key.ID, TenantMonthlyUSD: p.Settings.SLO.MonthlyBudgetUSD}
	if p.Key.SLO != nil {
		spend.KeyMonthlyUSD = p.Key.SLO.MonthlyBudgetUSD
	}
	cacheKey := ""
	if x.h.deps.Cache != nil && !body.stream {
		// Routing overrides sent as headers change the answer of "auto"
		// as much as body fields do: they are part of the key.
		if k, err := respcache.Key(p.Tenant.ID, string(ep)+"|"+routingHeaders(x.c), x.c.BodyRaw()); err == nil {
			cacheKey = k
		}
	}
	x.call = dispatch.Call{
		CacheKey: cacheKey,
		Request:  req, Cluster: x.cluster, Spend: spend,
		TenantLimits: p.Settings.Limits.Limiter(), KeyLimits: p.Key.Limits.Limiter(),
		Forward: proxy.Call{Endpoint: ep, Body: body.fields, Stream: body.stream, IncludeUsage: body.includeUsage,
			PromptTokens: body.promptTokens, RequestID: x.id},
		Client: x,
	}
	return &x.call
}

// routingHeaders is the request's X-RouteBalance-* headers, sorted, as
// one string.
func routingHeaders(c *fiber.Ctx) string {
	var hs []string
	c.Request().Header.VisitAll(func(k, v []byte) {
		if len(k) > 14 && strings.EqualFold(string(k[:14]), "X-RouteBalance") && !strings.EqualFold(string(k), owner.Header) {
			hs = append(hs, strings.ToLower(string(k))+"="+string(v))
		}
	})
	sort.Strings(hs)
	return strings.Join(hs, "\n")
}

// answer writes a non-streamed call's answer: the instance's body, or the
// error's envelope.
func (x *exchange) answer(ctx context.Context, res dispatch.Result, err error) error {
	if res.Cache != "" {
		x.c.Set(hdrCache, res.Cache)
	}
	if res.Cache == "hit" {
		x.c.Set(hdrModel, res.CachedModel)
	}
	if err != nil {
		return x.h.sendFailure(ctx, x, err)
	}
	x.h.offerJudge(x, res) // inference_judge.go
	x.c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return x.c.Status(res.UpstreamStatus).Send(x.buf.b)
}

// streamEnd is how a streamed call's Dispatch ended.
type streamEnd struct {
	res    dispatch.Result
	err    error
	panic  any
	status int // what the client got
}

// stream runs a streamed call. Dispatch runs on its own goroutine: until
// its Begin the handler waits, and answers an error (or a panic) that
// ended the call first like any other; once the stream's headers are set
// the handler returns (fasthttp sends headers only then) and fasthttp's
// body writer hands its writer to Begin and waits for the relay to end.
// done stops the connection watcher and cancels ctx.
func (x *exchange) stream(ctx context.Context, call *dispatch.Call, done func()) (handedOff bool, _ error) {
	if x.h.resumer != nil && directEligible(x.c) {
		return x.streamDirect(ctx, call, done)
	}
	x.begun, x.writer = make(chan struct{}), make(chan *bufio.Writer, 1)
	ended := make(chan streamEnd, 1)
	go func() {
		e := x.dispatchStream(ctx, call)
		done()
		ended <- e
	}()
	select {
	case e := <-ended:
		if e.panic != nil {
			panic(e.panic) // answered 500 by recoverPanic
		}
		return false, x.h.sendFailure(ctx, x, e.err)
	case <-x.begun:
	}
	endRequest := requestCancel(x.c)
	log := x.h.log
	x.c.Context().SetBodyStreamWriter(streamLogged(x.c, func(w *bufio.Writer) {
		x.writer <- w
		e := <-ended
		if e.panic != nil {
			log.Error("panic while streaming", slog.String("request_id", x.id), slog.Any("panic", e.panic))
		}
		endRequest()
		x.endRoot(e.status)
	}))
	return true, nil
}

// dispatchStream runs a streamed call and observes it; a panic ends it
// as a 500, for the caller to re-raise or log.
func (x *exchange) dispatchStream(ctx context.Context, call *dispatch.Call) (e streamEnd) {
	defer func() {
		if r := recover(); r != nil {
			e = streamEnd{panic: r, status: http.StatusInternalServerError}
		}
	}()
	e.res, e.err = x.h.dispatch.Dispatch(ctx, *call)
	e.status = x.h.dispatchStatus(e.err)
	x.observe(e.res, e.err)
	return e
}

// directEligible tells whether a stream can be written straight to the
// connection (streamDirect): an HTTP/1.1 request that keeps its
// connection (chunked encoding, and the connection goes on serving), and
// the first request fasthttp serves on it since it was accepted or handed
// back after a direct stream. A later request may have been pipelined
// behind an earlier one whose answer fasthttp still holds unflushed (it
// flushes only when no further request is buffered): written straight to
// the socket, the stream would overtake that answer. Such a stream takes
// fasthttp's body writer, which keeps the order. Streams that follow
// streams on a connection stay direct: each is the first request of the
// connection handed back after the one before.
func directEligible(c *fiber.Ctx) bool {
	rh := &c.Context().Request.Header
	return c.Context().Conn() != nil && rh.IsHTTP11() && !rh.ConnectionClose() && c.Context().ConnRequestNum() == 1
}

// streamDirect runs a streamed call on the handler's goroutine, the relay
// writing the answer straight to the client's connection (directStream):
// no goroutine hand-off lies between the upstream's first event and the
// socket. An error (or a panic) before Begin is answered like any other.
// Once the stream has ended the handler hijacks the connection without a
// response; the hijack handler, which fasthttp runs after the middleware
// has returned, sends the body's last chunk and serves the connection's
// next requests (connResumer), or closes it when the client left
// mid-stream, a panic cut the stream, or the response closes the
// connection. The access-log line (with the stream's duration and bytes:
// localStreamBytes) is written when the handler returns, the request's
// root span ended after it, by the hijack handler. A chat or text stream's
// body ends with its [DONE] event (directStream.Flush), before the call is
// released and metered. done stops the connection watcher and cancels
// ctx.
func (x *exchange) streamDirect(ctx context.Context, call *dispatch.Call, done func()) (handedOff bool, _ error) {
	ds := newDirectStream(x.c.Context().Conn())
	x.direct = ds
	defer func() { x.direct = nil }()
	e := x.dispatchStream(ctx, call)
	done()
	if !ds.begun {
		ds.release()
		if e.panic != nil {
			panic(e.panic) // answered 500 by recoverPanic
		}
		return false, x.h.sendFailure(ctx, x, e.err)
	}
	if e.panic != nil {
		x.h.log.Error("panic while streaming", slog.String("request_id", x.id), slog.Any("panic", e.panic))
	}
	keep := e.panic == nil && !x.c.Context().Response.Header.ConnectionClose()
	x.c.Locals(localStreamBytes, ds.n)
	rc := x.c.Context()
	rc.HijackSetNoResponse(true)
	// The root span ends in the hijack handler, after the access line.
	rc.Hijack(x.h.resumer.handler(ds, keep, func() { x.endRoot(e.status) }))
	return true, nil
}

// bodyBuffer collects a non-streamed body.
type bodyBuffer struct{ b []byte }

func (b *bodyBuffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }
func (b *bodyBuffer) Flush() error                { return nil }

// setDecisionHeaders explains the routing decision on the response. The
// numbers are formatted into a stack buffer that fasthttp copies, so the
// headers allocate nothing.
func setDecisionHeaders(c *fiber.Ctx, a *routing.Assignment) {
	h := &c.Context().Response.Header
	h.Set(hdrInstance, a.Instance.ID)
	h.Set(hdrModel, a.Instance.Model)
	if a.Policy != "" {
		h.Set(hdrPolicyOut, a.Policy)
	}
	var buf [32]byte
	h.SetBytesV(hdrDecisionUs, strconv.AppendInt(buf[:0], a.DecisionTime.Microseconds(), 10))
	h.SetBytesV(hdrBatchSize, strconv.AppendInt(buf[:0], int64(a.BatchSize), 10))
	h.SetBytesV(hdrPredictedQuality, strconv.AppendFloat(buf[:0], a.PredictedQuality, 'f', 4, 64))
	h.Set(hdrQualitySource, a.QualitySource.String()) // prior, index (operator-wide) or cluster (its own data)
	h.SetBytesV(hdrPredictedE2EMs, strconv.AppendFloat(buf[:0], float64(a.PredictedE2E)/float64(time.Millisecond), 'f', 1, 64))
	h.SetBytesV(hdrPredictedCostUSD, strconv.AppendFloat(buf[:0], a.PredictedCostUSD, 'g', 6, 64))
	h.SetBytesV(hdrQueueWaitMs, strconv.AppendFloat(buf[:0], float64(a.QueueWait)/float64(time.Millisecond), 'f', 1, 64))
	if len(a.Relaxed) > 0 {
		h.Set(hdrRelaxed, strings.Join(a.Relaxed, ","))
	} else {
		h.Del(hdrRelaxed)
	}
}

// modelCard is one entry of /v1/models (OpenAI's model object).
type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelCards lists "auto" and the key's cluster's served models.
func modelCards(p *tenants.Principal) []modelCard {
	created := int64(0)
	if p.Cluster != nil {
		created = p.Cluster.CreatedAt.Unix()
	}
	data := []modelCard{{ID: "auto", Object: "model", Created: created, OwnedBy: "routebalance"}}
	if cl, ok := p.RoutingCluster(); ok {
		for _, m := range servedModels(cl) {
			data = append(data, modelCard{ID: m, Object: "model", Created: created, OwnedBy: "routebalance"})
		}
	}
	return data
}

// models serves GET /v1/models: the cluster's served models plus "auto".
func (h *inference) models(c *fiber.Ctx) error {
	p, err := h.authenticate(c.UserContext(), c)
	if p == nil {
		return err
	}
	if _, ok := p.RoutingCluster(); !ok { // nothing, not even auto, is served
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "no_cluster", "", p.NoClusterReason())
	}
	return c.JSON(fiber.Map{"object": "list", "data": modelCards(p)})
}

// model serves GET /v1/models/{id}: one model of the list, or 404
// model_not_found in OpenAI's envelope. Ids may contain "/" (as
// "org/name" served model names do).
func (h *inference) model(c *fiber.Ctx) error {
	p, err := h.authenticate(c.UserContext(), c)
	if p == nil {
		return err
	}
	if _, ok := p.RoutingCluster(); !ok {
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "no_cluster", "", p.NoClusterReason())
	}
	id := strings.Clone(c.Params("+"))
	for _, m := range modelCards(p) {
		if m.ID == id {
			return c.JSON(m)
		}
	}
	return sendError(c, http.StatusNotFound, typeInvalidRequest, errCodeModelNotFound, "model",
		fmt.Sprintf("The model '%s' does not exist or is not served by this API key's cluster.", id))
}
