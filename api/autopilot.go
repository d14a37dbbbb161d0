package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/dispatch"
	"github.com/routebalance/routebalance/tenants"
)

// The autopilot preset (routing/autopilot): the request, its key or its
// tenant names preset "autopilot" with p95 targets, and a controller per
// (cluster, target set) chooses the weights.

// hdrAutopilot carries a request's autopilot targets
// ("p95_e2e_ms=3000,p95_ttft_ms=800,max_cost_usd_per_request=0.002").
const hdrAutopilot = "X-RouteBalance-Autopilot"

// hdrWeightsOut is the response header with the weights the request was
// routed with (the same name as the request header that sets them).
const hdrWeightsOut = hdrWeights

// setTargets parses autopilot targets from a header or the body.
func (o *overrides) setTargets(param, v string) error {
	t, err := autopilot.ParseTargets(v)
	if err != nil {
		return badParam(param, "%s", err.Error())
	}
	o.targets = &t
	return nil
}

// parseTargetsBody reads routebalance.autopilot: a string in the header's
// form, or {"p95_e2e_ms":…,"p95_ttft_ms":…,"max_cost_usd_per_request":…}.
func (o *overrides) parseTargetsBody(raw json.RawMessage) error {
	const param = "routebalance.autopilot"
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return o.setTargets(param, s)
	}
	var j struct {
		P95E2EMs   *float64 `json:"p95_e2e_ms"`
		P95TTFTMs  *float64 `json:"p95_ttft_ms"`
		MaxCostUSD *float64 `json:"max_cost_usd_per_request"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return badParam(param, `must be {"p95_e2e_ms":…,"p95_ttft_ms":…,"max_cost_usd_per_request":…} or "p95_e2e_ms=…"`)
	}
	// Formatted back into the header form so one parser validates both.
	var parts []string
	add := func(k string, v *float64) {
		if v != nil {
			parts = append(parts, k+"="+strconv.FormatFloat(*v, 'g', -1, 64))
		}
	}
	add("p95_e2e_ms", j.P95E2EMs)
	add("p95_ttft_ms", j.P95TTFTMs)
	add("max_cost_usd_per_request", j.MaxCostUSD)
	s = ""
	for i, p := range parts {
		if i > 0 {
			s += ","
		}
		s += p
	}
	return o.setTargets(param, s)
}

// resolveAutopilot says whether the request runs on the autopilot and
// with which targets, in the order of resolveWeights: explicit request
// weights or a named request preset win; request preset autopilot (or
// request targets alone) take the request's targets, else the effective
// settings' (key over tenant); then the key's or the tenant's preset.
func resolveAutopilot(o *overrides, p *tenants.Principal) (autopilot.Targets, bool, error) {
	if o.weights != nil || (o.preset != "" && o.preset != autopilot.PresetAutopilot) {
		if o.targets != nil {
			return autopilot.Targets{}, false, badParam(hdrAutopilot, "autopilot targets need preset autopilot, not %q with weights", o.preset)
		}
		return autopilot.Targets{}, false, nil
	}
	if o.targets != nil {
		return *o.targets, true, nil
	}
	if o.preset != autopilot.PresetAutopilot && p.Settings.Preset != autopilot.PresetAutopilot {
		return autopilot.Targets{}, false, nil // not autopilot: the settings' targets are not read (their check allocates an error)
	}
	settings, hasSettings := p.Settings.SLO.AutopilotTargets()
	if o.preset == autopilot.PresetAutopilot {
		if hasSettings {
			return settings, true, nil
		}
		return autopilot.Targets{}, false, badParam("preset", "autopilot needs targets: %s or routebalance.autopilot, or p95_e2e_ms/p95_ttft_ms in the key's or the tenant's slo", hdrAutopilot)
	}
	if p.Settings.Preset == autopilot.PresetAutopilot { // the effective settings: the key's preset over the tenant's
		if !hasSettings {
			return autopilot.Targets{}, false, badParam("preset", "the key's or tenant's autopilot preset has no p95 target in its slo")
		}
		return settings, true, nil
	}
	return autopilot.Targets{}, false, nil
}

// PromptMemory is the inference path's memory of recent prompts (nil
// when none is kept), for the autopilot's replays (routing/sim.LivePredictor).
func (s *Server) PromptMemory() routing.PromptMemory {
	if s.recent == nil {
		return nil
	}
	return s.recent
}

// autopilotWeights returns the weights of the request's controller; ok
// false means the refusal is written (err is what to return).
func (h *inference) autopilotWeights(c *fiber.Ctx, x *exchange, cl *routing.Cluster, t autopilot.Targets) (w routing.Weights, ok bool, err error) {
	if h.deps.Autopilot == nil {
		return w, false, sendError(c, http.StatusServiceUnavailable, typeUnavailable, "autopilot_off", "preset", "the autopilot preset is not running on this server")
	}
	ctrl, err := h.deps.Autopilot.Get(cl, t)
	switch {
	case errors.Is(err, autopilot.ErrTooMany):
		return w, false, sendError(c, http.StatusBadRequest, typeInvalidRequest, "", hdrAutopilot, err.Error())
	case errors.Is(err, autopilot.ErrNotRunning):
		return w, false, sendError(c, http.StatusServiceUnavailable, typeUnavailable, "autopilot_off", "preset", "the autopilot is not running (server starting or stopping)")
	case err != nil:
		return w, false, err
	}
	x.autopilot = ctrl
	return ctrl.Weights(), true, nil
}

// observe reports a finished autopilot request to its controller: E2E
// from the arrival, TTFT as the client saw it (the upstream's TTFT plus
// the time before the request went upstream; E2E when nothing streamed),
// the served model's predicted quality and its cost. A request no
// instance served, or that the client cancelled, says nothing about the
// targets and is not observed; an upstream failure counts as late.
func (x *exchange) observe(res dispatch.Result, err error) {
	if x.autopilot == nil || res.Decision == nil {
		return
	}
	out := res.Relay.Outcome
	failed := err != nil || out.Err != nil
	if failed && !out.Upstream {
		var de *dispatch.Error
		if !errors.As(err, &de) || de.Step == dispatch.StepSpend || de.Step == dispatch.StepLimit {
			return
		}
	}
	now := x.h.clock.Now()
	e2e := now.Sub(x.arrival)
	ttft := e2e
	if out.TTFT > 0 && out.E2E > 0 && out.E2E <= e2e {
		ttft = e2e - out.E2E + out.TTFT
	}
	in := res.Decision.Instance
	x.autopilot.Observe(autopilot.Observation{At: now, E2E: e2e, TTFT: ttft, Quality: res.Decision.PredictedQuality,
		CostUSD: in.CostUSD(float64(out.PromptTokens), float64(out.OutputTokens)), Failed: failed})
}

// setWeightsHeader puts the weights the request was routed with on the
// response as "quality=…,cost=…,latency=…" (4 decimals), formatted into a
// stack buffer so it allocates nothing.
func setWeightsHeader(c *fiber.Ctx, w routing.Weights) {
	var buf [64]byte
	b := append(buf[:0], "quality="...)
	b = strconv.AppendFloat(b, w.Quality, 'f', 4, 64)
	b = append(b, ",cost="...)
	b = strconv.AppendFloat(b, w.Cost, 'f', 4, 64)
	b = append(b, ",latency="...)
	b = strconv.AppendFloat(b, w.Latency, 'f', 4, 64)
	c.Context().Response.Header.SetBytesV(hdrWeightsOut, b)
}

// clusterAutopilot serves GET /api/v1/clusters/{id}/autopilot: every
// controller of the cluster (one per target set) with its current
// weights, targets, attainment per window and last decisions.
func (s *Server) clusterAutopilot(c *fiber.Ctx) error {
	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	if _, err := s.deps.Tenants.Cluster(ctx, tid, id); err != nil {
		return err
	}
	reg := s.deps.Inference.Autopilot
	if reg == nil {
		return c.JSON(fiber.Map{"cluster_id": id, "running": false, "controllers": []autopilot.Status{}})
	}
	return c.JSON(fiber.Map{"cluster_id": id, "running": true, "controllers": reg.Status(id)})
}
