package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/routebalance/routebalance/infra/vllmemu"
)

// TestResponsesRouted: the real serve in front of an emulated cluster of
// two gemma instances that answer 503, one llama and one embedding
// instance. POST /v1/responses through the official SDK (non-streamed and
// streamed, a string and message items) is routed like chat: "auto" with
// the quality preset prefers gemma, falls back to llama (attempts 2),
// never reaches the embedding instance, and each request is metered once
// with the usage of the upstream's response (streams: of
// response.completed). Bad input is a 400 in the envelope naming the
// field.
func TestResponsesRouted(t *testing.T) {
	f := startGemmaDown(t, `{"model":"minilm","gpu":"a30","instances":1,"kind":"embedding","dimensions":16,"ttft_overhead_ms":5,"prefill_ms_per_1k_prompt_tokens":10}`, 7)
	s, gemma, llama := f.emulatedServe, f.gemma, f.llama

	ctx := context.Background()
	items := responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("you are terse", responses.EasyInputMessageRoleSystem),
		responses.ResponseInputItemParamOfMessage("what is a monad", responses.EasyInputMessageRoleUser),
	}}
	const n = 4
	var wantIn, wantOut int64
	for i := 0; i < n; i++ {
		params := responses.ResponseNewParams{Model: "auto", Instructions: openai.String("answer briefly"),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("explain fallbacks")}}
		if i >= 2 {
			params.Input = items
		}
		var raw *http.Response
		var got *responses.Response
		if i%2 == 1 {
			st := s.client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&raw))
			var deltas strings.Builder
			var types []string
			for st.Next() {
				ev := st.Current()
				types = append(types, ev.Type)
				switch ev.Type {
				case "response.output_text.delta":
					deltas.WriteString(ev.Delta)
				case "response.completed":
					r := ev.AsResponseCompleted().Response
					got = &r
				}
			}
			if err := st.Err(); err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if got == nil || types[0] != "response.created" || types[len(types)-1] != "response.completed" || deltas.String() != got.OutputText() {
				t.Fatalf("stream %d: events %v, deltas %q", i, types, deltas.String())
			}
		} else {
			r, err := s.client.Responses.New(ctx, params, option.WithResponseInto(&raw))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			got = r
		}
		if got.Status != "completed" || !strings.HasPrefix(got.OutputText(), vllmemu.EmulatedMarker) || got.Model != "llama-3.1-8b-instruct" {
			t.Errorf("request %d: status %q model %q text %q", i, got.Status, got.Model, got.OutputText())
		}
		wantIn += got.Usage.InputTokens
		wantOut += got.Usage.OutputTokens
		if inst := raw.Header.Get("X-RouteBalance-Instance"); inst != llama {
			t.Errorf("request %d served by %q, want llama %q", i, inst, llama)
		}
		if a := raw.Header.Get("X-RouteBalance-Attempts"); a != "2" {
			t.Errorf("request %d: X-RouteBalance-Attempts %q, want 2", i, a)
		}
		if fo := raw.Header.Get("X-RouteBalance-Failed-Over"); !gemma[fo] {
			t.Errorf("request %d: X-RouteBalance-Failed-Over %q, want a gemma instance", i, fo)
		}
		if raw.Header.Get("X-RouteBalance-Predicted-Quality") == "" {
			t.Errorf("request %d: no decision headers", i)
		}
	}

	// Pinned to llama with a routing override in the body: one attempt.
	var raw *http.Response
	if _, err := s.client.Responses.New(ctx, responses.ResponseNewParams{Model: "llama-3.1-8b-instruct", Input: items},
		option.WithJSONSet("routebalance", map[string]any{"policy": "shortest-queue"}), option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get("X-RouteBalance-Attempts") != "1" || raw.Header.Get("X-RouteBalance-Policy") != "shortest-queue" {
		t.Errorf("pinned: attempts %q policy %q", raw.Header.Get("X-RouteBalance-Attempts"), raw.Header.Get("X-RouteBalance-Policy"))
	}

	for _, tc := range []struct {
		name   string
		params responses.ResponseNewParams
		status int
		param  string
	}{
		{"empty input", responses.ResponseNewParams{Model: "auto", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("")}}, 400, "input"},
		{"stored response", responses.ResponseNewParams{Model: "auto", Input: items, PreviousResponseID: openai.String("resp_1")}, 400, "previous_response_id"},
		{"bad limit", responses.ResponseNewParams{Model: "auto", Input: items, MaxOutputTokens: openai.Int(0)}, 400, "max_output_tokens"},
		{"an embedding model", responses.ResponseNewParams{Model: "minilm", Input: items}, 404, "model"},
	} {
		_, err := s.client.Responses.New(ctx, tc.params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Param != tc.param {
			t.Errorf("%s: %v, want %d with param %q", tc.name, err, tc.status, tc.param)
		}
	}

	db := s.ledger(t)
	var rows, attempts2 int
	var in, out int64
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(attempts = 2), 0), coalesce(sum(prompt_tokens), 0), coalesce(sum(output_tokens), 0)
		FROM billing_usage WHERE model = 'llama-3.1-8b-instruct' AND status = 'ok' AND attempts = 2`).Scan(&rows, &attempts2, &in, &out); err != nil {
		t.Fatal(err)
	}
	if rows != n || in != wantIn || out != wantOut {
		t.Errorf("ledger: %d fallback rows with %d/%d tokens; want %d rows with %d/%d (the upstream's usage, metered once)", rows, in, out, n, wantIn, wantOut)
	}
	var all int
	if err := db.QueryRow(`SELECT count(*) FROM billing_usage`).Scan(&all); err != nil {
		t.Fatal(err)
	}
	if all != n+1 {
		t.Errorf("ledger: %d rows, want %d (one per served request, none for refused ones)", all, n+1)
	}
}
