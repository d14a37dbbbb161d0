package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
)

// healthz answers 200 while the process runs.
func (s *Server) healthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

// readyz answers 200 when the database answers and every migration is
// applied, else 503 in the envelope.
func (s *Server) readyz(c *fiber.Ctx) error {
	if s.deps.Ready != nil {
		ctx, cancel := context.WithTimeout(c.UserContext(), 3*time.Second)
		defer cancel()
		if err := s.deps.Ready(ctx); err != nil {
			return sendError(c, http.StatusServiceUnavailable, typeUnavailable, "not_ready", "", "not ready: "+err.Error())
		}
	}
	return c.JSON(fiber.Map{"status": "ready"})
}
