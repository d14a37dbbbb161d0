package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing/proxy"
)

// Fuzz tests of the api's parsers of outside input. Each seed corpus runs
// in every go test; scripts/fuzz.sh runs them with -fuzz.

var completionSeeds = []string{
	`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"auto","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"max_completion_tokens":3}`,
	`{"model":"m","prompt":"once upon"}`, `{"model":"m","prompt":["a","b"]}`, `{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":[[1,2],[3]]}`,
	`{"model":"auto","messages":[],"routebalance":{"preset":"cost","weights":"quality=0.5,cost=0.5","priority":"high","budget_usd":0.01,"ttft_slo_ms":200,"tpot_slo_ms":20,"policy":"round-robin","workflow":"w1"}}`,
	`{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"weights":{"quality":1,"cost":0,"latency":0}}}`,
	`{"model":"auto","messages":[{"role":"user","content":null}],"max_tokens":-1}`, `{"model":1}`, `{"model":"auto","messages":"x"}`,
	`{"model":"auto","max_tokens":1e400}`, `{"model":"auto","stream":"yes"}`, `[]`, ``, `{"model":"auto"} {}`, "{\"model\":\"\xff\"}",
}

// FuzzCompletionBody (next to inference_request_test.go's FuzzParseCompletion): any chat or text completion body gives a parsed
// request or a 400-style parameter error, never a panic, and a parsed
// request has a model and sane token counts.
func FuzzCompletionBody(f *testing.F) {
	for _, s := range completionSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, chat bool) {
		ep := proxy.Completions
		if chat {
			ep = proxy.Chat
		}
		b, err := parseCompletion(raw, ep)
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) {
				t.Fatalf("parseCompletion error %T %v is not a parameter error", err, err)
			}
			return
		}
		if b.model == "" || b.maxTokens < 0 || b.promptTokens < 0 {
			t.Fatalf("parseCompletion(%q) = model %q, max_tokens %d, prompt tokens %d", raw, b.model, b.maxTokens, b.promptTokens)
		}
	})
}

