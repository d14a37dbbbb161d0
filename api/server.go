// Package api is the HTTP face of RouteBalance: the fiber app, its route
// table, middleware and the mapping of domain errors to HTTP. It is the
// only package that imports fiber.
package api

import (
	"log/slog"

	"github.com/gofiber/fiber/v2"
)

// Server is the HTTP application.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	app  *fiber.App
}

// Config holds the HTTP settings.
type Config struct {
	// BodyLimit is the largest request body in bytes.
	BodyLimit int
}

// Deps are the collaborators the handlers use. Each field's type is an
// interface declared next to the handlers that need it.
type Deps struct {
	Log *slog.Logger
}

// New builds the fiber app and its routes.
func New(cfg Config, deps Deps) *Server {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Log}
	s.app = fiber.New(fiber.Config{BodyLimit: cfg.BodyLimit, DisableStartupMessage: true})
	s.mountManagement(s.app.Group("/api/v1"))
	s.mountInference(s.app.Group("/v1"))
	s.mountWeb(s.app) // last: its catch-all serves the dashboard
	return s
}

// App returns the fiber app (for Listen, Shutdown and tests).
func (s *Server) App() *fiber.App { return s.app }
