package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/routing"
)

// TestTokenizePassedToTheModel: vLLM's POST /tokenize and /detokenize
// through the real serve in front of an emulated cluster of two models.
// They reach an instance of the named model only, round-trip through the
// emulator's tokenizer, answer bad input (also the instance's 400) in the
// error envelope, need a key, and are not metered.
func TestTokenizePassedToTheModel(t *testing.T) {
	s := startEmulated(t, `{"name":"tok","tiers":[
		{"model":"big","gpu":"a30","tensor_parallel":1,"instances":2,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1},
		{"model":"small","gpu":"a30","tensor_parallel":1,"instances":1,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1}],
		"output_lengths":{"sigma":0.3,"median_tokens_by_task":{"default":6}}}`, vllmemu.Config{TimeScale: 0.01, Seed: 9})
	modelOf := map[string]string{}
	for _, in := range s.emu.Instances {
		id := s.register(t, in, `"gpu":"a30","price_in_per_mtok":0.1,"price_out_per_mtok":0.1,"max_concurrency":8`)["id"].(string)
		modelOf[id] = in.Spec().Tier.Model
	}
	post := func(path, key, body string, v any) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return res.StatusCode, res.Header
	}
	type tokens struct {
		Count       int     `json:"count"`
		MaxModelLen int     `json:"max_model_len"`
		Tokens      []int64 `json:"tokens"`
	}
	prompt := "Tokenize me through the router, then give me back."
	used := map[string]bool{}
	var ids []int64
	for i := 0; i < 4; i++ {
		var tok tokens
		st, h := post("/tokenize", s.key, `{"model":"big","prompt":`+mustQuote(prompt)+`}`, &tok)
		if st != 200 || tok.Count != routing.EstimateTokens(prompt) || len(tok.Tokens) != tok.Count || tok.MaxModelLen == 0 {
			t.Fatalf("tokenize %d: %d %+v", i, st, tok)
		}
		inst := h.Get("X-RouteBalance-Instance")
		if modelOf[inst] != "big" || h.Get("X-RouteBalance-Model") != "big" {
			t.Fatalf("tokenize %d answered by %q (%s)", i, inst, modelOf[inst])
		}
		used[inst] = true
		ids = tok.Tokens
	}
	if len(used) != 2 {
		t.Errorf("tokenize used %v, want both instances of big in turn", used)
	}
	var de struct {
		Prompt string `json:"prompt"`
	}
	if st, _ := post("/detokenize", s.key, `{"model":"big","tokens":`+mustJSONText(ids)+`}`, &de); st != 200 || de.Prompt != prompt {
		t.Errorf("detokenize: %d %q, want %q", st, de.Prompt, prompt)
	}
	var chat tokens
	if st, _ := post("/tokenize", s.key, `{"model":"small","messages":[{"role":"user","content":"hello there"}]}`, &chat); st != 200 ||
		chat.Count != routing.EstimateChatTokens([]string{"hello there"}) {
		t.Errorf("tokenize messages: %d %+v", st, chat)
	}

	type envelope struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	for _, tc := range []struct {
		name, path, key, body string
		status                int
		param                 string
	}{
		{"no key", "/tokenize", "", `{"model":"big","prompt":"x"}`, 401, ""},
		{"auto", "/tokenize", s.key, `{"model":"auto","prompt":"x"}`, 400, "model"},
		{"unknown model", "/tokenize", s.key, `{"model":"huge","prompt":"x"}`, 404, "model"},
		{"no prompt", "/tokenize", s.key, `{"model":"big"}`, 400, "prompt"},
		{"bad tokens", "/detokenize", s.key, `{"model":"big","tokens":[-1]}`, 400, "tokens[0]"},
		{"unknown token id (the instance's 400)", "/detokenize", s.key, `{"model":"big","tokens":[7]}`, 400, "tokens"},
	} {
		var e envelope
		st, _ := post(tc.path, tc.key, tc.body, &e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if st != tc.status || e.Error.Message == "" || param != tc.param {
			t.Errorf("%s: %d %+v, want %d naming %q", tc.name, st, e, tc.status, tc.param)
		}
	}

	db := s.ledger(t)
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM billing_usage`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("ledger: %d rows, want none (tokenizing is not inference)", rows)
	}
}

func mustQuote(s string) string { return mustJSONText(s) }

func mustJSONText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
