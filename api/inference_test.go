package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/dispatch/dispatchtest"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/tenants"
)

// keyTable is a KeyResolver made of plain values.
type keyTable struct {
	mu      sync.Mutex
	keys    map[string]*tenants.Principal
	revoked map[string]bool
}

func (k *keyTable) ResolveKey(_ context.Context, secret string) (*tenants.Principal, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.keys[secret]
	if !ok || k.revoked[secret] {
		return nil, fmt.Errorf("key: %w", tenants.ErrUnauthorized)
	}
	return p, nil
}

// testRouter is a small shortest-queue router (fewest in flight, ties to
// the earliest instance) with injectable failures; dispatchtest.Router wraps it
// (or the real schedule.Router) to count grants and releases.
type testRouter struct {
	mu       sync.Mutex
	err      error
	inflight map[string]int
	onToken  func(n int)
}

func newTestRouter() *testRouter { return &testRouter{inflight: map[string]int{}} }

func (r *testRouter) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *testRouter) Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	known := false
	var best *routing.Instance
	for i := range c.Instances {
		in := &c.Instances[i]
		if !req.AnyModel() && in.Model != req.Model {
			continue
		}
		known = true
		excluded := false
		for _, id := range req.Exclude {
			excluded = excluded || id == in.ID
		}
		if in.Disabled || excluded {
			continue
		}
		if best == nil || r.inflight[in.ID] < r.inflight[best.ID] {
			best = in
		}
	}
	if !known {
		return nil, routing.ErrUnknownModel
	}
	if best == nil {
		return nil, routing.ErrNoHealthyInstance
	}
	r.inflight[best.ID]++
	id := best.ID
	d := routing.Decision{Instance: *best, Policy: "test-shortest-queue", BatchSize: 1, DecisionTime: 7 * time.Microsecond,
		PredictedQuality: 0.625, PredictedE2E: 1500 * time.Millisecond, PredictedCostUSD: 0.0002, Relaxed: []string{"ttft"}}
	onToken := r.onToken
	return routing.NewAssignment(d, func(o routing.Outcome) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.inflight[id]--
	}, func(n int) {
		if onToken != nil {
			onToken(n)
		}
	}), nil
}

// inFlight reports the requests the router still counts per instance.
func (r *testRouter) inFlight() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, n := range r.inflight {
		out[id] = n
	}
	return out
}

type meterLog struct {
	mu  sync.Mutex
	evs []billing.UsageEvent
}

func (m *meterLog) Record(ev billing.UsageEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evs = append(m.evs, ev)
}

func (m *meterLog) events() []billing.UsageEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]billing.UsageEvent(nil), m.evs...)
}

type qualityLog struct {
	mu  sync.Mutex
	got []string
}

func (q *qualityLog) ObserveQuality(prompt, model string, s float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.got = append(q.got, fmt.Sprintf("%s|%s|%.2f", prompt, model, s))
}

const (
	testKey    = "rb_test_live_key"
	revokedKey = "rb_test_revoked"
	otherKey   = "rb_other_tenant"
)

// infEnv is a running api server with a cluster of fake vLLM instances.
type infEnv struct {
	url     string
	router  *dispatchtest.Router
	fake    *testRouter      // the test router, unless realRouter
	real    *schedule.Router // the scheduler's router when realRouter
	meter   *meterLog
	keys    *keyTable
	quality *qualityLog
	p       *tenants.Principal
	fwd     *Forwarder // envOpts.forward
	srv     *Server
}

type envOpts struct {
	instances  []tenants.Instance
	quality    bool
	bodyLimit  int
	realRouter bool
	policy     string
	spend      SpendGuard
	tracer     trace.TracerProvider
	logTo      io.Writer       // the server's JSON log (default discarded)
	router     Router          // the router behind dispatchtest.Router (default: the fake, or the real one with realRouter)
	observer   QualityObserver // the feedback observer (default a qualityLog with quality)
	forward    *Forwarder      // the several-replica step (inference_forward_test.go)
	autopilot  *autopilot.Registry
}

func principal(tenantID string, instances []tenants.Instance) *tenants.Principal {
	return &tenants.Principal{
		Tenant:    tenants.Tenant{ID: tenantID, Name: "acme"},
		Key:       tenants.Key{ID: "key-" + tenantID, TenantID: tenantID, Name: "ci"},
		Cluster:   &tenants.Cluster{ID: "cl-" + tenantID, TenantID: tenantID, Name: "main"},
		Instances: instances,
		Version:   1,
	}
}

