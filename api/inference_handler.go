package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
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
	hdrPredictedE2EMs    = "X-RouteBalance-Predicted-E2E-Ms"
	hdrPredictedCostUSD  = "X-RouteBalance-Predicted-Cost-Usd"
	hdrRelaxed           = "X-RouteBalance-Relaxed"
	hdrQueueWaitMs       = "X-RouteBalance-Queue-Wait-Ms"
	hdrFailedOver        = "X-RouteBalance-Failed-Over"
	statusClientClosed   = 499 // nginx's "client closed request"; never seen by the client
	errCodeModelNotFound = "model_not_found"
)

// errAbandoned is the outcome of an assignment released by the deferred
// safety net: the handler ended (panic or a path that forgot) while still
// holding it.
var errAbandoned = errors.New("request abandoned while holding its instance")

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
		id = id + "-" + newRequestID()[:8]
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

// exchange is one request's journey; it owns the Assignment until it is
// released and records one usage event at the end.
type exchange struct {
	h        *inference
	id       string
	p        *tenants.Principal
	cluster  *routing.Cluster
	body     *completionBody
	arrival  time.Time
	held     *routing.Assignment
	recorded bool
	limit    limits.Ticket // rate-limit hold (api/ratelimit.go), released once
	root     trace.Span    // the request's root span, ended by endRoot
}

// release frees the held assignment (if any) with o.
func (x *exchange) release(o routing.Outcome) {
	if x.held != nil {
		x.held.Release(o)
		x.held = nil
	}
}

// record sends the usage event once. a is the assignment the request ended
// on (nil when none was granted: nothing is recorded then).
func (x *exchange) record(a *routing.Assignment, res *proxy.Result, status string, httpStatus int) {
	x.observeLimits(res)
	if x.recorded || a == nil || x.h.deps.Meter == nil {
		return
	}
	x.recorded = true
	if x.root != nil && x.root.IsRecording() {
		_, sp := x.h.trace.start(trace.ContextWithSpan(context.Background(), x.root), "meter")
		sp.SetAttributes(attrResult.String(status), attrStatusCode.Int(httpStatus))
		defer sp.End()
	}
	now := x.h.clock.Now()
	ev := billing.UsageEvent{
		RequestID: x.id, TenantID: x.p.Tenant.ID, KeyID: x.p.Key.ID, ClusterID: x.cluster.ID,
		InstanceID: a.Instance.ID, Model: a.Instance.Model, Policy: a.Policy,
		PredictedQuality: a.PredictedQuality, Status: status, HTTPStatus: httpStatus,
		StartedAt: x.arrival, FinishedAt: now, E2E: now.Sub(x.arrival),
	}
	if res != nil {
		ev.PromptTokens, ev.OutputTokens = res.Outcome.PromptTokens, res.Outcome.OutputTokens
		ev.CostUSD = a.Instance.CostUSD(float64(ev.PromptTokens), float64(ev.OutputTokens))
		switch {
		case res.Outcome.TTFT > 0:
			// the client's TTFT: its E2E less the instance's decode time
			ev.TTFT = ev.E2E - (res.Outcome.E2E - res.Outcome.TTFT)
		case res.Outcome.Err == nil && x.body != nil && !x.body.stream:
			// a non-streamed client gets its first token with the whole
			// answer (the proxy reports no TTFT for it: see routing.Outcome)
			ev.TTFT = ev.E2E
		}
	}
	x.h.deps.Meter.Record(ev)
}

