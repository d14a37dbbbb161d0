package api

import (
	"github.com/gofiber/fiber/v2"
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