func newInfEnv(t testing.TB, o envOpts) *infEnv {
	t.Helper()
	e := &infEnv{meter: &meterLog{}}
	e.p = principal("t1", o.instances)
	e.p.Cluster.Policy.Name = o.policy
	if o.router != nil {
		e.router = &dispatchtest.Router{Inner: o.router}
	} else if o.realRouter {
		e.real = startRouter(t)
		e.router = &dispatchtest.Router{Inner: e.real, InFlight: func() map[string]int {
			out := map[string]int{}
			for _, st := range e.real.State(e.p.Cluster.ID) {
				out[st.ID] = st.InFlight
			}
			return out
		}}
	} else {
		e.fake = newTestRouter()
		e.router = &dispatchtest.Router{Inner: e.fake, InFlight: e.fake.inFlight}
	}
	e.keys = &keyTable{
		keys:    map[string]*tenants.Principal{testKey: e.p, revokedKey: e.p, otherKey: principal("t2", o.instances)},
		revoked: map[string]bool{revokedKey: true},
	}
	deps := InferenceDeps{Keys: e.keys, Router: e.router, Meter: e.meter, Spend: o.spend, Tracer: o.tracer, Forward: o.forward, Autopilot: o.autopilot}
	e.fwd = o.forward
	if o.quality {
		e.quality = &qualityLog{}
		deps.Quality = e.quality
	}
	if o.observer != nil {
		deps.Quality = o.observer
	}
	limit := o.bodyLimit
	if limit == 0 {
		limit = 1 << 20
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.logTo != nil {
		log = slog.New(slog.NewJSONHandler(o.logTo, nil))
	}
	s := New(Config{BodyLimit: limit, Inference: InferenceConfig{ClientCheckInterval: 20 * time.Millisecond}},
		Deps{Log: log, Inference: deps})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.App().Listener(ln) }()
	e.srv = s
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		// Every request's context ended (a leaked one would keep Shutdown
		// waiting and count as running).
		if n := s.running.Load(); n != 0 {
			t.Errorf("%d requests still counted as running after Shutdown", n)
		}
	})
	e.url = "http://" + ln.Addr().String()
	return e
}

// startRouter runs the scheduler's Router until the test ends.
func startRouter(t testing.TB) *schedule.Router {
	t.Helper()
	r, err := schedule.NewRouter(schedule.Config{}, schedule.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

func inst(id, url, model string) tenants.Instance {
	return tenants.Instance{ID: id, BaseURL: url, Model: model, GPU: "A100", PriceInPerMTok: 1, PriceOutPerMTok: 2, QualityPrior: 0.5}
}

func (e *infEnv) client(opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(e.url + "/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0)}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request and returns status, headers and the decoded
// error envelope (if any).
func (e *infEnv) post(t *testing.T, path, key, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	// A body the server refuses unread (413 over the body limit) races
	// with its own upload: the server answers and closes while the client
	// still writes, and on a loaded machine the client's write can fail
	// before it reads the answer. Send it again; the answer is checked.
	for try := 0; err != nil && try < 5 && isWriteRace(err); try++ {
		req.Body = io.NopCloser(strings.NewReader(body))
		resp, err = http.DefaultClient.Do(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// isWriteRace reports a request that failed while its body was written
// because the server had closed the connection.
func isWriteRace(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

type envelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeEnvelope(t *testing.T, body string) envelope {
	t.Helper()
	var env envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Message == "" || env.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI error envelope (%v)", body, err)
	}
	return env
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestSDKChatCompletion(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "qwen-7b", Tokens: 4, APIKey: "upstream-secret"})
	in := inst("i1", up.URL, "qwen-7b")
	in.APIKey = "upstream-secret"
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{in}})
	var raw *http.Response
	c := e.client(option.WithResponseInto(&raw))
	got, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("name four words")},
	})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if got.Choices[0].Message.Content != "w0 w1 w2 w3" || got.Model != "qwen-7b" || got.Usage.CompletionTokens != 4 {
		t.Errorf("completion %+v", got)
	}
	wantHdr := map[string]string{
		hdrInstance: "i1", hdrModel: "qwen-7b", hdrPolicyOut: "test-shortest-queue", hdrDecisionUs: "7",
		hdrBatchSize: "1", hdrPredictedQuality: "0.6250", hdrPredictedE2EMs: "1500.0", hdrPredictedCostUSD: "0.0002",
		hdrRelaxed: "ttft",
	}
	gotHdr := map[string]string{}
	for k := range wantHdr {
		gotHdr[k] = raw.Header.Get(k)
	}
	if diff := cmp.Diff(wantHdr, gotHdr); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	rid := raw.Header.Get(HeaderRequestID)
	if rid == "" {
		t.Error("no X-Request-Id")
	}
	ups := up.Requests()
	if len(ups) != 1 || ups[0].Body["model"] != "qwen-7b" || ups[0].Authorization != "Bearer upstream-secret" {
		t.Errorf("upstream saw %+v", ups)
	}
	g, r, outs := e.router.Settled(t)
	if g != 1 || r != 1 || outs[0].Err != nil || outs[0].OutputTokens != 4 {
		t.Errorf("granted %d released %d outcomes %+v", g, r, outs)
	}
	req := e.router.LastRequest()
	// routing.EstimateChatTokens: "be brief" 2 and "name four words" 4 tokens, + 5 per message + 3.
	if req.ID != rid || req.Prompt != "be brief\nname four words" || req.PromptTokens != 2+4+2*5+3 || !req.AnyModel() {
		t.Errorf("routing request %+v", req)
	}
	evs := e.meter.events()
	if len(evs) != 1 {
		t.Fatalf("%d usage events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.RequestID != rid || ev.TenantID != "t1" || ev.KeyID != "key-t1" || ev.ClusterID != "cl-t1" || ev.InstanceID != "i1" ||
		ev.Model != "qwen-7b" || ev.Status != "ok" || ev.HTTPStatus != 200 || ev.OutputTokens != 4 || ev.PromptTokens != 5 ||
		ev.Cost != (5*1+4*2)*1000 || ev.CostUSD != 0 || ev.PredictedQuality != 0.625 { // 5 tokens at $1/M + 4 at $2/M, in nano-USD
		t.Errorf("usage event %+v", ev)
	}
}

func TestSDKCompletion(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "qwen-1b", Tokens: 3})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "qwen-1b")}})
	c := e.client()
	got, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "qwen-1b",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")},
	})
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if got.Choices[0].Text != "w0 w1 w2" || got.Usage.PromptTokens != 4 {
		t.Errorf("completion %+v", got)
	}
	// routing.EstimateTokens("once upon a time") = (16/4 + 4×4/3)/2 = 4.67 → 5
	if req := e.router.LastRequest(); req.Model != "qwen-1b" || req.PromptTokens != 5 {
		t.Errorf("routing request model %q tokens %d", req.Model, req.PromptTokens)
	}
}

