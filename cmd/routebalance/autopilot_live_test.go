package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
)

// autopilotDecision is one decision of GET /api/v1/clusters/{id}/autopilot.
type autopilotDecision struct {
	Action    string `json:"action"`
	Reason    string `json:"reason"`
	Predicted bool   `json:"predicted"`
	Weights   struct {
		Quality float64 `json:"quality"`
	} `json:"weights"`
}

// TestAutopilotLiveControllerUsesPredictions: the real serve in front of
// an emulated cluster (a fast small model, a slow better one), traffic
// with preset autopilot and a loose target through the official SDK. The
// live controller's steps replay the cluster's recorded traffic from the
// live fleet state for the candidates (routing/sim.LivePredictor): its
// decisions say they were predicted, and the quality-ward moves the
// headroom allows are taken on predicted quality ("predicted quality a →
// b"); the feedback-only rule ("no prediction: 0.05 toward quality")
// never writes that reason, so without the predictor the test fails.
func TestAutopilotLiveControllerUsesPredictions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve and an emulated cluster")
	}
	s := startEmulated(t, `{"name":"ap","tiers":[
		{"model":"small-1b","gpu":"a30","tensor_parallel":1,"instances":1,"tpot_ms_light":10,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1},
		{"model":"big-70b","gpu":"a30","tensor_parallel":1,"instances":1,"tpot_ms_light":40,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":30,"prefill_ms_per_1k_prompt_tokens":40,"verbosity":1}],
		"output_lengths":{"sigma":0.3,"median_tokens_by_task":{"default":30}}}`, vllmemu.Config{TimeScale: 0.1, Seed: 3},
		"--autopilot-interval", "400ms")
	for _, in := range s.emu.Instances {
		prior, price := "0.4", "0.1"
		if in.Spec().Tier.Model == "big-70b" {
			prior, price = "0.9", "2"
		}
		s.register(t, in, `"gpu":"a30","price_in_per_mtok":`+price+`,"price_out_per_mtok":`+price+`,"max_concurrency":8,"quality_prior":`+prior)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Three clients in a loop until the test has what it waits for.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var lastErr error
	for k := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "auto",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Explain request routing, part " + string(rune('a'+(k*7+i)%26)))}},
					option.WithHeader("X-RouteBalance-Preset", "autopilot"), option.WithHeader("X-RouteBalance-Autopilot", "p95_e2e_ms=60000"))
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					failed, lastErr = failed+1, err
					mu.Unlock()
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	var seen []autopilotDecision
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		seen = autopilotDecisions(t, s)
		for _, d := range seen {
			if d.Predicted && strings.HasPrefix(d.Reason, "predicted quality") && d.Weights.Quality > 1.0/3+0.01 {
				t.Logf("decisions: %+v", seen)
				mu.Lock()
				defer mu.Unlock()
				if failed > 0 {
					t.Fatalf("%d requests failed, e.g. %v", failed, lastErr)
				}
				return
			}
		}
	}
	t.Fatalf("no predicted quality-ward decision within the deadline; decisions: %+v", seen)
}

// autopilotDecisions reads the decisions of the cluster's controllers.
func autopilotDecisions(t *testing.T, s *emulatedServe) []autopilotDecision {
	t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/api/v1/clusters/"+s.cluster+"/autopilot", nil)
	req.Header.Set("Authorization", "Bearer "+s.tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st struct {
		Controllers []struct {
			Decisions []autopilotDecision `json:"decisions"`
		} `json:"controllers"`
	}
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&st) != nil {
		t.Fatalf("GET autopilot: %d", res.StatusCode)
	}
	var out []autopilotDecision
	for _, c := range st.Controllers {
		out = append(out, c.Decisions...)
	}
	return out
}
