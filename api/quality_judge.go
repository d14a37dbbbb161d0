package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/routing/quality"
	"github.com/routebalance/routebalance/tenants"
)

// QualityJudge is the per-cluster LLM judge (routing/quality.Judge):
// settings at /api/v1/clusters/{id}/quality-judge, and the served answers
// the inference API offers it. Safe for concurrent use.
type QualityJudge interface {
	// Configure validates nothing (the api does), persists and applies a
	// cluster's settings.
	Configure(ctx context.Context, tenantID, clusterID string, s quality.JudgeSettings) error
	// Settings returns a cluster's settings and statistics.
	Settings(clusterID string) (quality.JudgeSettings, quality.JudgeStats)
	// Wants decides (cheaply, before the answer is read) whether a served
	// request of the cluster is judged; Offer then hands it over.
	Wants(clusterID, requestID string) bool
	Offer(s quality.Sample) bool
}

// qualityJudge serves GET /clusters/{id}/quality-judge: the settings
// (disabled when never set) and what the judge did: samples, calls,
// labels per model, spend this month and cost per learned label.
func (s *Server) qualityJudge(c *fiber.Ctx) error {
	if s.deps.QualityJudge == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "quality_judge_disabled", "", "the quality judge is not enabled on this server")
	}
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	set, st := s.deps.QualityJudge.Settings(id)
	return c.JSON(fiber.Map{"object": "quality_judge", "cluster_id": id, "settings": set, "stats": st})
}

// putQualityJudge serves PUT /clusters/{id}/quality-judge
// {enabled,model,sample_rate,monthly_budget_usd}: the model must be served
// by an enabled chat instance of the cluster; disabled settings are
// checked too (judgeModelServed), so what is saved can be enabled later.
func (s *Server) putQualityJudge(c *fiber.Ctx) error {
	if s.deps.QualityJudge == nil {
		return sendError(c, http.StatusNotImplemented, typeInvalidRequest, "quality_judge_disabled", "", "the quality judge is not enabled on this server")
	}
	var in quality.JudgeSettings
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if err := in.Validate(); err != nil {
		return err
	}
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	saved, _ := s.deps.QualityJudge.Settings(id)
	if err := judgeModelServed(in, ins, saved.Model); err != nil {
		return err
	}
	if err := s.deps.QualityJudge.Configure(ctx, tid, id, in); err != nil {
		return err
	}
	set, st := s.deps.QualityJudge.Settings(id)
	return c.JSON(fiber.Map{"object": "quality_judge", "cluster_id": id, "settings": set, "stats": st})
}

// judgeModelServed checks the judge's model against the cluster's
// instances ins: enabled settings need an enabled chat instance of it;
// disabled ones a chat instance of it (enabled or not), no model, or the
// model already saved (its instance may be gone: turning the judge off
// must still work). The error is a 400 naming model.
func judgeModelServed(in quality.JudgeSettings, ins []tenants.Instance, saved string) error {
	served, known := false, false
	var models []string
	for _, x := range ins {
		if x.Kind == "embedding" {
			continue
		}
		if !slices.Contains(models, x.Model) {
			models = append(models, x.Model)
		}
		known = known || x.Model == in.Model
		served = served || (x.Model == in.Model && !x.Disabled)
	}
	sort.Strings(models)
	list := strings.Join(models, ", ")
	if list == "" {
		list = "none"
	}
	if in.Enabled {
		if !served {
			return badRequest("model", "model %q is not served by an enabled chat instance of this cluster (its chat models: %s)", in.Model, list)
		}
		return nil
	}
	if in.Model == "" || known || in.Model == saved {
		return nil
	}
	return badRequest("model", "model %q is not a chat model of this cluster (its chat models: %s); a disabled judge keeps a model it can be enabled with, or none", in.Model, list)
}

// offerJudge offers a served, non-streamed, non-cached answer to the
// cluster's judge when it samples the request. Only then is the answer
// decoded; the prompt and answer go to the judge's in-memory queue.
func (h *inference) offerJudge(x *exchange, res dispatch.Result) {
	j := h.deps.Judge
	if j == nil || res.Decision == nil || res.Cache == "hit" || x.cluster == nil || x.body == nil || x.body.prompt == "" {
		return
	}
	if res.UpstreamStatus < 200 || res.UpstreamStatus > 299 || !j.Wants(x.cluster.ID, x.id) {
		return
	}
	answer := answerText(x.buf.b)
	if answer == "" {
		return
	}
	j.Offer(quality.Sample{TenantID: x.p.Tenant.ID, ClusterID: x.cluster.ID, Cluster: x.cluster, RequestID: x.id,
		Model: res.Decision.Instance.Model, Prompt: x.body.prompt, Answer: answer})
}

// answerText is the first choice's text of a chat or text completion.
func answerText(b []byte) string {
	var out struct {
		Choices []struct {
			Message *struct {
				Content string `json:"content"`
			} `json:"message"`
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &out) != nil || len(out.Choices) == 0 {
		return ""
	}
	if m := out.Choices[0].Message; m != nil {
		return m.Content
	}
	return out.Choices[0].Text
}