func TestSDKChatStream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	for _, tc := range []struct {
		name      string
		withUsage bool
	}{{"without usage", false}, {"with usage", true}} {
		t.Run(tc.name, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
			if tc.withUsage {
				params.StreamOptions.IncludeUsage = openai.Bool(true)
			}
			var raw *http.Response
			c := e.client(option.WithResponseInto(&raw))
			stream := c.Chat.Completions.NewStreaming(context.Background(), params)
			var text strings.Builder
			var usage int64
			chunks := 0
			for stream.Next() {
				ch := stream.Current()
				chunks++
				if len(ch.Choices) > 0 {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
				if ch.Usage.CompletionTokens > 0 {
					usage = ch.Usage.CompletionTokens
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if text.String() != "w0 w1 w2 w3 w4" {
				t.Errorf("streamed text %q", text.String())
			}
			if tc.withUsage != (usage == 5) {
				t.Errorf("usage %d with include_usage=%v", usage, tc.withUsage)
			}
			if raw.Header.Get("Content-Type") != "text/event-stream" || raw.Header.Get(hdrInstance) != "i1" {
				t.Errorf("headers %v", raw.Header)
			}
		})
	}
	g, r, _ := e.router.Settled(t)
	if g != 2 || r != 2 {
		t.Errorf("granted %d released %d", g, r)
	}
	// A stream is metered after its last event reached the client (and
	// after its release): the SDK can be done before the second event is.
	testwait.Until(t, "two usage events", func() bool { return len(e.meter.events()) >= 2 })
	evs := e.meter.events()
	if len(evs) != 2 || evs[0].OutputTokens != 5 || evs[1].OutputTokens != 5 || evs[0].Status != "ok" || evs[0].TTFT <= 0 {
		t.Errorf("usage events %+v", evs)
	}
}

func TestSDKErrorUnknownModel(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	c := e.client()
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-9", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err %v, want *openai.Error", err)
	}
	if apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" || apiErr.Param != "model" || !strings.Contains(apiErr.Message, "m, auto") {
		t.Errorf("error %d code %q param %q message %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Message)
	}
	if len(e.meter.events()) != 0 {
		t.Error("a request that reached no instance was metered")
	}
}