// FuzzOverrides: the X-RouteBalance-* headers and then the body's
// "routebalance" object, as the handler reads them, give either a 400
// parameter error or overrides the router can use.
func FuzzOverrides(f *testing.F) {
	f.Add("balanced", "quality=0.6,cost=0.2,latency=0.2", "high", "w", "0.5", "200", "20", "routebalance",
		[]byte(`{"preset":"quality","priority":"low","budget_usd":1}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"weights":"q=1"}`))
	f.Add("fast", "q=2", "urgent", "", "-1", "NaN", "1e999", "oracle", []byte(`{"unknown":1}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"weights":{"quality":0.5,"cost":0.5},"ttft_slo_ms":-3,"tpot_slo_ms":1e308}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`null`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"budget_usd":1e308,"ttft_slo_ms":9.3e12}`))
	f.Add("autopilot", "", "", "", "", "", "", "", []byte(`{"autopilot":"p95_e2e_ms=3000,p95_ttft_ms=500"}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"preset":"autopilot","autopilot":{"p95_e2e_ms":2500,"max_cost_usd_per_request":0.01}}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"autopilot":{"p95_e2e_ms":-1}}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"autopilot":{"p95_e2e_ms":1e308,"extra":1}}`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"autopilot":"max_cost_usd_per_request=1"}`))
	f.Fuzz(func(t *testing.T, preset, weights, priority, workflow, budget, ttft, tpot, policy string, body []byte) {
		h := map[string]string{hdrPreset: preset, hdrWeights: weights, hdrPriority: priority, hdrWorkflow: workflow,
			hdrBudget: budget, hdrTTFT: ttft, hdrTPOT: tpot, hdrPolicy: policy}
		var o overrides
		err := o.parseHeaders(func(k string) string { return h[k] })
		if err == nil && len(body) > 0 {
			err = o.parseBody(body)
		}
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) {
				t.Fatalf("overrides error %T %v is not a parameter error", err, err)
			}
			return
		}
		if o.weights != nil {
			if err := o.weights.Validate(); err != nil {
				t.Fatalf("accepted weights %+v that do not validate: %v", *o.weights, err)
			}
		}
		if o.targets != nil {
			if err := o.targets.Validate(); err != nil {
				t.Fatalf("accepted autopilot targets %+v that do not validate: %v", *o.targets, err)
			}
		}
		if math.IsNaN(o.budgetUSD) || math.IsInf(o.budgetUSD, 0) || o.budgetUSD < 0 || o.ttft < 0 || o.tpot < 0 {
			t.Fatalf("accepted budget %v, ttft %v, tpot %v", o.budgetUSD, o.ttft, o.tpot)
		}
	})
}

// FuzzParseUsageTime: GET /api/v1/usage's from/to give a UTC time that
// prints as RFC 3339 and reads back as the same instant, or are refused.
func FuzzParseUsageTime(f *testing.F) {
	for _, s := range []string{"2026-11-30", "2026-11-30T10:00:00Z", "2026-11-30T10:00:00+05:30", "2026-11-30T10:00:00.123456789Z",
		"2026-02-30", "0000-01-01", "9999-12-31T23:59:59Z", "yesterday", "", "2026-11-30T24:00:00Z", "2026-11-30T10:00:00+24:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tm, ok := parseUsageTime(v)
		if !ok {
			return
		}
		if tm.Location() != time.UTC {
			t.Fatalf("parseUsageTime(%q) = %v, not UTC", v, tm)
		}
		back, err := time.Parse(time.RFC3339Nano, tm.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(tm) {
			t.Fatalf("parseUsageTime(%q) = %v does not print and read back: %v, %v", v, tm, back, err)
		}
	})
}

// mgmtBody is a management request with the field kinds the API takes.
type mgmtBody struct {
	Name     string             `json:"name"`
	Count    int                `json:"count"`
	Ratio    float64            `json:"ratio"`
	On       *bool              `json:"on"`
	Tags     []string           `json:"tags"`
	Limits   map[string]float64 `json:"limits"`
	Nested   struct{ A int }    `json:"nested"`
	Duration *int64             `json:"duration_ms"`
}

// FuzzDecodeJSON: the management API's body decoder answers any body with
// the decoded value or a 400 in OpenAI's envelope — never a panic or a 500.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","count":1,"ratio":0.5,"on":true,"tags":["x"],"limits":{"a":1},"nested":{"A":2},"duration_ms":5}`,
		`{"count":"one"}`, `{"count":1.5}`, `{"count":1e400}`, `{"nested":{"A":"x"}}`, `{"tags":[1]}`, `{} {}`, `{"a":`, `[]`, `""`, ``,
		`   {"name":"\u0000"}`, "{\"name\":\"\xff\"}", `{"limits":{"a":null}}`, `{"on":1}`,
	} {
		f.Add([]byte(s))
	}
	s := &Server{}
	app := fiber.New(fiber.Config{ErrorHandler: s.errorHandler, DisableStartupMessage: true})
	app.Post("/x", func(c *fiber.Ctx) error {
		var dst mgmtBody
		if err := decodeJSON(c, &dst); err != nil {
			return err
		}
		return c.SendStatus(http.StatusNoContent)
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/x", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			return
		}
		var env struct {
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.NewDecoder(resp.Body).Decode(&env) != nil || env.Error == nil ||
			env.Error.Message == "" || strings.TrimSpace(env.Error.Type) == "" {
			t.Fatalf("body %q: status %d, envelope %+v; want 204 or a 400 envelope", body, resp.StatusCode, env.Error)
		}
	})
}

// acceptedBody checks a body parser's answer to raw, the common part of
// the parsers' fuzz properties: an error must be a *paramError (ok
// false); an accepted body must be a JSON object whose model is the
// non-empty string the parser read. It returns the object's members.
func acceptedBody(t *testing.T, raw []byte, b *completionBody, err error) (map[string]json.RawMessage, bool) {
	t.Helper()
	if err != nil {
		var pe *paramError
		if !errors.As(err, &pe) {
			t.Fatalf("%q: error %v is not a *paramError", raw, err)
		}
		return nil, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		t.Fatalf("%q accepted but is not a JSON object", raw)
	}
	var model string
	if json.Unmarshal(obj["model"], &model) != nil || model == "" || model != b.model {
		t.Fatalf("%q accepted with model %q", raw, b.model)
	}
	return obj, true
}

// paramOf returns the parameter a parser's error names; the error must be
// a *paramError (a 400 naming the field).
func paramOf(t *testing.T, err error) string {
	t.Helper()
	var pe *paramError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *paramError", err)
	}
	return pe.param
}
