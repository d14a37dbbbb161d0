package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing/quality"
)

// QualityData is a cluster's own quality knowledge, served at
// /api/v1/clusters/{id}/quality-data. (*quality.Store) implements it.
// Upload is called with the cluster's served models once the cluster is
// known to be the session tenant's; all methods are safe for concurrent use.
type QualityData interface {
	Upload(ctx context.Context, tenantID, clusterID string, models []string, body io.Reader) (quality.Parsed, error)
	Status(clusterID string) quality.Status
	Delete(ctx context.Context, clusterID string) error
	Limits() quality.Limits
}

// lineErrorBody is the 400 of an upload with bad lines: OpenAI's envelope
// plus every reported line.
type lineErrorBody struct {
	Error      errorDetail         `json:"error"`
	Errors     []quality.LineError `json:"errors"`
	ErrorCount int                 `json:"error_count"`
}

// uploadQualityData serves POST /clusters/{id}/quality-data: JSON lines
// of labelled prompts ({"id","prompt","scores":{model: q},
// "output_tokens"?,"task"?}, the `routebalance index build` format) for
// the cluster's models. The lines are read one at a time; any bad line
// rejects the upload (400, every bad line with its number, the current
// data kept); scores of models the cluster does not serve are dropped and
// reported. A good upload replaces the cluster's data, is persisted and is
// indexed in the background: 202 with the counts, then GET reports the
// build.
func (s *Server) uploadQualityData(c *fiber.Ctx) error {
	if s.deps.QualityData == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "quality_data_disabled", "", "quality data is not enabled on this server")
	}
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	models := make([]string, 0, len(ins))
	for _, in := range ins {
		models = append(models, in.Model)
	}
	if len(models) == 0 {
		return sendError(c, http.StatusConflict, typeInvalidRequest, "no_instances", "",
			"the cluster has no instances: add the instances whose models the data scores first")
	}
	p, err := s.deps.QualityData.Upload(ctx, tid, id, models, bytes.NewReader(c.Body()))
	switch {
	case errors.Is(err, quality.ErrTooLarge):
		return sendError(c, http.StatusRequestEntityTooLarge, typeInvalidRequest, "upload_too_large", "", err.Error())
	case err != nil:
		return err
	case p.ErrorCount > 0:
		msg := fmt.Sprintf("%d of %d lines are invalid; nothing was stored", p.ErrorCount, p.Lines)
		if len(p.Errors) > 0 {
			msg += fmt.Sprintf(" (first: line %d: %s)", p.Errors[0].Line, p.Errors[0].Message)
		}
		code, param := "invalid_lines", "body"
		return c.Status(http.StatusBadRequest).JSON(lineErrorBody{
			Error:  errorDetail{Message: msg, Type: typeInvalidRequest, Code: &code, Param: &param},
			Errors: p.Errors, ErrorCount: p.ErrorCount,
		})
	case len(p.Records) == 0:
		msg := "the upload holds no labelled prompt"
		if len(p.Unknown) > 0 {
			msg = "no line scores a model this cluster serves (" + strings.Join(models, ", ") + ")"
		}
		code, param := "no_records", "body"
		return c.Status(http.StatusBadRequest).JSON(fiber.Map{
			"error":          errorDetail{Message: msg, Type: typeInvalidRequest, Code: &code, Param: &param},
			"unknown_models": p.Unknown, "lines": p.Lines,
		})
	}
	st := s.deps.QualityData.Status(id)
	return c.Status(http.StatusAccepted).JSON(fiber.Map{
		"object": "quality_data.upload", "cluster_id": id, "status": st.State,
		"lines": p.Lines, "records": len(p.Records), "skipped": p.Skipped,
		"models": st.Models, "unknown_models": p.Unknown,
	})
}

// qualityData serves GET /clusters/{id}/quality-data: the build's status,
// labels per model, when it was uploaded and built, and the validation AUC
// on the held-back slice ("status": "none" when nothing was uploaded).
func (s *Server) qualityData(c *fiber.Ctx) error {
	if s.deps.QualityData == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "quality_data_disabled", "", "quality data is not enabled on this server")
	}
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	st := s.deps.QualityData.Status(id)
	return c.JSON(fiber.Map{"object": "quality_data", "max_bytes": s.deps.QualityData.Limits().MaxBytes, "data": st})
}

// deleteQualityData serves DELETE /clusters/{id}/quality-data: 204, or
// 404 when the cluster has none.
func (s *Server) deleteQualityData(c *fiber.Ctx) error {
	if s.deps.QualityData == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "quality_data_disabled", "", "quality data is not enabled on this server")
	}
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	if err := s.deps.QualityData.Delete(ctx, id); err != nil {
		if errors.Is(err, quality.ErrNotFound) {
			return sendError(c, http.StatusNotFound, typeNotFound, "not_found", "", "this cluster has no quality data")
		}
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}
