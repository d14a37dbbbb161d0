package api

import "github.com/gofiber/fiber/v2"

// mountManagement registers the JSON management API under /api/v1.
func (s *Server) mountManagement(r fiber.Router) {}
