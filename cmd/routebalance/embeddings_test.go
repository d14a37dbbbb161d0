package main

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
)

// TestEmbeddingsRouted: the real serve in front of an emulated cluster of
// one chat and two embedding instances. Embeddings (pinned and "auto",
// through the official SDK) are only ever routed to the embedding
// instances, balanced over both; chat only to the chat instance. The
// ledger meters each embedding by its input tokens with 0 output tokens.
func TestEmbeddingsRouted(t *testing.T) {
	s := startEmulated(t, `{"name":"emb","tiers":[
		{"model":"qwen-chat","gpu":"a30","tensor_parallel":1,"instances":1,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":10,"verbosity":1},
		{"model":"minilm","gpu":"a30","instances":2,"kind":"embedding","dimensions":32,"ttft_overhead_ms":5,"prefill_ms_per_1k_prompt_tokens":10}],
		"output_lengths":{"sigma":0.3,"median_tokens_by_task":{"default":6}}}`, vllmemu.Config{TimeScale: 0.01, Seed: 5})
	kindOf := map[string]string{}
	for _, in := range s.emu.Instances {
		kind := "chat"
		if in.Spec().Tier.Model == "minilm" {
			kind = "embedding"
		}
		got := s.register(t, in, `"gpu":"a30","price_in_per_mtok":0.02,"price_out_per_mtok":0.1,"max_concurrency":8,"kind":"`+kind+`"`)
		if got["kind"] != kind {
			t.Fatalf("instance registered with kind %v, want %s", got["kind"], kind)
		}
		kindOf[got["id"].(string)] = kind
	}
	client := s.client

	const nEmb = 8
	usedEmb := map[string]int{}
	for i := 0; i < nEmb; i++ {
		model := "minilm"
		if i%2 == 1 {
			model = "auto"
		}
		var raw *http.Response
		resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: model,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"how do I sort a list in python", "the french revolution"}}},
			option.WithResponseInto(&raw))
		if err != nil {
			t.Fatalf("embeddings %d (%s): %v", i, model, err)
		}
		if len(resp.Data) != 2 || len(resp.Data[0].Embedding) != 32 || resp.Usage.PromptTokens < 1 {
			t.Fatalf("embeddings %d: %d vectors, usage %+v", i, len(resp.Data), resp.Usage)
		}
		inst := raw.Header.Get("X-RouteBalance-Instance")
		if kindOf[inst] != "embedding" {
			t.Fatalf("embeddings %d routed to %q (kind %q)", i, inst, kindOf[inst])
		}
		usedEmb[inst]++
	}
	if len(usedEmb) != 2 {
		t.Errorf("embeddings used instances %v, want both embedding instances", usedEmb)
	}

	const nChat = 3
	for i := 0; i < nChat; i++ {
		var raw *http.Response
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "auto",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")}}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
		if inst := raw.Header.Get("X-RouteBalance-Instance"); kindOf[inst] != "chat" {
			t.Fatalf("chat %d routed to %q (kind %q)", i, inst, kindOf[inst])
		}
	}

	// A chat model is not an embedding model, nor the reverse; bad input
	// is a 400 naming the field.
	for _, tc := range []struct {
		name   string
		call   func() error
		status int
		param  string
	}{
		{"embeddings on a chat model", func() error {
			_, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "qwen-chat",
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
			return err
		}, 404, "model"},
		{"chat on an embedding model", func() error {
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "minilm",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
			return err
		}, 404, "model"},
		{"empty input", func() error {
			_, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "minilm",
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("")}})
			return err
		}, 400, "input"},
	} {
		var apiErr *openai.Error
		if err := tc.call(); !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Param != tc.param {
			t.Errorf("%s: %v, want %d with param %q", tc.name, err, tc.status, tc.param)
		}
	}

	db := s.ledger(t)
	var embRows, embOut, embIn, chatRows, chatOut int
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(output_tokens), 0), coalesce(min(prompt_tokens), 0) FROM billing_usage WHERE model = 'minilm' AND status = 'ok'`).Scan(&embRows, &embOut, &embIn); err != nil {
		t.Fatal(err)
	}
	if embRows != nEmb || embOut != 0 || embIn < 1 {
		t.Errorf("ledger: %d embedding rows, %d output tokens, min %d prompt tokens; want %d rows, 0 output, >= 1 prompt", embRows, embOut, embIn, nEmb)
	}
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(output_tokens), 0) FROM billing_usage WHERE model = 'qwen-chat' AND status = 'ok'`).Scan(&chatRows, &chatOut); err != nil {
		t.Fatal(err)
	}
	if chatRows != nChat || chatOut < 1 {
		t.Errorf("ledger: %d chat rows with %d output tokens; want %d rows with output", chatRows, chatOut, nChat)
	}
}