// complete serves POST /v1/chat/completions and /v1/completions.
func (h *inference) complete(ep proxy.Endpoint) fiber.Handler {
	spanName := "POST " + string(ep)
	return func(c *fiber.Ctx) (err error) {
		x := &exchange{h: h, arrival: h.clock.Now(), id: exchangeID(c)}
		// The request context carries the server's request deadline; a
		// stream takes its cancel over (requestCancel) because it outlives
		// the handler. Client departure is noticed by the connection
		// watcher below, which cancels ctx.
		ctx, cancel := context.WithCancel(c.UserContext())
		handedOff := false
		defer func() {
			if !handedOff {
				cancel()
			}
		}()
		// The root span ends last, when the answer is known; a stream's
		// goroutine takes it over with the rest of the exchange.
		ctx = h.trace.extract(ctx, c)
		ctx, x.root = h.trace.startServer(ctx, spanName)
		if x.root.IsRecording() {
			x.root.SetAttributes(attrRequestID.String(x.id))
			c.Locals(localTraceID, x.root.SpanContext().TraceID().String())
		}
		defer func() {
			if !handedOff {
				status := c.Response().StatusCode()
				if err != nil {
					status = errorStatus(err)
				}
				x.endRoot(status)
			}
		}()
		defer func() { x.release(routing.Outcome{Err: errAbandoned}) }()

		actx, asp := h.trace.start(ctx, "auth")
		p, err := h.authenticate(actx, c)
		if asp.IsRecording() {
			if p == nil {
				asp.SetStatus(codes.Error, "not authenticated")
			} else {
				asp.SetAttributes(attrTenant.String(p.Tenant.ID))
			}
		}
		asp.End()
		if p == nil {
			return err
		}
		x.p = p
		if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
			return sendError(c, http.StatusUnsupportedMediaType, typeInvalidRequest, "", "", "compressed request bodies are not accepted")
		}
		body, err := parseCompletion(c.BodyRaw(), ep)
		if err != nil {
			return sendParamError(c, err)
		}
		x.body = body
		if err := body.rb.parseHeaders(func(k string) string { return strings.Clone(c.Get(k)) }); err != nil { // fasthttp reuses header memory: copy
			return sendParamError(c, err)
		}
		// Body options win over headers: parsed on top of them.
		if raw, ok := present(body.fields, "routebalance"); ok {
			if err := body.rb.parseBody(raw); err != nil {
				return sendParamError(c, err)
			}
		}
		weights, err := resolveWeights(&body.rb, p)
		if err != nil {
			return sendParamError(c, err)
		}
		cl, ok := p.RoutingCluster()
		if !ok {
			return sendError(c, http.StatusBadRequest, typeInvalidRequest, "no_cluster", "", p.NoClusterReason())
		}
		x.cluster = cl
		if x.root.IsRecording() {
			x.root.SetAttributes(attrCluster.String(cl.ID), attrStream.Bool(body.stream))
		}
		if h.deps.Router == nil {
			return sendError(c, http.StatusServiceUnavailable, typeUnavailable, "not_configured", "", "no router is configured on this server")
		}
		if refused, err := h.checkSpend(c, p); refused {
			return err
		}
		if refused, err := h.admitLimits(c, x); refused {
			return err
		}
		defer func() {
			if !handedOff {
				x.releaseLimits()
			}
		}()
		slo := resolveSLO(&body.rb, p)
		req := &routing.Request{
			ID: x.id, Prompt: body.prompt, PromptTokens: body.promptTokens, MaxTokens: body.maxTokens,
			Model: body.model, Weights: weights, SLO: slo, BudgetUSD: body.rb.budgetUSD,
			Workflow: body.rb.workflow, Policy: body.rb.policy, Arrival: x.arrival, Priority: routing.PriorityNormal,
		}
		if body.rb.priority != nil {
			req.Priority = *body.rb.priority
		}
		budget := req.BudgetUSD
		if slo.MaxCostUSD > 0 && (budget == 0 || slo.MaxCostUSD < budget) {
			budget = slo.MaxCostUSD
		}

		stopWatch := watchClient(c.Context().Conn(), h.cfg.ClientCheckInterval, cancel)
		defer func() {
			if !handedOff {
				stopWatch()
			}
		}()

		var (
			a        *routing.Assignment
			resp     *proxy.Response
			firstErr error
			usp      trace.Span // the upstream span of the open attempt
		)
		for attempt := 0; ; attempt++ {
			rctx, rsp, t0 := h.trace.startNow(ctx, "route")
			a, err = h.deps.Router.Route(rctx, cl, req)
			if rsp.IsRecording() {
				t1 := time.Now()
				h.trace.traceRoute(rctx, rsp, t0, t1, attempt, a, err)
				rsp.End(trace.WithTimestamp(t1))
				if err == nil && x.root.IsRecording() {
					x.root.SetAttributes(attrModel.String(a.Instance.Model), attrPolicy.String(a.Policy), attrInstance.String(a.Instance.ID))
				}
			} else {
				rsp.End()
			}
			if err != nil {
				if firstErr != nil { // the fail-over found no other instance
					return h.sendUnreachable(c, x, firstErr)
				}
				return h.sendRouteError(ctx, c, x, err)
			}
			x.held = a
			setDecisionHeaders(c, a)
			call := &proxy.Call{
				Endpoint: ep, Body: body.fields, Stream: body.stream, IncludeUsage: body.includeUsage,
				MaxTokens: a.MaxTokens, BudgetUSD: budget, PromptTokens: body.promptTokens, RequestID: x.id,
			}
			// The upstream span's context goes to Open, so the
			// instance's traceparent names it as the parent.
			var uctx context.Context
			uctx, usp = h.trace.start(ctx, "upstream")
			if usp.IsRecording() {
				usp.SetAttributes(attrInstance.String(a.Instance.ID), attrStream.Bool(body.stream))
			}
			resp, err = h.proxy.Open(uctx, &a.Instance, call)
			if err == nil {
				break
			}
			endUpstream(usp, nil, err)
			var se *proxy.StatusError
			switch {
			case errors.Is(err, proxy.ErrUnreachable):
				x.release(routing.Outcome{Err: err, Upstream: true})
				if attempt == 0 {
					firstErr = err
					retry := *req // the first ticket may still refer to req
					retry.Exclude = append(append([]string(nil), req.Exclude...), a.Instance.ID)
					req = &retry
					c.Set(hdrFailedOver, a.Instance.ID)
					continue
				}
				x.record(a, nil, proxy.ResultError, http.StatusBadGateway)
				return h.sendUnreachable(c, x, err)
			case errors.As(err, &se):
				x.release(routing.Outcome{Err: err, Upstream: se.InstanceFault()})
				status := h.sendUpstreamStatus(c, se)
				x.record(a, nil, proxy.ResultError, status)
				return nil
			case errors.Is(err, context.DeadlineExceeded):
				x.release(routing.Outcome{Err: err})
				x.record(a, nil, proxy.ResultError, http.StatusGatewayTimeout)
				return sendError(c, http.StatusGatewayTimeout, typeServer, "timeout", "", "the request exceeded the server's time limit")
			default: // the client went away (or the server is stopping)
				x.release(routing.Outcome{Err: err})
				x.record(a, nil, proxy.ResultCancelled, statusClientClosed)
				return sendError(c, statusClientClosed, typeInvalidRequest, "client_closed", "", "the client closed the request")
			}
		}

		if !body.stream {
			var buf bodyBuffer
			res := resp.Relay(ctx, &buf, a)
			endUpstream(usp, &res, nil)
			x.release(res.Outcome)
			h.remember(x, a)
			switch res.Status {
			case proxy.ResultOK:
				x.record(a, &res, res.Status, http.StatusOK)
				c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
				return c.Status(resp.Status).Send(buf.b)
			case proxy.ResultCancelled:
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					x.record(a, &res, proxy.ResultError, http.StatusGatewayTimeout)
					return sendError(c, http.StatusGatewayTimeout, typeServer, "timeout", "", "the request exceeded the server's time limit")
				}
				x.record(a, &res, res.Status, statusClientClosed)
				return sendError(c, statusClientClosed, typeInvalidRequest, "client_closed", "", "the client closed the request")
			default:
				x.record(a, &res, res.Status, http.StatusBadGateway)
				return sendError(c, http.StatusBadGateway, typeUpstream, "upstream_error", "",
					fmt.Sprintf("instance %s failed while answering: %v", a.Instance.ID, res.Outcome.Err))
			}
		}

		// Streaming: headers go out when the handler returns; the body is
		// written by fasthttp's stream-writer goroutine, which from here on
		// owns the assignment, the context and the connection watcher.
		c.Status(http.StatusOK)
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		c.Set("X-Accel-Buffering", "no")
		handedOff = true
		endRequest := requestCancel(c)
		x.held = nil
		h.remember(x, a)
		log := h.log
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			res := proxy.Result{Status: proxy.ResultError}
			sent := &tokenTally{a: a}
			defer func() {
				if r := recover(); r != nil {
					log.Error("panic while relaying a stream", slog.String("request_id", x.id), slog.Any("panic", r))
					// meter what had been streamed before the panic
					res.Outcome = routing.Outcome{Err: fmt.Errorf("panic while relaying: %v", r),
						PromptTokens: body.promptTokens, OutputTokens: sent.n}
					res.Status = proxy.ResultError
					resp.Close()
				}
				endUpstream(usp, &res, nil)
				stopWatch()
				cancel()
				endRequest()
				a.Release(res.Outcome)
				status := http.StatusOK
				if res.Status == proxy.ResultCancelled {
					status = statusClientClosed
				}
				x.record(a, &res, res.Status, status)
				x.releaseLimits()
				x.endRoot(status)
			}()
			res = resp.Relay(ctx, w, sent)
		})
		return nil
	}
}

