package api

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
)

// RequestReader answers GET /api/v1/requests from the usage ledger;
// pgstore.Store and sqlitestore.Store implement it.
type RequestReader interface {
	Requests(ctx context.Context, q billing.RequestQuery) (billing.RequestPage, error)
}

// maxCSVRequests bounds one GET /api/v1/requests.csv; a longer log is
// exported in several ranges.
const maxCSVRequests = 100_000

// requestList is the JSON answer of GET /api/v1/requests.
type requestList struct {
	Object     string               `json:"object"`
	Data       []billing.RequestRow `json:"data"`
	NextCursor string               `json:"next_cursor"`
}

// ledgerRange reads from/to (RFC 3339 or YYYY-MM-DD; default: the start
// of the billing period until now) the way GET /usage does; ok is false
// after it wrote a 400.
func (s *Server) ledgerRange(c *fiber.Ctx) (from, to time.Time, ok bool, err error) {
	now := s.clock.Now().UTC()
	from, to = billing.PeriodStart(now), now
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &from}, {"to", &to}} {
		v := c.Query(p.name)
		if v == "" {
			continue
		}
		t, good := parseUsageTime(v)
		if !good {
			return from, to, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_time", p.name,
				p.name+" must be an RFC 3339 time (2026-11-30T10:00:00Z) or a date (2026-11-30)")
		}
		*p.dst = t
	}
	if !from.Before(to) {
		return from, to, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_range", "from", "from must be before to")
	}
	return from, to, true, nil
}

// requestQuery reads the request-log filters; ok is false after a 400.
func (s *Server) requestQuery(c *fiber.Ctx, tenant string) (billing.RequestQuery, bool, error) {
	from, to, ok, err := s.ledgerRange(c)
	if !ok {
		return billing.RequestQuery{}, false, err
	}
	q := billing.RequestQuery{TenantID: tenant, From: from, To: to, Model: c.Query("model"),
		KeyID: c.Query("key_id"), Status: c.Query("status"), Cursor: c.Query("cursor")}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > billing.MaxRequestLimit {
			return q, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_limit", "limit",
				"limit must be a whole number from 1 to "+strconv.Itoa(billing.MaxRequestLimit))
		}
		q.Limit = n
	}
	for _, f := range []struct{ param, v string }{{"model", q.Model}, {"key_id", q.KeyID}} {
		if !filterText(f.v) {
			return q, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_filter", f.param,
				f.param+" must be valid UTF-8 of at most 256 bytes without control characters")
		}
	}
	switch q.Status {
	case "", "ok", "error", "cancelled", "budget":
	default:
		return q, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_status", "status",
			"status must be one of ok, error, cancelled, budget")
	}
	if q.Cursor != "" {
		if _, id, err := billing.DecodeCursor(q.Cursor); err != nil || !filterText(id) {
			return q, false, sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_cursor", "cursor",
				"cursor must be a next_cursor this endpoint returned")
		}
	}
	return q, true, nil
}

// filterText reports whether a request-log filter can be compared with
// stored text on every engine: Postgres refuses NUL and invalid UTF-8
// outright (a 5xx for a client's typo), and no stored model name or key id
// is longer than 256 bytes or holds a control character.
func filterText(v string) bool {
	if len(v) > 256 || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// keyNames maps the tenant's key ids (revoked ones too) to their names.
func (s *Server) keyNames(ctx context.Context, tenant string) map[string]string {
	out := map[string]string{}
	if s.deps.Tenants == nil {
		return out
	}
	keys, err := s.deps.Tenants.Keys(ctx, tenant)
	if err != nil {
		s.log.Warn("request log: key names unavailable", "tenant_id", tenant, "err", err)
		return out
	}
	for _, k := range keys {
		out[k.ID] = k.Name
	}
	return out
}

// requests answers GET /api/v1/requests: one newest-first page of the
// tenant's request log with the routing decision of each request.
func (s *Server) requests(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Requests == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "requests are not recorded on this server")
	}
	q, ok, err := s.requestQuery(c, tenant)
	if !ok {
		return err
	}
	page, err := s.deps.Requests.Requests(c.UserContext(), q)
	if err != nil {
		return s.sendBillingError(c, err)
	}
	names := s.keyNames(c.UserContext(), tenant)
	for i := range page.Rows {
		page.Rows[i].KeyName = names[page.Rows[i].KeyID]
		fillPreset(&page.Rows[i])
	}
	return c.JSON(requestList{Object: "list", Data: page.Rows, NextCursor: page.NextCursor})
}

// requestCSVHeader is the column order of GET /api/v1/requests.csv.
var requestCSVHeader = []string{"id", "started_at", "finished_at", "key_id", "key_name", "cluster_id", "model",
	"instance_id", "policy", "status", "http_status", "prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms",
	"cost_usd", "billed_usd", "predicted_quality", "predicted_e2e_ms", "preset", "w_quality", "w_cost",
	"w_latency", "relaxed", "attempts"}