func TestInferenceBadInputs(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, bodyLimit: 64 << 10})
	chat := `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`
	huge := `{"model":"auto","messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`
	for _, tc := range []struct {
		name      string
		path      string
		key       string
		body      string
		hdr       map[string]string
		status    int
		param     string
		code      string
		typ       string
		routedNot bool
	}{
		{name: "bad json", body: `{"model":`, status: 400, typ: "invalid_request_error"},
		{name: "not an object", body: `[1,2]`, status: 400},
		{name: "empty body", body: ``, status: 400},
		{name: "model missing", body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model"},
		{name: "model wrong type", body: `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model"},
		{name: "messages missing", body: `{"model":"auto"}`, status: 400, param: "messages"},
		{name: "messages wrong type", body: `{"model":"auto","messages":"hi"}`, status: 400, param: "messages"},
		{name: "messages empty", body: `{"model":"auto","messages":[]}`, status: 400, param: "messages"},
		{name: "message not object", body: `{"model":"auto","messages":[1]}`, status: 400, param: "messages[0]"},
		{name: "role missing", body: `{"model":"auto","messages":[{"content":"hi"}]}`, status: 400, param: "messages[0].role"},
		{name: "content wrong type", body: `{"model":"auto","messages":[{"role":"user","content":5}]}`, status: 400, param: "messages[0].content"},
		{name: "stream wrong type", body: `{"model":"auto","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "stream"},
		{name: "max_tokens negative", body: `{"model":"auto","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "max_tokens"},
		{name: "max_tokens string", body: `{"model":"auto","max_tokens":"5","messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "max_tokens"},
		{name: "stream_options wrong type", body: `{"model":"auto","stream":true,"stream_options":true,"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "stream_options"},
		{name: "prompt missing", path: "/v1/completions", body: `{"model":"auto"}`, status: 400, param: "prompt"},
		{name: "prompt wrong type", path: "/v1/completions", body: `{"model":"auto","prompt":{"a":1}}`, status: 400, param: "prompt"},
		{name: "routebalance unknown field", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"presett":"cost"}}`, status: 400, param: "routebalance"},
		{name: "routebalance weights sum", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"weights":{"quality":0.5,"cost":0.1,"latency":0.1}}}`, status: 400, param: "routebalance.weights"},
		{name: "routebalance weights negative", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"weights":"quality=1.5,cost=-0.5"}}`, status: 400, param: "routebalance.weights"},
		{name: "routebalance budget negative", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}],"routebalance":{"budget_usd":-1}}`, status: 400, param: "routebalance.budget_usd"},
		{name: "header weights", body: chat, hdr: map[string]string{hdrWeights: "quality=0.9,cost=0.9"}, status: 400, param: hdrWeights},
		{name: "header preset", body: chat, hdr: map[string]string{hdrPreset: "fastest"}, status: 400, param: hdrPreset},
		{name: "header custom without weights", body: chat, hdr: map[string]string{hdrPreset: "custom"}, status: 400, param: "preset"},
		{name: "header priority", body: chat, hdr: map[string]string{hdrPriority: "urgent"}, status: 400, param: hdrPriority},
		{name: "header policy oracle", body: chat, hdr: map[string]string{hdrPolicy: "oracle"}, status: 400, param: hdrPolicy},
		{name: "header budget", body: chat, hdr: map[string]string{hdrBudget: "cheap"}, status: 400, param: hdrBudget},
		{name: "header ttft", body: chat, hdr: map[string]string{hdrTTFT: "-5"}, status: 400, param: hdrTTFT},
		{name: "header workflow too long", body: chat, hdr: map[string]string{hdrWorkflow: strings.Repeat("w", 300)}, status: 400, param: hdrWorkflow},
		{name: "compressed body", body: chat, hdr: map[string]string{"Content-Encoding": "gzip"}, status: 415},
		{name: "huge body", body: huge, status: 413},
		{name: "missing key", key: "-", body: chat, status: 401, code: "missing_api_key", typ: "authentication_error"},
		{name: "invalid key", key: "rb_nope", body: chat, status: 401, code: "invalid_api_key"},
		{name: "revoked key", key: revokedKey, body: chat, status: 401, code: "invalid_api_key"},
		{name: "unknown model", body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, status: 404, code: "model_not_found", param: "model", routedNot: true},
		{name: "feedback missing key", path: "/v1/feedback", key: "-", body: `{}`, status: 401},
		{name: "models wrong method", path: "/v1/models", body: `{}`, status: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/chat/completions"
			}
			key := tc.key
			switch key {
			case "":
				key = testKey
			case "-":
				key = ""
			}
			resp, body := e.post(t, path, key, tc.body, tc.hdr)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			env := decodeEnvelope(t, body)
			if tc.param != "" && str(env.Error.Param) != tc.param {
				t.Errorf("param %q, want %q (%s)", str(env.Error.Param), tc.param, env.Error.Message)
			}
			if tc.code != "" && str(env.Error.Code) != tc.code {
				t.Errorf("code %q, want %q", str(env.Error.Code), tc.code)
			}
			if tc.typ != "" && env.Error.Type != tc.typ {
				t.Errorf("type %q, want %q", env.Error.Type, tc.typ)
			}
		})
	}
	if len(up.Requests()) != 0 {
		t.Errorf("bad requests reached the upstream: %d", len(up.Requests()))
	}
	g, r, _ := e.router.Settled(t)
	if g != 0 || r != 0 {
		t.Errorf("granted %d released %d, want none", g, r)
	}
}

func TestFailOverOnRefusedConnection(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 2})
	dead := vllmtest.RefusedURL(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			// Round-robin over [dead, live] sends one of the first two
			// requests to the dead instance first.
			e := newInfEnv(t, envOpts{realRouter: true, policy: "round-robin",
				instances: []tenants.Instance{inst("dead", dead, "m"), inst("live", up.URL, "m")}})
			failovers := 0
			for i := 0; i < 2; i++ {
				body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
				resp, out := e.post(t, "/v1/chat/completions", testKey, body, nil)
				if resp.StatusCode != 200 || resp.Header.Get(hdrInstance) != "live" || !strings.Contains(out, "w1") {
					t.Fatalf("request %d: status %d instance %q body %s", i, resp.StatusCode, resp.Header.Get(hdrInstance), out)
				}
				if fo := resp.Header.Get(hdrFailedOver); fo != "" {
					failovers++
					if fo != "dead" {
						t.Errorf("failed over from %q", fo)
					}
					if ex := e.router.LastRequest().Exclude; len(ex) != 1 || ex[0] != "dead" {
						t.Errorf("retry excluded %v, want [dead]", ex)
					}
				}
			}
			if failovers == 0 {
				t.Error("no request failed over")
			}
			g, r, outs := e.router.Settled(t)
			if g != 2+failovers || r != g {
				t.Fatalf("granted %d released %d, want %d each", g, r, 2+failovers)
			}
			unreachable := 0
			for _, o := range outs {
				if errors.Is(o.Err, proxy.ErrUnreachable) && o.Upstream {
					unreachable++
				} else if o.Err != nil {
					t.Errorf("outcome %+v", o)
				}
			}
			if unreachable != failovers {
				t.Errorf("%d unreachable outcomes, want %d", unreachable, failovers)
			}
			testwait.Until(t, "two usage events", func() bool { return len(e.meter.events()) >= 2 })
			if n := len(e.meter.events()); n != 2 {
				t.Errorf("%d usage events, want one per request", n)
			}
		})
	}
}

func TestAllInstancesRefuse(t *testing.T) {
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("a", vllmtest.RefusedURL(t), "m"), inst("b", vllmtest.RefusedURL(t), "m")}})
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if env := decodeEnvelope(t, body); resp.StatusCode != 502 || str(env.Error.Code) != "upstream_unreachable" {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	g, r, _ := e.router.Settled(t)
	if g != 2 || r != 2 {
		t.Errorf("granted %d released %d, want 2 2 (one retry only)", g, r)
	}
}

func TestOnlyInstanceRefusesNoRetryTarget(t *testing.T) {
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("a", vllmtest.RefusedURL(t), "m")}})
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if env := decodeEnvelope(t, body); resp.StatusCode != 502 || str(env.Error.Code) != "upstream_unreachable" {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if g, r, _ := e.router.Settled(t); g != 1 || r != 1 {
		t.Errorf("granted %d released %d", g, r)
	}
}

func TestUpstreamErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        vllmtest.Config
		model      string
		wantStatus int
		wantCode   string
		wantMsg    string
		fault      bool
	}{
		{"server error becomes 502", vllmtest.Config{Model: "m", Status: 500}, "m", 502, "upstream_error", "injected failure 500", true},
		{"unknown served model relayed as 404", vllmtest.Config{Model: "other"}, "m", 404, "model_not_found", "The model `m` does not exist.", false},
		{"upstream credential refused is 502", vllmtest.Config{Model: "m", APIKey: "needed"}, "m", 502, "upstream_auth", "invalid upstream API key", false},
		{"bad request relayed", vllmtest.Config{Model: "m", Status: 400}, "m", 400, "", "injected failure 400", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := vllmtest.New(t, tc.cfg)
			e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, tc.model)}})
			for _, stream := range []bool{false, true} {
				body := fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
				resp, out := e.post(t, "/v1/chat/completions", testKey, body, nil)
				env := decodeEnvelope(t, out)
				if resp.StatusCode != tc.wantStatus || str(env.Error.Code) != tc.wantCode || !strings.Contains(env.Error.Message, tc.wantMsg) {
					t.Errorf("stream=%v: status %d body %s", stream, resp.StatusCode, out)
				}
				if resp.Header.Get(hdrInstance) != "i1" {
					t.Errorf("no decision headers on an upstream error")
				}
			}
			g, r, outs := e.router.Settled(t)
			if g != 2 || r != 2 || outs[0].Err == nil || outs[0].Upstream != tc.fault {
				t.Errorf("granted %d released %d outcome %+v", g, r, outs)
			}
			testwait.Until(t, "two usage events", func() bool { return len(e.meter.events()) >= 2 })
			evs := e.meter.events()
			if len(evs) != 2 || evs[0].Status != "error" || evs[0].HTTPStatus != tc.wantStatus || evs[0].OutputTokens != 0 {
				t.Errorf("usage events %+v", evs)
			}
		})
	}
}

func TestMidStreamDeath(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 10, DieAfter: 3})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	c := e.client()
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Errorf("stream error %v, want the upstream failure", err)
	}
	if text.String() != "w0 w1 w2" {
		t.Errorf("text before the failure %q", text.String())
	}
	_, _, outs := e.router.Settled(t)
	if len(outs) != 1 || !errors.Is(outs[0].Err, proxy.ErrStreamBroken) || !outs[0].Upstream || outs[0].OutputTokens != 3 {
		t.Errorf("outcomes %+v", outs)
	}
	testwait.Until(t, "the usage event", func() bool { return len(e.meter.events()) == 1 })
	if ev := e.meter.events()[0]; ev.Status != "error" || ev.OutputTokens != 3 {
		t.Errorf("usage event %+v", ev)
	}
}

func TestClientCancelPropagatesUpstream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		cfg    vllmtest.Config
	}{
		{"non-stream waiting", false, vllmtest.Config{Model: "m"}},
		{"stream waiting for first token", true, vllmtest.Config{Model: "m"}},
		{"stream mid-way", true, vllmtest.Config{Model: "m", Tokens: 3, StallAfter: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.StallAfter == 0 {
				cfg.Hold = make(chan struct{})
				defer close(cfg.Hold)
			}
			up := vllmtest.New(t, cfg)
			e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, tc.stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			done := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					// read until the stream stalls; cancel ends the read
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				done <- err
			}()
			<-up.Arrived()
			if tc.cfg.StallAfter > 0 {
				time.Sleep(50 * time.Millisecond) // let two tokens through
			}
			cancel()
			<-done
			testwait.Until(t, "the upstream to see the client leave", func() bool { return up.Cancelled() == 1 })
			_, _, outs := e.router.Settled(t)
			if len(outs) != 1 || outs[0].Err == nil || outs[0].Upstream {
				t.Errorf("outcomes %+v, want one client-side failure", outs)
			}
			testwait.Until(t, "the usage event", func() bool { return len(e.meter.events()) == 1 })
			if ev := e.meter.events()[0]; ev.Status != "cancelled" {
				t.Errorf("usage event status %q", ev.Status)
			}
		})
	}
}

func TestBudgetStopsStream(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 100})
	in := inst("i1", up.URL, "m")
	in.PriceInPerMTok, in.PriceOutPerMTok = 0, 1000 // $0.001 per output token
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{in}})
	resp, body := e.post(t, "/v1/completions", testKey, `{"model":"auto","stream":true,"prompt":"go"}`,
		map[string]string{hdrBudget: "0.004"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	var finishes []string
	tokens := 0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if line == "" || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("chunk %q: %v", line, err)
		}
		for _, c := range ch.Choices {
			if c.Text != "" {
				tokens++
			}
			if c.FinishReason != nil {
				finishes = append(finishes, *c.FinishReason)
			}
		}
	}
	if tokens != 4 || len(finishes) != 1 || finishes[0] != "length" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("tokens %d finishes %v body tail %q", tokens, finishes, body[max(0, len(body)-40):])
	}
	if req := e.router.LastRequest(); req.BudgetUSD != 0.004 {
		t.Errorf("routing request budget %v", req.BudgetUSD)
	}
	testwait.Until(t, "the usage event", func() bool { return len(e.meter.events()) == 1 })
	if ev := e.meter.events()[0]; ev.Status != "budget" || ev.OutputTokens != 4 {
		t.Errorf("usage event %+v", ev)
	}
}

func TestReleasedExactlyOnceOnPanic(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 5})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	e.fake.onToken = func(n int) {
		if n == 2 {
			panic("estimator bug")
		}
	}
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "w1") || strings.Contains(body, "w3") {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	g, r, outs := e.router.Settled(t)
	if g != 1 || r != 1 || outs[0].Err == nil || !strings.Contains(outs[0].Err.Error(), "panic") {
		t.Errorf("granted %d released %d outcomes %+v", g, r, outs)
	}
	testwait.Until(t, "the usage event", func() bool { return len(e.meter.events()) == 1 })
	if ev := e.meter.events()[0]; ev.Status != "error" || ev.OutputTokens != 2 {
		t.Errorf("usage event after the panic %+v, want status error with the 2 tokens sent", ev)
	}
	// The server is still serving.
	e.fake.onToken = nil
	if resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil); resp.StatusCode != 200 {
		t.Errorf("after the panic: status %d %s", resp.StatusCode, body)
	}
}

func TestRouterErrors(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{routing.ErrNoHealthyInstance, 503, "no_healthy_instance", ""},
		{routing.ErrModelDisabled, 403, errCodeModelDisabled, ""},
		{routing.ErrNoCapacity, 429, "no_capacity", "1"},
		{routing.ErrClosed, 503, "shutting_down", ""},
		{errors.New("boom"), 500, "", ""},
	} {
		e.fake.setErr(tc.err)
		resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
		env := decodeEnvelope(t, body)
		if resp.StatusCode != tc.status || str(env.Error.Code) != tc.code || resp.Header.Get("Retry-After") != tc.retryAfter {
			t.Errorf("%v: status %d code %q retry-after %q", tc.err, resp.StatusCode, str(env.Error.Code), resp.Header.Get("Retry-After"))
		}
	}
}

func TestNoCluster(t *testing.T) {
	e := newInfEnv(t, envOpts{})
	e.p.Cluster = nil
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	if env := decodeEnvelope(t, body); resp.StatusCode != 400 || str(env.Error.Code) != "no_cluster" {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}

func TestOverridesReachTheRouter(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	e.p.Settings = tenants.Settings{Preset: "latency", SLO: tenants.SLO{TTFTMs: 900, E2EMs: 5000, MaxCostUSDPerRequest: 0.5}}
	for _, tc := range []struct {
		name    string
		keyCfg  tenants.Key
		hdr     map[string]string
		rb      string
		weights routing.Weights
		slo     routing.SLO
		prio    routing.Priority
		flow    string
		policy  string
		budget  float64
	}{
		{name: "tenant default", weights: routing.Weights{Quality: 0.1, Cost: 0.1, Latency: 0.8},
			slo: routing.SLO{TTFT: 900 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5}, prio: routing.PriorityNormal},
		{name: "key over tenant", keyCfg: tenants.Key{Preset: "cost", SLO: &tenants.SLO{TTFTMs: 300}},
			weights: routing.Weights{Quality: 0.1, Cost: 0.8, Latency: 0.1},
			slo:     routing.SLO{TTFT: 300 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5}, prio: routing.PriorityNormal},
		{name: "key custom weights", keyCfg: tenants.Key{Preset: "custom", Weights: &routing.Weights{Quality: 0.5, Cost: 0.5}},
			weights: routing.Weights{Quality: 0.5, Cost: 0.5},
			slo:     routing.SLO{TTFT: 900 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5}, prio: routing.PriorityNormal},
		{name: "headers over key", keyCfg: tenants.Key{Preset: "cost"},
			hdr: map[string]string{hdrWeights: "q=0.6,c=0.2,l=0.2", hdrPriority: "high", hdrWorkflow: "wf-1",
				hdrBudget: "0.25", hdrTTFT: "150", hdrTPOT: "40", hdrPolicy: "shortest-queue"},
			weights: routing.Weights{Quality: 0.6, Cost: 0.2, Latency: 0.2},
			slo:     routing.SLO{TTFT: 150 * time.Millisecond, TPOT: 40 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5},
			prio:    routing.PriorityHigh, flow: "wf-1", policy: "shortest-queue", budget: 0.25},
		{name: "body over headers",
			hdr:     map[string]string{hdrPreset: "cost", hdrPriority: "high", hdrWorkflow: "wf-h"},
			rb:      `{"preset":"quality","priority":"low","workflow":"wf-b","budget_usd":0.1,"ttft_slo_ms":200,"tpot_slo_ms":30,"policy":"round-robin"}`,
			weights: routing.Weights{Quality: 0.8, Cost: 0.1, Latency: 0.1},
			slo:     routing.SLO{TTFT: 200 * time.Millisecond, TPOT: 30 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5},
			prio:    routing.PriorityLow, flow: "wf-b", policy: "round-robin", budget: 0.1},
		{name: "body weights object", rb: `{"weights":{"quality":0.2,"cost":0.2,"latency":0.6}}`,
			weights: routing.Weights{Quality: 0.2, Cost: 0.2, Latency: 0.6},
			slo:     routing.SLO{TTFT: 900 * time.Millisecond, E2E: 5 * time.Second, MaxCostUSD: 0.5}, prio: routing.PriorityNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.p.Key = tc.keyCfg
			e.p.Key.ID = "key-t1"
			body := `{"model":"auto","messages":[{"role":"user","content":"hi"}]`
			if tc.rb != "" {
				body += `,"routebalance":` + tc.rb
			}
			body += "}"
			resp, out := e.post(t, "/v1/chat/completions", testKey, body, tc.hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, out)
			}
			req := e.router.LastRequest()
			got := struct {
				W      routing.Weights
				SLO    routing.SLO
				Prio   routing.Priority
				Flow   string
				Policy string
				Budget float64
			}{req.Weights, req.SLO, req.Priority, req.Workflow, req.Policy, req.BudgetUSD}
			want := got
			want.W, want.SLO, want.Prio, want.Flow, want.Policy, want.Budget = tc.weights, tc.slo, tc.prio, tc.flow, tc.policy, tc.budget
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("routing request (-want +got):\n%s", diff)
			}
			ups := up.Requests()
			if _, ok := ups[len(ups)-1].Body["routebalance"]; ok {
				t.Error("the routebalance object was forwarded upstream")
			}
		})
	}
}

func TestModels(t *testing.T) {
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{
		inst("a", "http://127.0.0.1:1", "qwen-7b"), inst("b", "http://127.0.0.1:1", "qwen-1b"), inst("c", "http://127.0.0.1:1", "qwen-7b"),
	}})
	c := e.client()
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if diff := cmp.Diff([]string{"auto", "qwen-1b", "qwen-7b"}, ids); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("models without a key: %d", resp.StatusCode)
	}
	// GET /v1/models/{id}: one card, or 404 model_not_found.
	for _, id := range []string{"auto", "qwen-7b"} {
		m, err := c.Models.Get(context.Background(), id)
		if err != nil || m.ID != id || m.Object != "model" {
			t.Errorf("Models.Get(%q) = %+v, %v", id, m, err)
		}
	}
	_, err = c.Models.Get(context.Background(), "gpt-4")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("Models.Get(gpt-4) = %v, want 404 model_not_found", err)
	}
}

func TestFeedback(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	t.Run("disabled", func(t *testing.T) {
		e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}})
		resp, body := e.post(t, "/v1/feedback", testKey, `{"request_id":"x","score":1}`, nil)
		if env := decodeEnvelope(t, body); resp.StatusCode != 501 || str(env.Error.Code) != "feedback_disabled" {
			t.Errorf("status %d %s", resp.StatusCode, body)
		}
	})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, quality: true})
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"rate me"}]}`, nil)
	rid := resp.Header.Get(HeaderRequestID)
	if resp.StatusCode != 200 || rid == "" {
		t.Fatalf("status %d id %q body %s", resp.StatusCode, rid, body)
	}
	for _, tc := range []struct {
		name   string
		key    string
		body   string
		status int
		param  string
	}{
		{"bad json", testKey, `{`, 400, ""},
		{"missing id", testKey, `{"score":0.5}`, 400, "request_id"},
		{"score out of range", testKey, fmt.Sprintf(`{"request_id":%q,"score":1.5}`, rid), 400, "score"},
		{"score wrong type", testKey, fmt.Sprintf(`{"request_id":%q,"score":"good"}`, rid), 400, "score"},
		{"unknown id", testKey, `{"request_id":"req_nope","score":0.5}`, 404, "request_id"},
		{"other tenant", otherKey, fmt.Sprintf(`{"request_id":%q,"score":0.5}`, rid), 404, "request_id"},
		{"accepted", testKey, fmt.Sprintf(`{"request_id":%q,"score":0.75}`, rid), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.post(t, "/v1/feedback", tc.key, tc.body, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status != 200 {
				if env := decodeEnvelope(t, body); str(env.Error.Param) != tc.param {
					t.Errorf("param %q, want %q", str(env.Error.Param), tc.param)
				}
			}
		})
	}
	if diff := cmp.Diff([]string{"rate me|m|0.75"}, e.quality.got); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestRecentRequestsIsBounded(t *testing.T) {
	r := newRecentRequests(2, 4)
	r.add("a", servedRequest{prompt: "héllo wörld"})
	r.add("b", servedRequest{prompt: "x"})
	r.add("c", servedRequest{prompt: "y"})
	if _, ok := r.get("a"); ok {
		t.Error("oldest entry kept beyond the window")
	}
	if _, ok := r.get("c"); !ok {
		t.Error("newest entry missing")
	}
	r.add("d", servedRequest{prompt: "héllo"})
	if s, _ := r.get("d"); s.prompt != "hél" {
		t.Errorf("prompt cut to %q, want whole runes within 4 bytes", s.prompt)
	}
}

// TestReleasedExactlyOnceOnEveryPath drives the real scheduler through
// every way a request can end and checks that each assignment was
// released once, the scheduler's in-flight counters are back at zero, and
// one usage event was recorded with the right status.
func TestReleasedExactlyOnceOnEveryPath(t *testing.T) {
	chat := func(stream bool) string {
		return fmt.Sprintf(`{"model":"auto","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
	}
	for _, tc := range []struct {
		name      string
		cfg       vllmtest.Config
		refused   bool // a refusing instance precedes the live one
		body      string
		hdr       map[string]string
		cancel    bool // the client leaves after the upstream got the request
		wantCode  int  // 0: not checked (client left)
		wantEvent string
	}{
		{name: "ok", cfg: vllmtest.Config{}, body: chat(false), wantCode: 200, wantEvent: "ok"},
		{name: "ok stream", cfg: vllmtest.Config{}, body: chat(true), wantCode: 200, wantEvent: "ok"},
		{name: "upstream 500", cfg: vllmtest.Config{Status: 500}, body: chat(false), wantCode: 502, wantEvent: "error"},
		{name: "upstream 500 stream", cfg: vllmtest.Config{Status: 500}, body: chat(true), wantCode: 502, wantEvent: "error"},
		{name: "upstream 400", cfg: vllmtest.Config{Status: 400}, body: chat(true), wantCode: 400, wantEvent: "error"},
		{name: "fail-over", cfg: vllmtest.Config{}, refused: true, body: chat(true), wantCode: 200, wantEvent: "ok"},
		{name: "mid-stream death", cfg: vllmtest.Config{Tokens: 6, DieAfter: 2}, body: chat(true), wantCode: 200, wantEvent: "error"},
		{name: "budget stop", cfg: vllmtest.Config{Tokens: 50}, body: chat(true), hdr: map[string]string{hdrBudget: "0.000012"}, wantCode: 200, wantEvent: "budget"},
		{name: "client leaves waiting", cfg: vllmtest.Config{Hold: make(chan struct{})}, body: chat(false), cancel: true, wantEvent: "cancelled"},
		{name: "client leaves mid-stream", cfg: vllmtest.Config{Tokens: 6, StallAfter: 2}, body: chat(true), cancel: true, wantEvent: "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Hold != nil {
				defer close(tc.cfg.Hold)
			}
			tc.cfg.Model = "m"
			up := vllmtest.New(t, tc.cfg)
			live := inst("live", up.URL, "m")
			// One output token costs $0.000002, so the budget stop
			// cuts a stream the upstream would have continued.
			live.PriceInPerMTok, live.PriceOutPerMTok = 0, 2
			instances := []tenants.Instance{live}
			policy := ""
			if tc.refused {
				instances = []tenants.Instance{inst("dead", vllmtest.RefusedURL(t), "m"), live}
				policy = "round-robin"
			}
			e := newInfEnv(t, envOpts{realRouter: true, policy: policy, instances: instances})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := 0; i < 2 && (i == 0 || tc.refused); i++ { // round-robin: one of two hits the dead instance
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(tc.body))
				req.Header.Set("Authorization", "Bearer "+testKey)
				for k, v := range tc.hdr {
					req.Header.Set(k, v)
				}
				done := make(chan int, 1)
				go func() {
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						done <- 0
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					done <- resp.StatusCode
				}()
				if tc.cancel {
					<-up.Arrived()
					time.Sleep(30 * time.Millisecond)
					cancel()
				}
				if code := <-done; tc.wantCode != 0 && code != tc.wantCode {
					t.Fatalf("status %d, want %d", code, tc.wantCode)
				}
			}
			g, r, _ := e.router.Settled(t)
			if g == 0 || g != r {
				t.Errorf("granted %d released %d", g, r)
			}
			wantEvents := 1
			if tc.refused {
				wantEvents = 2
			}
			testwait.Until(t, "the usage events", func() bool { return len(e.meter.events()) >= wantEvents })
			evs := e.meter.events()
			if len(evs) != wantEvents || evs[len(evs)-1].Status != tc.wantEvent {
				t.Errorf("usage events %+v, want %d ending %q", evs, wantEvents, tc.wantEvent)
			}
		})
	}
}
