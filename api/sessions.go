package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/tenants"
)

// mountSessions registers logout, password change and revoke-all; all
// three need an access token.
//
//	POST   /logout              → 204: the caller's login (its refresh-token family) is revoked
//	POST   /password            {old_password,new_password} → 200 {access_token,refresh_token,…}: every session of the user is revoked, a new one starts
//	POST   /sessions/revoke-all → 204: every session of the user is revoked (this one included)
//	DELETE /sessions            → 204: the same as revoke-all
func (s *Server) mountSessions(r fiber.Router) {
	a := authed{r: r, auth: s.requireSession}
	a.Post("/logout", s.logout)
	a.Post("/password", s.changePassword)
	a.Post("/sessions/revoke-all", s.revokeAllSessions)
	a.Delete("/sessions", s.revokeAllSessions)
}

func sessionOf(c *fiber.Ctx) tenants.Session {
	sess, _ := c.Locals(localSession).(tenants.Session)
	return sess
}

func (s *Server) logout(c *fiber.Ctx) error {
	if err := s.deps.Tenants.Logout(c.UserContext(), sessionOf(c)); err != nil {
		if errors.Is(err, tenants.ErrUnauthorized) {
			return unauthorized("invalid or expired access token")
		}
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) revokeAllSessions(c *fiber.Ctx) error {
	if _, err := s.deps.Tenants.RevokeAllSessions(c.UserContext(), sessionOf(c)); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) changePassword(c *fiber.Ctx) error {
	var in tenants.PasswordChange
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	pair, err := s.deps.Tenants.ChangePassword(c.UserContext(), sessionOf(c), c.IP(), in)
	if errors.Is(err, tenants.ErrTooManyAttempts) {
		return tooManyAttempts(c, err)
	}
	if errors.Is(err, tenants.ErrUnauthorized) {
		return unauthorized("invalid or expired access token")
	}
	if err != nil {
		return err
	}
	return c.JSON(tokens("", pair))
}

// tooManyAttempts answers a throttled login 429 with Retry-After.
func tooManyAttempts(c *fiber.Ctx, err error) error {
	var te *tenants.ThrottleError
	if errors.As(err, &te) {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(te.RetrySeconds()))
	}
	return &httpError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "too_many_attempts", msg: err.Error()}
}
