package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
)

// TestFallbackToAnotherModel: the real serve in front of an emulated
// cluster whose every gemma instance answers 503 (the emulator's fault
// injection). The quality preset prefers gemma (its prior is the highest),
// yet every "auto" request succeeds on llama after one fallback: the
// response says X-RouteBalance-Attempts: 2 and which instance it fell back
// from, and the ledger has exactly one row per request, on llama.
func TestFallbackToAnotherModel(t *testing.T) {
	f := startGemmaDown(t, "", 3)
	s, gemma := f.emulatedServe, f.gemma
	client := s.client
	const n = 6
	for i := 0; i < n; i++ {
		var raw *http.Response
		params := openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("explain fallbacks")}}
		if i%2 == 1 {
			st := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&raw))
			text := ""
			for st.Next() {
				if ch := st.Current(); len(ch.Choices) > 0 {
					text += ch.Choices[0].Delta.Content
				}
			}
			if err := st.Err(); err != nil || !strings.HasPrefix(text, vllmemu.EmulatedMarker) {
				t.Fatalf("stream %d: %v, text %q", i, err, text)
			}
		} else {
			got, err := client.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&raw))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if got.Model != "llama-3.1-8b-instruct" {
				t.Errorf("request %d answered by %q, want llama", i, got.Model)
			}
		}
		if m := raw.Header.Get("X-RouteBalance-Model"); m != "llama-3.1-8b-instruct" {
			t.Errorf("request %d: X-RouteBalance-Model %q, want llama", i, m)
		}
		if a := raw.Header.Get("X-RouteBalance-Attempts"); a != "2" {
			t.Errorf("request %d: X-RouteBalance-Attempts %q, want 2", i, a)
		}
		if fo := raw.Header.Get("X-RouteBalance-Failed-Over"); !gemma[fo] {
			t.Errorf("request %d: X-RouteBalance-Failed-Over %q, want a gemma instance", i, fo)
		}
	}
	db := s.ledger(t)
	var rows, onLlama, attempts2 int
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(model = 'llama-3.1-8b-instruct' AND status = 'ok'), 0), coalesce(sum(attempts = 2), 0) FROM billing_usage`).Scan(&rows, &onLlama, &attempts2); err != nil {
		t.Fatal(err)
	}
	if rows != n || onLlama != n || attempts2 != n {
		t.Errorf("ledger: %d rows, %d ok on llama, %d with attempts 2; want %d each (metered once, for the attempt that served)", rows, onLlama, attempts2, n)
	}
}

// gemmaDown is serve over the fallback test's cluster: two gemma
// instances that answer every request 503 (the emulator's fault
// injection; prior 0.9, so the tenant's quality preset prefers them), one
// llama (prior 0.3) and the tiers of extraTiers (a JSON list's members,
// each instance registered with its tier's kind).
type gemmaDown struct {
	*emulatedServe
	gemma map[string]bool // the failing instances' ids
	llama string          // the llama instance's id
}

func startGemmaDown(t *testing.T, extraTiers string, seed uint64) *gemmaDown {
	t.Helper()
	if extraTiers != "" {
		extraTiers = "," + extraTiers
	}
	down := vllmemu.Fault{ErrorRate: 1, ErrorStatus: 503}
	s := startEmulated(t, `{"name":"fb","tiers":[
		{"model":"gemma-2-9b-it","gpu":"a30","tensor_parallel":1,"instances":2,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1},
		{"model":"llama-3.1-8b-instruct","gpu":"a30","tensor_parallel":1,"instances":1,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1}`+extraTiers+`],
		"output_lengths":{"sigma":0.3,"median_tokens_by_task":{"default":6}}}`,
		vllmemu.Config{TimeScale: 0.01, Seed: seed, Faults: map[int]vllmemu.Fault{0: down, 1: down}})
	f := &gemmaDown{emulatedServe: s, gemma: map[string]bool{}}
	for _, in := range s.emu.Instances {
		tier := in.Spec().Tier
		fields := `"gpu":"a30","price_in_per_mtok":0.1,"price_out_per_mtok":0.1,"max_concurrency":8`
		switch {
		case tier.IsEmbedding():
			fields += `,"kind":"embedding"`
		case tier.Model == "gemma-2-9b-it":
			fields += `,"quality_prior":0.9`
		default:
			fields += `,"quality_prior":0.3`
		}
		id := s.register(t, in, fields)["id"].(string)
		switch tier.Model {
		case "gemma-2-9b-it":
			f.gemma[id] = true
		case "llama-3.1-8b-instruct":
			f.llama = id
		}
	}
	req, _ := http.NewRequest("PUT", s.base+"/api/v1/settings", strings.NewReader(`{"preset":"quality"}`))
	req.Header.Set("Authorization", "Bearer "+s.tok)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("settings: %v %v", res, err)
	}
	return f
}
