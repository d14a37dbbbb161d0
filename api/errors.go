package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
)

// errorBody is OpenAI's error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error types used in the envelope, as OpenAI names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeInsufficient   = "insufficient_quota"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable"
	typeUpstream       = "upstream_error"
)

// sendError writes OpenAI's error envelope with status; param and code may
// be empty.
func sendError(c *fiber.Ctx, status int, typ, code, param, msg string) error {
	d := errorDetail{Message: msg, Type: typ}
	if param != "" {
		d.Param = &param
	}
	if code != "" {
		d.Code = &code
	}
	return c.Status(status).JSON(errorBody{Error: d})
}

// httpError is an error that already knows its response. Handlers return
// it for problems found in the api layer itself (bad JSON, missing token).
type httpError struct {
	status         int
	typ, code, msg string
	param          string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(param, format string, a ...any) error {
	return &httpError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "invalid_request", param: param, msg: fmt.Sprintf(format, a...)}
}

func unauthorized(msg string) error {
	return &httpError{status: http.StatusUnauthorized, typ: typeAuthentication, code: "invalid_credentials", msg: msg}
}

var errPanic = errors.New("internal error (panic recovered)")

// errorHandler turns the errors handlers return into HTTP responses: it
// is fiber's ErrorHandler (fiber's own errors such as 404, 405 and 413
// before any handler ran) and is called by accessLog for every error a
// handler returns. The inference handlers answer routing/dispatch's
// errors themselves (inference_errors.go), with the same table for the
// routing errors both can see (routeFailure).
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var he *httpError
	var fe *routing.FieldError
	var fbe *fiber.Error
	var je *json.SyntaxError
	switch {
	case errors.As(err, &he):
		return sendError(c, he.status, he.typ, he.code, he.param, he.msg)
	case errors.As(err, &fe):
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "invalid_value", fe.Field, fe.Error())
	case errors.Is(err, tenants.ErrNotFound):
		return sendError(c, http.StatusNotFound, typeNotFound, "not_found", "", "resource not found")
	case errors.Is(err, tenants.ErrConflict):
		return sendError(c, http.StatusConflict, typeInvalidRequest, "conflict", "", err.Error())
	case errors.Is(err, tenants.ErrUnauthorized):
		return sendError(c, http.StatusUnauthorized, typeAuthentication, "invalid_credentials", "", "invalid credentials")
	case errors.Is(err, routing.ErrUnknownModel), errors.Is(err, routing.ErrNoHealthyInstance),
		errors.Is(err, routing.ErrNoCapacity), errors.Is(err, routing.ErrClosed):
		f, _ := routeFailure(err, s.cfg.Inference.withDefaults().RetryAfter, nil) // the inference path's table
		return f.send(c)
	case errors.Is(err, context.DeadlineExceeded):
		return sendError(c, http.StatusGatewayTimeout, typeServer, "timeout", "", "request timed out")
	case errors.As(err, &je):
		return sendError(c, http.StatusBadRequest, typeInvalidRequest, "invalid_json", "", "malformed JSON: "+err.Error())
	case errors.As(err, &fbe):
		return s.fiberError(c, fbe)
	}
	c.Locals(localErrLogged, err.Error())
	s.log.ErrorContext(c.UserContext(), "request failed", slog.String("request_id", requestIDOf(c)), slog.Any("err", err))
	return sendError(c, http.StatusInternalServerError, typeServer, "internal_error", "", "internal server error")
}

func (s *Server) fiberError(c *fiber.Ctx, e *fiber.Error) error {
	switch e.Code {
	case http.StatusNotFound:
		return sendError(c, e.Code, typeNotFound, "not_found", "", fmt.Sprintf("no route for %s %s", c.Method(), c.Path()))
	case http.StatusMethodNotAllowed:
		if !s.pathHasRoute(c.Path()) {
			// Only the dashboard's GET catch-all knows this path: for an
			// API client it does not exist.
			return sendError(c, http.StatusNotFound, typeNotFound, "not_found", "", fmt.Sprintf("no route for %s %s", c.Method(), c.Path()))
		}
		return sendError(c, e.Code, typeInvalidRequest, "method_not_allowed", "", fmt.Sprintf("method %s is not allowed on %s", c.Method(), c.Path()))
	case http.StatusRequestEntityTooLarge:
		return sendError(c, e.Code, typeInvalidRequest, "body_too_large", "", fmt.Sprintf("request body exceeds the limit of %d bytes", s.cfg.BodyLimit))
	case http.StatusRequestHeaderFieldsTooLarge:
		return sendError(c, e.Code, typeInvalidRequest, "headers_too_large", "",
			fmt.Sprintf("the request line and headers exceed the limit of %d bytes (the server's --max-header-bytes); send shorter headers (cookies, tokens)", s.cfg.MaxHeaderBytes))
	case http.StatusRequestTimeout:
		return sendError(c, e.Code, typeInvalidRequest, "timeout", "", "request was not read in time")
	}
	typ := typeInvalidRequest
	if e.Code >= 500 {
		typ = typeServer
	}
	return sendError(c, e.Code, typ, "", "", withoutRequestEcho(e.Message))
}

// withoutRequestEcho shortens fasthttp's "error when reading request …"
// messages to what is wrong: they quote the raw request (its Authorization
// header, and whatever a proxy in front added), which is never answered.
func withoutRequestEcho(msg string) string {
	rest, ok := strings.CutPrefix(msg, "error when reading request ")
	if !ok {
		return msg
	}
	if i := strings.IndexAny(rest, "\""); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, ". Buffer size="); i >= 0 {
		rest = rest[:i]
	}
	rest = strings.TrimSuffix(strings.TrimSpace(rest), " in")
	return "malformed HTTP request " + strings.TrimSuffix(rest, ".")
}

// pathHasRoute reports whether a route other than a bare catch-all ("/*")
// matches path for some method. Used to tell 405 from 404.
func (s *Server) pathHasRoute(path string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, r := range s.app.GetRoutes(true) {
		if r.Path == "/*" || r.Path == "*" {
			continue
		}
		if routeMatches(strings.Split(strings.Trim(r.Path, "/"), "/"), segs) {
			return true
		}
	}
	return false
}

// routeMatches matches fiber route segments (":param", "*") against path
// segments.
func routeMatches(route, path []string) bool {
	for i, seg := range route {
		if seg == "*" {
			return true
		}
		if i >= len(path) {
			return false
		}
		if strings.HasPrefix(seg, ":") {
			if path[i] == "" {
				return false
			}
			continue
		}
		if seg != path[i] {
			return false
		}
	}
	return len(route) == len(path)
}