// tokenTally forwards streamed-token progress to the assignment and keeps
// the last count (owned by the stream goroutine).
type tokenTally struct {
	a *routing.Assignment
	n int
}

func (t *tokenTally) Progress(n int) {
	t.n = n
	t.a.Progress(n)
}

// bodyBuffer collects a non-streamed body.
type bodyBuffer struct{ b []byte }

func (b *bodyBuffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }
func (b *bodyBuffer) Flush() error                { return nil }

// setDecisionHeaders explains the routing decision on the response.
func setDecisionHeaders(c *fiber.Ctx, a *routing.Assignment) {
	c.Set(hdrInstance, a.Instance.ID)
	c.Set(hdrModel, a.Instance.Model)
	if a.Policy != "" {
		c.Set(hdrPolicyOut, a.Policy)
	}
	c.Set(hdrDecisionUs, strconv.FormatInt(a.DecisionTime.Microseconds(), 10))
	c.Set(hdrBatchSize, strconv.Itoa(a.BatchSize))
	c.Set(hdrPredictedQuality, strconv.FormatFloat(a.PredictedQuality, 'f', 4, 64))
	c.Set(hdrPredictedE2EMs, strconv.FormatFloat(float64(a.PredictedE2E)/float64(time.Millisecond), 'f', 1, 64))
	c.Set(hdrPredictedCostUSD, strconv.FormatFloat(a.PredictedCostUSD, 'g', 6, 64))
	c.Set(hdrQueueWaitMs, strconv.FormatFloat(float64(a.QueueWait)/float64(time.Millisecond), 'f', 1, 64))
	if len(a.Relaxed) > 0 {
		c.Set(hdrRelaxed, strings.Join(a.Relaxed, ","))
	} else {
		c.Context().Response.Header.Del(hdrRelaxed)
	}
}

