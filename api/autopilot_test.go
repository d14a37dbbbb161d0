package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// runningRegistry starts an autopilot registry stepping every interval
// until the test ends.
func runningRegistry(t *testing.T, interval time.Duration) *autopilot.Registry {
	t.Helper()
	reg, err := autopilot.NewRegistry(autopilot.LiveConfig{Interval: interval, MaxControllers: 3}, nil, nil, autopilot.Hooks{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- reg.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testwait.Until(t, "registry running", func() bool {
		_, err := reg.Get(&routing.Cluster{ID: "probe"}, autopilot.Targets{P95E2E: time.Hour})
		return err == nil
	})
	return reg
}

const chatHi = `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`

// TestAutopilotRequests: preset autopilot at request, key and tenant
// level routes with its controller's weights, every routed answer names
// its weights in X-RouteBalance-Weights, and a missed target moves the
// weights toward latency within a few control steps.
func TestAutopilotRequests(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	reg := runningRegistry(t, 30*time.Millisecond)
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, autopilot: reg})
	balanced, _ := routing.PresetWeights(routing.PresetBalanced)

	// A fixed preset names its weights too.
	resp, out := e.post(t, "/v1/chat/completions", testKey, chatHi, map[string]string{hdrPreset: "latency"})
	if resp.StatusCode != 200 || resp.Header.Get(hdrWeightsOut) != "quality=0.1000,cost=0.1000,latency=0.8000" {
		t.Fatalf("latency preset: %d %q %s", resp.StatusCode, resp.Header.Get(hdrWeightsOut), out)
	}

	// Request level: the controller starts at balanced; 1 µs is a target
	// no request meets, so after a step with its window the controller
	// falls back toward latency.
	hdr := map[string]string{hdrPreset: "autopilot", hdrAutopilot: "p95_e2e_ms=0.001"}
	resp, out = e.post(t, "/v1/chat/completions", testKey, chatHi, hdr)
	if resp.StatusCode != 200 {
		t.Fatalf("autopilot: %d %s", resp.StatusCode, out)
	}
	if got := e.router.LastRequest().Weights; got != balanced {
		t.Fatalf("first autopilot request routed with %v, want the start %v", got, balanced)
	}
	if h := resp.Header.Get(hdrWeightsOut); h != "quality=0.3333,cost=0.3333,latency=0.3333" {
		t.Fatalf("X-RouteBalance-Weights %q", h)
	}
	tg := autopilot.Targets{P95E2E: time.Microsecond}
	ctrl, _ := reg.Get(&routing.Cluster{ID: e.p.Cluster.ID}, tg)
	testwait.Until(t, "a fallback toward latency", func() bool {
		// Enough observations for a trusted window (MinWindow).
		for range 5 {
			e.post(t, "/v1/chat/completions", testKey, chatHi, hdr)
		}
		return ctrl.Weights().Latency > balanced.Latency+0.1
	})
	resp, _ = e.post(t, "/v1/chat/completions", testKey, chatHi, hdr)
	w := e.router.LastRequest().Weights
	if w.Latency <= balanced.Latency || resp.Header.Get(hdrWeightsOut) != fmtW(w) {
		t.Fatalf("after the fallback: routed with %v, header %q", w, resp.Header.Get(hdrWeightsOut))
	}
	st := ctrl.Status()
	if len(st.Windows) == 0 || st.Attainment != 0 {
		t.Fatalf("status %+v: every window misses a 1 ms target", st)
	}
	for _, d := range st.Decisions {
		if d.Action == autopilot.ActionFallback {
			goto found
		}
	}
	t.Fatalf("no fallback among %+v", st.Decisions)
found:

	// The body's object form, and the same target set reuses the
	// controller.
	resp, out = e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"preset":"autopilot","autopilot":{"p95_e2e_ms":0.001}}}`, nil)
	if resp.StatusCode != 200 || e.router.LastRequest().Weights.Latency <= balanced.Latency {
		t.Fatalf("body targets: %d %s, weights %v", resp.StatusCode, out, e.router.LastRequest().Weights)
	}

	// Key level: the key's preset with its SLO's p95 target.
	e.p.Key = tenants.Key{ID: "key-t1", Preset: autopilot.PresetAutopilot, Weights: &balanced}
	e.p.Settings = tenants.Settings{Preset: autopilot.PresetAutopilot, Weights: balanced, SLO: tenants.SLO{P95E2EMs: 60000}}
	resp, out = e.post(t, "/v1/chat/completions", testKey, chatHi, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("key autopilot: %d %s", resp.StatusCode, out)
	}
	if sts := reg.Status(e.p.Cluster.ID); len(sts) != 2 || sts[1].Targets.P95E2EMs != 60000 {
		t.Fatalf("controllers of the cluster: %+v", sts)
	}
	// A request's named preset wins over the key's autopilot.
	e.post(t, "/v1/chat/completions", testKey, chatHi, map[string]string{hdrPreset: "quality"})
	if got := e.router.LastRequest().Weights; got != (routing.Weights{Quality: 0.8, Cost: 0.1, Latency: 0.1}) {
		t.Fatalf("request preset over key autopilot: %v", got)
	}
	e.p.Key, e.p.Settings = tenants.Key{ID: "key-t1"}, tenants.Settings{}
}

func fmtW(w routing.Weights) string {
	app := fiber.New()
	var s string
	app.Get("/", func(c *fiber.Ctx) error {
		setWeightsHeader(c, w)
		s = string(c.Response().Header.Peek(hdrWeightsOut))
		return nil
	})
	req, _ := http.NewRequest("GET", "/", nil)
	if _, err := app.Test(req); err != nil {
		return err.Error()
	}
	return s
}

// TestAutopilotBadInput: bad targets and impossible combinations are 400
// in OpenAI's envelope naming the parameter; no registry is 503; nothing
// reaches the router.
func TestAutopilotBadInput(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	reg := runningRegistry(t, time.Hour)
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, autopilot: reg})
	off := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	for _, tc := range []struct {
		name   string
		env    *infEnv
		hdr    map[string]string
		rb     string
		status int
		param  string
		msg    string
	}{
		{"negative target", e, map[string]string{hdrPreset: "autopilot", hdrAutopilot: "p95_e2e_ms=-3"}, "", 400, hdrAutopilot, "p95_e2e_ms"},
		{"unknown target", e, map[string]string{hdrAutopilot: "p99_e2e_ms=3"}, "", 400, hdrAutopilot, "unknown target"},
		{"cost only", e, map[string]string{hdrAutopilot: "max_cost_usd_per_request=1"}, "", 400, hdrAutopilot, "p95_e2e_ms"},
		{"no targets anywhere", e, map[string]string{hdrPreset: "autopilot"}, "", 400, "preset", "autopilot needs targets"},
		{"targets with another preset", e, map[string]string{hdrPreset: "cost", hdrAutopilot: "p95_e2e_ms=3000"}, "", 400, hdrAutopilot, "need preset autopilot"},
		{"body object with an unknown field", e, nil, `{"autopilot":{"p95_e2e_ms":3000,"p99":1}}`, 400, "routebalance.autopilot", "must be"},
		{"body NaN-free but zero", e, nil, `{"preset":"autopilot","autopilot":{"p95_e2e_ms":0}}`, 400, "routebalance.autopilot", "p95_e2e_ms"},
		{"autopilot off", off, map[string]string{hdrPreset: "autopilot", hdrAutopilot: "p95_e2e_ms=3000"}, "", 503, "preset", "not running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.Requests())
			body := chatHi
			if tc.rb != "" {
				body = strings.TrimSuffix(chatHi, "}") + `,"routebalance":` + tc.rb + "}"
			}
			resp, out := tc.env.post(t, "/v1/chat/completions", testKey, body, tc.hdr)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, out)
			}
			env := decodeEnvelope(t, out)
			if str(env.Error.Param) != tc.param || !strings.Contains(env.Error.Message, tc.msg) {
				t.Fatalf("envelope %+v (param %q), want param %q and %q in the message", env.Error, str(env.Error.Param), tc.param, tc.msg)
			}
			if len(up.Requests()) != before {
				t.Fatal("a refused request reached the instance")
			}
		})
	}
	// Distinct target sets are bounded (MaxControllers 3, one is the probe).
	for k, want := range []int{200, 200, 400} {
		resp, out := e.post(t, "/v1/chat/completions", testKey, chatHi, map[string]string{hdrAutopilot: "p95_e2e_ms=" + []string{"1000", "2000", "3000"}[k]})
		if resp.StatusCode != want {
			t.Fatalf("target set %d: %d %s", k, resp.StatusCode, out)
		}
		if want == 400 && !strings.Contains(out, "too many") {
			t.Fatalf("over the bound: %s", out)
		}
	}
}

// TestClusterAutopilotEndpoint: GET /api/v1/clusters/{id}/autopilot
// lists the cluster's controllers (another tenant's cluster is 404), and
// says so when the autopilot is off; tenant settings take preset autopilot
// only with a p95 target.
func TestClusterAutopilotEndpoint(t *testing.T) {
	reg := runningRegistry(t, time.Hour)
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, func(d *Deps) { d.Inference.Autopilot = reg })
	_, tok, _ := e.signup("ap@example.com")
	r := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "main"})
	if r.status != 201 {
		t.Fatalf("create cluster: %d %s", r.status, r.raw)
	}
	cid := r.body["id"].(string)
	r = e.do("GET", "/api/v1/clusters/"+cid+"/autopilot", tok, nil)
	if r.status != 200 || r.body["running"] != true || len(r.body["controllers"].([]any)) != 0 {
		t.Fatalf("no controller yet: %d %s", r.status, r.raw)
	}
	c, err := reg.Get(&routing.Cluster{ID: cid}, autopilot.Targets{P95E2E: 3 * time.Second, MaxCostUSD: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for range 30 {
		c.Observe(autopilot.Observation{At: now, E2E: time.Second, TTFT: 100 * time.Millisecond, CostUSD: 0.001, Quality: 0.7})
	}
	c.Step(context.Background(), now, nil)
	r = e.do("GET", "/api/v1/clusters/"+cid+"/autopilot", tok, nil)
	ctrls, _ := r.body["controllers"].([]any)
	if r.status != 200 || len(ctrls) != 1 {
		t.Fatalf("one controller: %d %s", r.status, r.raw)
	}
	got := ctrls[0].(map[string]any)
	tg := got["targets"].(map[string]any)
	ws := got["windows"].([]any)
	if tg["p95_e2e_ms"] != 3000.0 || tg["max_cost_usd_per_request"] != 0.01 || got["attainment"] != 1.0 || len(ws) != 1 ||
		ws[0].(map[string]any)["p95_e2e_ms"] != 1000.0 || len(got["decisions"].([]any)) != 1 || got["weights"] == nil {
		t.Fatalf("controller %s", r.raw)
	}
	_, tok2, _ := e.signup("other@example.com")
	if r := e.do("GET", "/api/v1/clusters/"+cid+"/autopilot", tok2, nil); r.status != 404 {
		t.Fatalf("another tenant's cluster: %d %s", r.status, r.raw)
	}
	// Settings: autopilot needs a p95 target; with one it is stored.
	r = e.do("PUT", "/api/v1/settings", tok, map[string]any{"preset": "autopilot"})
	if r.status != 400 || !strings.Contains(r.raw, "p95_e2e_ms") {
		t.Fatalf("autopilot without targets: %d %s", r.status, r.raw)
	}
	r = e.do("PUT", "/api/v1/settings", tok, map[string]any{"preset": "autopilot", "slo": map[string]any{"p95_e2e_ms": -1}})
	if r.status != 400 {
		t.Fatalf("negative target: %d %s", r.status, r.raw)
	}
	r = e.do("PUT", "/api/v1/settings", tok, map[string]any{"preset": "autopilot", "slo": map[string]any{"p95_e2e_ms": 2500}})
	if r.status != 200 || r.body["preset"] != "autopilot" || r.body["slo"].(map[string]any)["p95_e2e_ms"] != 2500.0 {
		t.Fatalf("autopilot settings: %d %s", r.status, r.raw)
	}
	r = e.do("PATCH", "/api/v1/settings", tok, map[string]any{"slo": map[string]any{"p95_ttft_ms": 400}})
	if r.status != 200 || r.body["slo"].(map[string]any)["p95_ttft_ms"] != 400.0 || r.body["slo"].(map[string]any)["p95_e2e_ms"] != 2500.0 {
		t.Fatalf("patch the ttft target: %d %s", r.status, r.raw)
	}

	off := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	_, tok3, _ := off.signup("off@example.com")
	r = off.do("POST", "/api/v1/clusters", tok3, map[string]any{"name": "main"})
	r = off.do("GET", "/api/v1/clusters/"+r.body["id"].(string)+"/autopilot", tok3, nil)
	if r.status != 200 || r.body["running"] != false {
		t.Fatalf("autopilot off: %d %s", r.status, r.raw)
	}
}

// TestWeightsHeaderAllocatesNothing: the header is on the decision path.
func TestWeightsHeaderAllocatesNothing(t *testing.T) {
	app := fiber.New()
	var allocs float64
	app.Get("/", func(c *fiber.Ctx) error {
		w := routing.Weights{Quality: 0.25, Cost: 0.25, Latency: 0.5}
		allocs = testing.AllocsPerRun(100, func() { setWeightsHeader(c, w) })
		return nil
	})
	req, _ := http.NewRequest("GET", "/", nil)
	if _, err := app.Test(req); err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("setWeightsHeader allocates %v times, want 0", allocs)
	}
}
