package api

import "github.com/gofiber/fiber/v2"

// mountInference registers the OpenAI-compatible API under /v1.
func (s *Server) mountInference(r fiber.Router) {}