// sendRouteError maps the router's errors to HTTP.
func (h *inference) sendRouteError(ctx context.Context, c *fiber.Ctx, x *exchange, err error) error {
	switch {
	case errors.Is(err, routing.ErrUnknownModel):
		models := append(servedModels(x.cluster), "auto")
		return sendError(c, http.StatusNotFound, typeInvalidRequest, errCodeModelNotFound, "model",
			fmt.Sprintf("The model `%s` does not exist in this cluster; available: %s", x.body.model, strings.Join(models, ", ")))
	case errors.Is(err, routing.ErrNoHealthyInstance):
		return sendError(c, http.StatusServiceUnavailable, typeUnavailable, "no_healthy_instance", "",
			"no healthy instance can serve this request right now")
	case errors.Is(err, routing.ErrNoCapacity):
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
		return sendError(c, http.StatusTooManyRequests, typeRateLimit, "no_capacity", "",
			"every instance that can serve this request is at capacity; retry later")
	case errors.Is(err, routing.ErrClosed):
		return sendError(c, http.StatusServiceUnavailable, typeUnavailable, "shutting_down", "", "the server is shutting down")
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return sendError(c, http.StatusGatewayTimeout, typeServer, "timeout", "", "the request exceeded the server's time limit")
	case ctx.Err() != nil:
		return sendError(c, statusClientClosed, typeInvalidRequest, "client_closed", "", "the client closed the request")
	}
	h.log.Error("route", slog.String("request_id", x.id), slog.String("error", err.Error()))
	return sendError(c, http.StatusInternalServerError, typeServer, "", "", "routing failed")
}

