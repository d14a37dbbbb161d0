package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/proxy"
)

// failure is one error answer of the inference API.
type failure struct {
	status         int
	typ, code, msg string
	param          string
	retry          bool // send Retry-After: retryAfter in whole seconds, at least 1
	retryAfter     time.Duration
	log            bool // a failure of the server: logged
}

// failureOf is the inference API's mapping of a dispatch error to its
// answer (the table in README.md); x, when known, names the request in
// the messages that quote it.
func (h *inference) failureOf(err error, x *exchange) failure {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		return failure{status: http.StatusInternalServerError, typ: typeServer, msg: "internal server error", log: true}
	}
	switch de.Step {
	case dispatch.StepSpend:
		return spendFailure(de.Err)
	case dispatch.StepLimit:
		if de.Refusal.Unavailable { // a shared limiter that fails closed
			return failure{status: http.StatusServiceUnavailable, typ: typeServer, code: errCodeLimiterUnavailable,
				msg: de.Refusal.Message(), retry: true, retryAfter: de.Refusal.RetryAfter}
		}
		return failure{status: http.StatusTooManyRequests, typ: typeRateLimit, code: errCodeRateLimited,
			msg: de.Refusal.Message(), retry: true, retryAfter: de.Refusal.RetryAfter}
	case dispatch.StepRoute:
		if f, ok := routeFailure(de.Err, h.cfg.RetryAfter, x); ok {
			return f
		}
		return failure{status: http.StatusInternalServerError, typ: typeServer, msg: "routing failed", log: true}
	}
	var se *proxy.StatusError
	switch {
	case errors.As(err, &se):
		return upstreamFailure(se)
	case errors.Is(err, proxy.ErrUnreachable):
		return failure{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_unreachable",
			msg: "no instance could be reached: " + de.Err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return failure{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout", msg: "the request exceeded the server's time limit"}
	case de.Step == dispatch.StepRelay && !errors.Is(err, context.Canceled):
		return failure{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_error",
			msg: fmt.Sprintf("instance %s failed while answering: %v", de.Instance, de.Err)}
	}
	// the client went away (or the server is stopping)
	return failure{status: statusClientClosed, typ: typeInvalidRequest, code: "client_closed", msg: "the client closed the request"}
}

// spendFailure answers the spend guard: 402 for a spent budget or an
// unpaid subscription, 503 when the check itself failed.
func spendFailure(err error) failure {
	switch {
	case errors.Is(err, billing.ErrBudgetExceeded):
		return failure{status: http.StatusPaymentRequired, typ: typeInsufficient, code: "budget_exceeded", msg: err.Error()}
	case errors.Is(err, billing.ErrPaymentRequired):
		return failure{status: http.StatusPaymentRequired, typ: typeInsufficient, code: "payment_required", msg: err.Error()}
	}
	return failure{status: http.StatusServiceUnavailable, typ: typeServer, code: "spend_check_unavailable", msg: "could not check the spend limit; try again", log: true}
}

// routeFailure answers the router's errors (ok false for any other): the
// one status of each, used by the inference path and the error handler.
// ErrNoCapacity is 429 with Retry-After (retryAfter): the cluster is
// saturated, waiting helps, as with a rate limit; 503 is kept for what
// waiting may not mend (no healthy instance, shutting down). x, when
// known, names the request's model and cluster in the 404.
func routeFailure(err error, retryAfter time.Duration, x *exchange) (failure, bool) {
	switch {
	case errors.Is(err, routing.ErrUnknownModel):
		msg := err.Error()
		if x != nil && x.cluster != nil {
			msg = unknownModelMessage(x)
		}
		return failure{status: http.StatusNotFound, typ: typeInvalidRequest, code: errCodeModelNotFound, param: "model", msg: msg}, true
	case errors.Is(err, routing.ErrModelDisabled):
		// As OpenAI answers a project without access to a model: 403, not
		// 503 (waiting does not mend it; the owner must enable an
		// instance). The scheduler decided it (the metric's
		// reason="model_disabled" reads the same error); the cluster only
		// words the message.
		return failure{status: http.StatusForbidden, typ: typeInvalidRequest, code: errCodeModelDisabled, param: "model", msg: disabledModelMessage(x)}, true
	case errors.Is(err, routing.ErrNoHealthyInstance):
		return failure{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "no_healthy_instance",
			msg: "no healthy instance can serve this request right now"}, true
	case errors.Is(err, routing.ErrNoCapacity):
		return failure{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "no_capacity",
			msg: "every instance that can serve this request is at capacity; retry later", retry: true, retryAfter: retryAfter}, true
	case errors.Is(err, routing.ErrClosed):
		return failure{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "shutting_down", msg: "the server is shutting down"}, true
	case errors.Is(err, context.DeadlineExceeded):
		return failure{status: http.StatusGatewayTimeout, typ: typeServer, code: "timeout", msg: "the request exceeded the server's time limit"}, true
	case errors.Is(err, context.Canceled):
		return failure{status: statusClientClosed, typ: typeInvalidRequest, code: "client_closed", msg: "the client closed the request"}, true
	}
	return failure{}, false
}

// errCodeModelDisabled is the code of a request for a model whose every
// instance in the cluster is disabled.
const errCodeModelDisabled = "model_disabled"

// disabledModelMessage words the 403 of routing.ErrModelDisabled (every
// instance of the request's model, every instance of the endpoint's kind
// for auto, is disabled by the cluster's owner): the model, the cluster
// and which models are enabled, read from the cluster the request was
// routed in. Without that cluster (x nil: the error handler) it names
// what it can.
func disabledModelMessage(x *exchange) string {
	if x == nil || x.body == nil {
		return "The model is disabled by the cluster's owner: every instance of it is disabled"
	}
	model := x.body.model
	if x.cluster == nil {
		return fmt.Sprintf("The model `%s` is disabled by the cluster's owner: every instance of it is disabled", model)
	}
	kind := routing.KindChat
	if strings.HasSuffix(x.c.Path(), "/embeddings") {
		kind = routing.KindEmbedding
	}
	auto := (&routing.Request{Model: model}).AnyModel()
	name := x.cluster.ID
	if auto {
		return fmt.Sprintf("The model `%s` cannot be served: every %s instance of cluster %q is disabled by the cluster's owner; enable one (PATCH /api/v1/clusters/{id}/instances/{iid} {\"disabled\": false})", model, kind, name)
	}
	matched := 0
	var enabled []string
	for _, in := range x.cluster.Instances {
		if in.Kind.Embedding() != kind.Embedding() {
			continue
		}
		if !in.Disabled && !slices.Contains(enabled, in.Model) {
			enabled = append(enabled, in.Model)
		}
		if in.Model == model {
			matched++
		}
	}
	msg := fmt.Sprintf("The model `%s` is disabled by the cluster's owner: its %d instance(s) in cluster %q are disabled", model, matched, name)
	if len(enabled) > 0 {
		sort.Strings(enabled)
		msg += "; enabled: " + strings.Join(enabled, ", ")
	}
	return msg
}

// unknownModelMessage names what the request's endpoint can serve: the
// embedding models and auto for /v1/embeddings, every model but not auto
// for /tokenize and /detokenize (passed to any instance of the named
// model), the chat models and auto otherwise (the scheduler never routes
// across kinds).
func unknownModelMessage(x *exchange) string {
	path := x.c.Path()
	kind, anyKind, auto := routing.KindChat, false, ", auto"
	switch {
	case strings.HasSuffix(path, "/embeddings"):
		kind = routing.KindEmbedding
	case strings.HasSuffix(path, "tokenize"):
		anyKind, auto = true, ""
	}
	var models []string
	for _, in := range x.cluster.Instances {
		if !in.Disabled && (anyKind || in.Kind.Embedding() == kind.Embedding()) && !slices.Contains(models, in.Model) {
			models = append(models, in.Model)
		}
	}
	if len(models) == 0 {
		return fmt.Sprintf("The model `%s` cannot be served: this cluster has no %s instance enabled (an instance's kind is set when it is registered)", x.body.model, kind)
	}
	sort.Strings(models)
	return fmt.Sprintf("The model `%s` does not exist in this cluster; available: %s%s", x.body.model, strings.Join(models, ", "), auto)
}

// upstreamFailure relays an upstream error answer: client errors (4xx)
// keep their status and message so the caller can fix the request; server
// errors become 502 with the upstream's message. An upstream 401/403 is
// RouteBalance's credential problem, not the client's, so it is a 502 too.
func upstreamFailure(se *proxy.StatusError) failure {
	code := se.Code
	if _, err := strconv.Atoi(code); err == nil {
		code = "" // vLLM puts the numeric status there
	}
	switch {
	case se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden:
		return failure{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_auth",
			msg: fmt.Sprintf("instance %s rejected the registered upstream API key (%d): %s", se.InstanceID, se.Status, se.Message)}
	case se.Status == http.StatusTooManyRequests:
		return failure{status: se.Status, typ: typeRateLimit, code: code, param: se.Param, msg: se.Message}
	case se.Status >= 400 && se.Status < 500:
		if code == "" && se.Status == http.StatusNotFound {
			code = errCodeModelNotFound
		}
		return failure{status: se.Status, typ: typeInvalidRequest, code: code, param: se.Param, msg: se.Message}
	}
	return failure{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_error",
		msg: fmt.Sprintf("instance %s answered %d: %s", se.InstanceID, se.Status, se.Message)}
}

// dispatchStatus is the HTTP status a dispatch error is answered with
// (200 for nil): dispatch.Deps.Status, so usage events record what the
// client got.
func (h *inference) dispatchStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return h.failureOf(err, nil).status
}

// sendFailure writes the answer of a dispatch error.
func (h *inference) sendFailure(ctx context.Context, x *exchange, err error) error {
	f := h.failureOf(err, x)
	if f.log {
		h.log.ErrorContext(ctx, "dispatch", slog.String("request_id", x.id), slog.String("error", err.Error()))
	}
	return f.send(x.c)
}

// send writes the failure's answer (with Retry-After when it has one).
func (f failure) send(c *fiber.Ctx) error {
	if f.retry {
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(max(1, int64((f.retryAfter+time.Second-1)/time.Second)), 10))
	}
	return sendError(c, f.status, f.typ, f.code, f.param, f.msg)
}
