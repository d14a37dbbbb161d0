package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing/sim/workload"
)

// upstream is a tiny OpenAI-compatible server on loopback: it answers every
// chat completion with five one-word chunks (or one JSON body), says it
// served model "small" in the router's headers, and records the largest
// number of requests it ever held at once.
type upstream struct {
	inflight, peak atomic.Int64
	mu             sync.Mutex
	models         []string
	fail           atomic.Bool
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := u.inflight.Add(1)
	// The count drops before the last bytes go out: once the client has the
	// whole response it may send its next request while this handler is
	// still returning.
	var once sync.Once
	leave := func() { once.Do(func() { u.inflight.Add(-1) }) }
	defer leave()
	for {
		p := u.peak.Load()
		if n <= p || u.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var body struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	u.mu.Lock()
	u.models = append(u.models, body.Model)
	u.mu.Unlock()
	if u.fail.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		fmt.Fprint(w, `{"error":{"message":"overloaded","type":"server_error","code":null}}`)
		return
	}
	w.Header().Set("X-RouteBalance-Model", "small")
	w.Header().Set("X-RouteBalance-Instance", "small-0")
	w.Header().Set("X-RouteBalance-Decision-Us", "12")
	w.Header().Set("X-RouteBalance-Predicted-Cost-Usd", "0.5")
	time.Sleep(2 * time.Millisecond)
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		leave()
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","created":1,"model":"small","choices":[{"index":0,"message":{"role":"assistant","content":"a b c d e"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range 5 {
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"small\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i)
		fl.Flush()
		time.Sleep(time.Millisecond)
	}
	leave()
	fmt.Fprint(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"small\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

var items = []workload.Item{
	{ID: "a", Prompt: "one", Scores: map[string]float64{"small": 1, "big": 0}},
	{ID: "b", Prompt: "two", Scores: map[string]float64{"small": 0, "big": 1}},
	{ID: "c", Prompt: "three"},
}

func TestRunStreaming(t *testing.T) {
	u := &upstream{}
	srv := httptest.NewServer(u)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.URL, cfg.APIKey, cfg.N, cfg.Stream, cfg.MaxConcurrency = srv.URL, "k", 12, true, 2
	cfg.Prices = map[string]Price{"small": {InPerMTok: 1e6, OutPerMTok: 2e6}} // $1 per input token, $2 per output token
	res, err := Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.Completed != 12 || s.Failed != 0 || res.Sent != 12 {
		t.Fatalf("completed %d failed %d sent %d, want 12/0/12 (errors %v)", s.Completed, s.Failed, res.Sent, res.Errors)
	}
	if p := u.peak.Load(); p > 2 {
		t.Errorf("peak in flight %d, want ≤ max-concurrency 2", p)
	}
	if d := cmp.Diff(map[string]int{"small": 12}, res.Served); d != "" {
		t.Errorf("served (-want +got):\n%s", d)
	}
	for _, r := range res.Records {
		if r.OutputTokens != 5 || r.PromptTokens != 7 || len(r.ITL) != 4 {
			t.Errorf("record tokens %d/%d itl %d, want 7/5/4", r.PromptTokens, r.OutputTokens, len(r.ITL))
		}
		if r.TTFT <= 0 || r.TTFT > r.E2E {
			t.Errorf("ttft %v e2e %v: want 0 < ttft ≤ e2e", r.TTFT, r.E2E)
		}
		if r.CostUSD != 7+10 {
			t.Errorf("cost %v, want 17 from prices", r.CostUSD)
		}
	}
	if res.CostSource != "prices" || s.CostPerRequestUSD != 17 {
		t.Errorf("cost source %q per request %v, want prices / 17", res.CostSource, s.CostPerRequestUSD)
	}
	// Quality is the label of the served model ("small") for the labelled
	// prompts, so it lies in [0,1] and counts only labelled prompts.
	if s.QualityN == 0 || s.QualityN > 12 {
		t.Errorf("quality n %d", s.QualityN)
	}
	if res.DecisionUs.N != 12 || res.DecisionUs.Mean != 12 {
		t.Errorf("decision us %+v, want 12 samples of 12", res.DecisionUs)
	}
	for _, m := range u.models {
		if m != "auto" {
			t.Errorf("sent model %q, want auto", m)
		}
	}
}

func TestRunNonStreamingPredictedCostAndFailures(t *testing.T) {
	u := &upstream{}
	srv := httptest.NewServer(u)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.URL, cfg.N, cfg.Rate, cfg.Model = srv.URL+"/v1", 4, 1000, "small"
	res, err := Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.Completed != 4 || res.CostSource != "predicted" || res.Summary.CostPerRequestUSD != 0.5 {
		t.Errorf("completed %d source %q cost %v; want 4, predicted, 0.5", res.Summary.Completed, res.CostSource, res.Summary.CostPerRequestUSD)
	}
	for _, r := range res.Records {
		if r.TTFT != r.E2E || r.OutputTokens != 5 {
			t.Errorf("non-streaming record ttft %v e2e %v out %d; want ttft = e2e, 5", r.TTFT, r.E2E, r.OutputTokens)
		}
	}
	u.fail.Store(true)
	res, err = Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.Failed != 4 || res.Summary.Completed != 0 {
		t.Fatalf("failed %d completed %d, want 4/0", res.Summary.Failed, res.Summary.Completed)
	}
	for msg := range res.Errors {
		if !strings.Contains(msg, "503") {
			t.Errorf("error %q does not name the status", msg)
		}
	}
}

func TestDurationLimit(t *testing.T) {
	srv := httptest.NewServer(&upstream{})
	defer srv.Close()
	cfg := DefaultConfig()
	// At 1 req/s the second arrival is ~1 s away, far past the 1 ns limit:
	// only the request at t = 0 is sent.
	cfg.URL, cfg.N, cfg.Rate, cfg.DurationLimit = srv.URL, 50, 1, time.Nanosecond
	res, err := Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 {
		t.Errorf("sent %d, want 1", res.Sent)
	}
}

// TestSeveralURLsRoundRobin: a comma list of URLs spreads the requests
// evenly, as a load balancer over replicas.
func TestSeveralURLsRoundRobin(t *testing.T) {
	var ups [3]upstream
	var urls []string
	for i := range ups {
		srv := httptest.NewServer(&ups[i])
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	cfg := DefaultConfig()
	cfg.URL, cfg.N = strings.Join(urls, ", "), 9
	res, err := Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.Completed != 9 {
		t.Fatalf("completed %d of 9", res.Summary.Completed)
	}
	for i := range ups {
		if n := len(ups[i].models); n != 3 {
			t.Errorf("server %d got %d requests, want 3", i, n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{}, {URL: "x"}, {URL: "x", N: 1, Rate: -1, Burstiness: 1}, {URL: "x", N: 1, Burstiness: 0}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", c)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	stat := "1234 (route balance) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("cpu = %v, want %v (325 ticks)", got, want)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Error("malformed stat accepted")
	}
}

func TestResultMarshalsWithInfiniteRate(t *testing.T) {
	srv := httptest.NewServer(&upstream{})
	defer srv.Close()
	cfg := DefaultConfig() // rate +Inf
	cfg.URL, cfg.N = srv.URL, 2
	res, err := Run(context.Background(), cfg, items, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !strings.Contains(string(b), `"request_rate":"inf"`) {
		t.Errorf("json %s lacks request_rate inf", b)
	}
}