func (h *inference) sendUnreachable(c *fiber.Ctx, x *exchange, err error) error {
	return sendError(c, http.StatusBadGateway, typeUpstream, "upstream_unreachable", "",
		"no instance could be reached: "+err.Error())
}

// sendUpstreamStatus relays an upstream error answer and returns the
// status sent: client errors (4xx) keep their status and message so the
// caller can fix the request; server errors become 502 with the upstream's
// message. An upstream 401/403 is RouteBalance's credential problem, not
// the client's, so it is a 502 too.
func (h *inference) sendUpstreamStatus(c *fiber.Ctx, se *proxy.StatusError) int {
	code := se.Code
	if _, err := strconv.Atoi(code); err == nil {
		code = "" // vLLM puts the numeric status there
	}
	switch {
	case se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden:
		_ = sendError(c, http.StatusBadGateway, typeUpstream, "upstream_auth", "",
			fmt.Sprintf("instance %s rejected the registered upstream API key (%d): %s", se.InstanceID, se.Status, se.Message))
		return http.StatusBadGateway
	case se.Status == http.StatusTooManyRequests:
		_ = sendError(c, http.StatusTooManyRequests, typeRateLimit, code, se.Param, se.Message)
		return se.Status
	case se.Status >= 400 && se.Status < 500:
		if code == "" && se.Status == http.StatusNotFound {
			code = errCodeModelNotFound
		}
		_ = sendError(c, se.Status, typeInvalidRequest, code, se.Param, se.Message)
		return se.Status
	}
	_ = sendError(c, http.StatusBadGateway, typeUpstream, "upstream_error", "",
		fmt.Sprintf("instance %s answered %d: %s", se.InstanceID, se.Status, se.Message))
	return http.StatusBadGateway
}

// models serves GET /v1/models: the cluster's served models plus "auto".
func (h *inference) models(c *fiber.Ctx) error {
	p, err := h.authenticate(c.UserContext(), c)
	if p == nil {
		return err
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	created := int64(0)
	if p.Cluster != nil {
		created = p.Cluster.CreatedAt.Unix()
	}
	data := []model{{ID: "auto", Object: "model", Created: created, OwnedBy: "routebalance"}}
	if cl, ok := p.RoutingCluster(); ok {
		for _, m := range servedModels(cl) {
			data = append(data, model{ID: m, Object: "model", Created: created, OwnedBy: "routebalance"})
		}
	}
	return c.JSON(fiber.Map{"object": "list", "data": data})
}

// checkSpend runs the spend guard (when one is wired). When it refuses,
// the answer (402, or 500 when the check itself failed) is written and
// refused is true.
func (h *inference) checkSpend(c *fiber.Ctx, p *tenants.Principal) (refused bool, _ error) {
	if h.deps.Spend == nil {
		return false, nil
	}
	l := billing.Limits{TenantID: p.Tenant.ID, KeyID: p.Key.ID, TenantMonthlyUSD: p.Settings.SLO.MonthlyBudgetUSD}
	if p.Key.SLO != nil {
		l.KeyMonthlyUSD = p.Key.SLO.MonthlyBudgetUSD
	}
	err := h.deps.Spend.Check(l)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, billing.ErrBudgetExceeded):
		return true, sendError(c, http.StatusPaymentRequired, typeInsufficient, "budget_exceeded", "", err.Error())
	case errors.Is(err, billing.ErrPaymentRequired):
		return true, sendError(c, http.StatusPaymentRequired, typeInsufficient, "payment_required", "", err.Error())
	}
	h.log.Error("spend check", slog.String("tenant_id", p.Tenant.ID), slog.String("error", err.Error()))
	return true, sendError(c, http.StatusServiceUnavailable, typeServer, "spend_check_unavailable", "", "could not check the spend limit; try again")
}
