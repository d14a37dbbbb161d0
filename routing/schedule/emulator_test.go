package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
)

// emulated starts the reference 13-instance cluster on loopback (no
// modelled delays) and returns it as a routing.Cluster whose models have
// quality priors rising with model size.
func emulated(t *testing.T, faults map[int]vllmemu.Fault) (*vllmemu.Cluster, *routing.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	emu, err := vllmemu.StartCluster(ctx, vllmemu.Config{File: engine.ReferenceCluster(), ZeroLatency: true, Faults: faults})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = emu.Close() })
	priors := map[string]float64{}
	c := &routing.Cluster{ID: "emu", Version: 1}
	for _, in := range emu.Instances {
		spec := in.Spec()
		if _, ok := priors[spec.Tier.Model]; !ok {
			priors[spec.Tier.Model] = 0.9 - 0.1*float64(len(priors)) // file order: strongest first
		}
		c.Instances = append(c.Instances, routing.Instance{
			ID: spec.ID, BaseURL: in.URL + "/v1", Model: spec.Tier.Model, GPU: spec.Tier.GPU,
			TensorParallel: spec.Tier.TensorParallel, PriceInPerMTok: spec.Tier.PriceInPerMTok,
			PriceOutPerMTok: spec.Tier.PriceOutPerMTok, MaxConcurrency: spec.Tier.MaxNumSeqs,
			QualityPrior: priors[spec.Tier.Model],
		})
	}
	return emu, c
}

// serve routes one request and sends it with the OpenAI SDK to the chosen
// instance, releasing the assignment with what happened.
func serve(ctx context.Context, r *schedule.Router, c *routing.Cluster, req *routing.Request) (routing.Decision, error) {
	a, err := r.Route(ctx, c, req)
	if err != nil {
		return routing.Decision{}, err
	}
	start := time.Now()
	var out routing.Outcome
	defer func() { a.Release(out) }()
	client := openai.NewClient(option.WithBaseURL(a.Instance.BaseURL), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     a.Instance.Model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(req.Prompt)},
		MaxTokens: openai.Int(16),
	})
	out.E2E = time.Since(start)
	if err != nil {
		out.Err, out.Upstream = err, true
		return a.Decision, err
	}
	out.PromptTokens, out.OutputTokens = int(resp.Usage.PromptTokens), int(resp.Usage.CompletionTokens)
	return a.Decision, nil
}

// TestPresetsAgainstEmulator: against the emulated reference cluster, the
// quality preset sends requests to the strongest model and the cost preset
// to the cheapest, while /metrics scraping keeps the state fresh.
func TestPresetsAgainstEmulator(t *testing.T) {
	_, c := emulated(t, nil)
	cfg := schedule.Config{}
	cfg.Fleet.ScrapeInterval = 10 * time.Millisecond
	r, err := schedule.NewRouter(cfg, schedule.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()

	cheapest := c.Instances[0]
	for _, in := range c.Instances {
		if in.PriceOutPerMTok < cheapest.PriceOutPerMTok {
			cheapest = in
		}
	}
	for _, tc := range []struct {
		preset string
		want   string
	}{
		{routing.PresetQuality, c.Instances[0].Model},
		{routing.PresetCost, cheapest.Model},
	} {
		w, err := routing.PresetWeights(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			d, err := serve(ctx, r, c, &routing.Request{ID: tc.preset + string(rune('a'+k)), Prompt: "Explain dead reckoning.", PromptTokens: 8, MaxTokens: 16, Weights: w})
			if err != nil {
				t.Fatalf("%s: %v", tc.preset, err)
			}
			if d.Instance.Model != tc.want {
				t.Errorf("preset %s chose %s (%s), want model %s", tc.preset, d.Instance.ID, d.Instance.Model, tc.want)
			}
		}
	}
	deadline := time.Now().Add(testwait.Bound)
	for {
		fresh := 0
		for _, s := range r.State(c.ID) {
			if !s.Stale {
				fresh++
			}
			if s.InFlight != 0 || s.Queue != 0 {
				t.Errorf("%s: in-flight %d queue %d after every request ended", s.ID, s.InFlight, s.Queue)
			}
		}
		if fresh == len(c.Instances) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d instances scraped", fresh, len(c.Instances))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEjectionAgainstEmulator: a dead emulated instance is ejected after
// failed requests, the next requests avoid it, and it is probed back in
// once it revives.
func TestEjectionAgainstEmulator(t *testing.T) {
	emu, c := emulated(t, map[int]vllmemu.Fault{0: {Dead: true}})
	c.Instances = c.Instances[:2] // two replicas of the strongest model
	cfg := schedule.Config{DefaultPolicy: schedule.PolicyRoundRobin}
	cfg.Fleet.EjectAfter = 1
	cfg.Fleet.ProbeInterval = 10 * time.Millisecond
	cfg.Fleet.ScrapeInterval = time.Hour
	r, err := schedule.NewRouter(cfg, schedule.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()

	dead := c.Instances[0].ID
	req := func(id string) *routing.Request {
		return &routing.Request{ID: id, Prompt: "hi", PromptTokens: 2, MaxTokens: 16}
	}
	d, err := serve(ctx, r, c, req("1"))
	if err == nil || d.Instance.ID != dead {
		t.Fatalf("first request: served by %s, err %v; want a failure on the dead %s", d.Instance.ID, err, dead)
	}
	for k := range 3 {
		d, err := serve(ctx, r, c, req(string(rune('2'+k))))
		if err != nil {
			t.Fatalf("request after ejection: %v", err)
		}
		if d.Instance.ID == dead {
			t.Errorf("request %d went to the ejected %s", k, dead)
		}
	}
	if s := r.State(c.ID)[0]; s.Healthy {
		t.Errorf("%s healthy while dead", dead)
	}
	if err := emu.Instances[0].SetFault(vllmemu.Fault{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testwait.Bound)
	for !r.State(c.ID)[0].Healthy {
		if time.Now().After(deadline) {
			t.Fatal("revived instance not probed back in")
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen := false
	for k := range 4 {
		d, err := serve(ctx, r, c, req(string(rune('a'+k))))
		if err != nil {
			t.Fatalf("after revival: %v", err)
		}
		seen = seen || d.Instance.ID == dead
	}
	if !seen {
		t.Errorf("revived %s got no requests", dead)
	}
}