// fillPreset names the preset of a row recorded with weights but no
// preset name: the named preset whose weights those are, else "custom"
// (equal weights route identically, so the name is exact).
func fillPreset(r *billing.RequestRow) {
	if r.Preset != "" || r.Weights == nil {
		return
	}
	r.Preset = routing.PresetCustom
	for _, name := range []string{routing.PresetQuality, routing.PresetLatency, routing.PresetCost, routing.PresetBalanced} {
		pw, err := routing.PresetWeights(name)
		if err == nil && math.Abs(pw.Quality-r.Weights.Quality) < 1e-6 && math.Abs(pw.Cost-r.Weights.Cost) < 1e-6 && math.Abs(pw.Latency-r.Weights.Latency) < 1e-6 {
			r.Preset = name
			return
		}
	}
}

func fnum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// csvText defuses a text cell for spreadsheets: one that starts with
// = + - @ tab or CR would be run as a formula when the file is opened
// (key names, model names and client-chosen request ids are tenant
// input), so it gets a leading apostrophe, which spreadsheets show as text.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// requestsCSV answers GET /api/v1/requests.csv with the same filters as
// /requests (cursor and limit ignored): every matching request, newest
// first, up to maxCSVRequests rows.
func (s *Server) requestsCSV(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Requests == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "requests are not recorded on this server")
	}
	q, ok, err := s.requestQuery(c, tenant)
	if !ok {
		return err
	}
	q.Cursor, q.Limit = "", billing.MaxRequestLimit
	names := s.keyNames(c.UserContext(), tenant)
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(requestCSVHeader)
	for n := 0; n < maxCSVRequests; {
		page, err := s.deps.Requests.Requests(c.UserContext(), q)
		if err != nil {
			return s.sendBillingError(c, err)
		}
		for _, r := range page.Rows {
			fillPreset(&r)
			var wq, wc, wl string
			if r.Weights != nil {
				wq, wc, wl = fnum(r.Weights.Quality), fnum(r.Weights.Cost), fnum(r.Weights.Latency)
			}
			_ = w.Write([]string{csvText(r.ID), r.StartedAt.Format(time.RFC3339Nano), r.FinishedAt.Format(time.RFC3339Nano),
				csvText(r.KeyID), csvText(names[r.KeyID]), csvText(r.ClusterID), csvText(r.Model), csvText(r.InstanceID),
				csvText(r.Policy), r.Status, strconv.Itoa(r.HTTPStatus),
				strconv.FormatInt(r.PromptTokens, 10), strconv.FormatInt(r.OutputTokens, 10), fnum(r.TTFTMs), fnum(r.E2EMs),
				fnum(r.CostUSD), fnum(r.BilledUSD), fnum(r.PredictedQuality), fnum(r.PredictedE2EMs), csvText(r.Preset),
				wq, wc, wl, csvText(strings.Join(r.Relaxed, " ")), strconv.Itoa(r.Attempts)})
			n++
			if n >= maxCSVRequests {
				break
			}
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	w.Flush()
	return sendCSV(c, "requests", buf.Bytes())
}

// usageCSV answers GET /api/v1/usage.csv with the rows of GET /usage for
// the same from/to/group_by, then a total row.
func (s *Server) usageCSV(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Usage == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "usage is not recorded on this server")
	}
	from, to, ok, err := s.ledgerRange(c)
	if !ok {
		return err
	}
	q := billing.UsageQuery{TenantID: tenant, From: from, To: to, GroupBy: c.Query("group_by")}
	switch q.GroupBy {
	case "", billing.GroupHour, billing.GroupDay, billing.GroupModel, billing.GroupInstance, billing.GroupKey:
	default:
		return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_group_by", "group_by",
			"group_by must be one of hour, day, model, instance, key")
	}
	rep, err := s.deps.Usage.Usage(c.UserContext(), q)
	if err != nil {
		return s.sendBillingError(c, err)
	}
	groupCol := q.GroupBy
	if groupCol == "" {
		groupCol = "group"
	}
	header := []string{groupCol, "requests", "prompt_tokens", "output_tokens", "tokens", "cost_usd", "billed_usd",
		"mean_ttft_ms", "p95_ttft_ms", "mean_latency_ms", "p95_latency_ms", "mean_predicted_quality"}
	var names map[string]string
	if q.GroupBy == billing.GroupKey {
		names = s.keyNames(c.UserContext(), tenant)
		header = append(header[:1], append([]string{"key_name"}, header[1:]...)...)
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(header)
	row := func(label string, r billing.UsageRow) {
		rec := []string{csvText(label)}
		if names != nil {
			rec = append(rec, csvText(names[r.Group]))
		}
		rec = append(rec, strconv.FormatInt(r.Requests, 10), strconv.FormatInt(r.PromptTokens, 10),
			strconv.FormatInt(r.OutputTokens, 10), strconv.FormatInt(r.Tokens, 10), fnum(r.CostUSD), fnum(r.BilledUSD),
			fnum(r.MeanTTFTMs), fnum(r.P95TTFTMs), fnum(r.MeanE2EMs), fnum(r.P95E2EMs), fnum(r.MeanPredictedQuality))
		_ = w.Write(rec)
	}
	if q.GroupBy != "" {
		for _, r := range rep.Rows {
			row(r.Group, r)
		}
	}
	row("total", rep.Total)
	w.Flush()
	return sendCSV(c, "usage", buf.Bytes())
}

func sendCSV(c *fiber.Ctx, name string, body []byte) error {
	c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+name+`.csv"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(body)
}
