package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/tenants"
)

// The production implementations satisfy the interfaces the inference
// handlers declare.
var (
	_ KeyResolver = (*tenants.Service)(nil)
	_ Router      = (*schedule.Router)(nil)
	_ Meter       = (*billing.Meter)(nil)
	_ SpendGuard  = (*billing.Guard)(nil)
)

// TestEndToEndThroughStores signs up through the management API on both
// database engines, registers a fake vLLM instance with an upstream key,
// creates an API key, and completes with the OpenAI SDK through the real
// tenants service and scheduler; a revoked key fails at once.
func TestEndToEndThroughStores(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		up := vllmtest.New(t, vllmtest.Config{Model: "qwen-7b", Tokens: 3, APIKey: "upstream-secret"})
		router := startRouter(t)
		meter := &meterLog{}
		e := newEnv(t, db, true, func(d *Deps) {
			d.Inference = InferenceDeps{Keys: d.Tenants, Router: router, Meter: meter}
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = e.app.Listener(ln) }()
		t.Cleanup(func() { _ = e.app.ShutdownWithTimeout(5 * time.Second) })
		base := "http://" + ln.Addr().String()

		r := e.do("POST", "/api/v1/signup", "", map[string]any{"email": "ops@example.com", "password": "correct horse battery", "name": "Acme"})
		if r.status != 201 {
			t.Fatalf("signup: %d %s", r.status, r.raw)
		}
		jwt := r.str("access_token")
		r = e.do("POST", "/api/v1/clusters", jwt, map[string]any{"name": "main"})
		if r.status != 201 {
			t.Fatalf("cluster: %d %s", r.status, r.raw)
		}
		clusterID := r.str("id")
		r = e.do("POST", "/api/v1/clusters/"+clusterID+"/instances", jwt, map[string]any{
			"base_url": up.URL, "model": "qwen-7b", "gpu": "A100", "tensor_parallel": 1,
			"price_in_per_mtok": 1, "price_out_per_mtok": 2, "max_concurrency": 8, "api_key": "upstream-secret",
		})
		if r.status != 201 {
			t.Fatalf("instance: %d %s", r.status, r.raw)
		}
		instanceID := r.str("id")
		r = e.do("POST", "/api/v1/keys", jwt, map[string]any{"name": "ci"})
		if r.status != 201 {
			t.Fatalf("key: %d %s", r.status, r.raw)
		}
		key, keyID := r.str("key"), r.str("id")

		client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		var raw *http.Response
		got, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
		}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		if got.Choices[0].Message.Content != "w0 w1 w2" || raw.Header.Get(hdrInstance) != instanceID || raw.Header.Get(hdrModel) != "qwen-7b" {
			t.Errorf("completion %q via %q/%q", got.Choices[0].Message.Content, raw.Header.Get(hdrInstance), raw.Header.Get(hdrModel))
		}
		if p := raw.Header.Get(hdrPolicyOut); p == "" {
			t.Error("no policy header from the scheduler")
		}

		stream := client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
			Model: "qwen-7b", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("count")},
		})
		var text strings.Builder
		for stream.Next() {
			if ch := stream.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Text)
			}
		}
		if err := stream.Err(); err != nil || text.String() != "w0 w1 w2" {
			t.Errorf("stream %q err %v", text.String(), err)
		}
		for _, req := range up.Requests() {
			if req.Authorization != "Bearer upstream-secret" || req.Body["model"] != "qwen-7b" {
				t.Errorf("upstream saw auth %q model %v", req.Authorization, req.Body["model"])
			}
		}
		models, err := client.Models.List(context.Background())
		if err != nil || len(models.Data) != 2 || models.Data[0].ID != "auto" || models.Data[1].ID != "qwen-7b" {
			t.Errorf("models %+v err %v", models, err)
		}

		testwait.Until(t, "two usage events", func() bool { return len(meter.events()) == 2 })
		for _, ev := range meter.events() {
			if ev.KeyID != keyID || ev.ClusterID != clusterID || ev.InstanceID != instanceID || ev.Status != "ok" || ev.OutputTokens != 3 {
				t.Errorf("usage event %+v", ev)
			}
		}
		testwait.Until(t, "the scheduler's in-flight count to return to zero", func() bool {
			for _, st := range router.State(clusterID) {
				if st.InFlight != 0 {
					return false
				}
			}
			return true
		})

		if r := e.do("DELETE", "/api/v1/keys/"+keyID, jwt, nil); r.status/100 != 2 {
			t.Fatalf("revoke: %d %s", r.status, r.raw)
		}
		_, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("again")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
			t.Errorf("revoked key: %v", err)
		}
	})
}

// spendStub refuses with a fixed error and remembers the limits it saw.
type spendStub struct {
	err error
	got []billing.Limits
}

func (s *spendStub) Check(l billing.Limits) error {
	s.got = append(s.got, l)
	return s.err
}

func TestSpendGuard(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"allowed", nil, 200, ""},
		{"budget spent", &billing.BudgetError{Scope: billing.ScopeTenant, ID: "t1", LimitUSD: 10, SpentUSD: 10}, 402, "budget_exceeded"},
		{"payment overdue", &billing.SuspendedError{TenantID: "t1", Status: "past_due"}, 402, "payment_required"},
		{"guard failure", errors.New("broken"), 503, "spend_check_unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard := &spendStub{err: tc.err}
			e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, spend: guard})
			e.p.Settings.SLO.MonthlyBudgetUSD = 10
			e.p.Key.SLO = &tenants.SLO{MonthlyBudgetUSD: 3}
			resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status != 200 {
				if env := decodeEnvelope(t, body); str(env.Error.Code) != tc.code {
					t.Errorf("code %q, want %q", str(env.Error.Code), tc.code)
				}
				if g, _, _ := e.router.Settled(t); g != 0 {
					t.Errorf("a refused request was routed")
				}
			}
			want := billing.Limits{TenantID: "t1", KeyID: "key-t1", TenantMonthlyUSD: 10, KeyMonthlyUSD: 3}
			if len(guard.got) != 1 || guard.got[0] != want {
				t.Errorf("limits %+v, want %+v", guard.got, want)
			}
		})
	}
	// The real guard with no spend booked lets requests through.
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, spend: billing.NewGuard(nil, time.Hour)})
	if resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
		t.Errorf("real guard: %d %s", resp.StatusCode, body)
	}
}
