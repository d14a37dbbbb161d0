package api

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
)

func TestParseEmbedding(t *testing.T) {
	type want struct {
		Model  string
		Prompt string
		Tokens int
		Param  string // "" with Err false: accepted
		Err    bool
	}
	for _, tc := range []struct {
		name string
		body string
		want want
	}{
		{"string", `{"model":"minilm","input":"hello world, again"}`, want{Model: "minilm", Prompt: "hello world, again", Tokens: routing.EstimateTokens("hello world, again")}},
		{"strings", `{"model":"auto","input":["ab","cdefgh"],"encoding_format":"float","dimensions":64,"user":"u"}`, want{Model: "auto", Prompt: "ab\ncdefgh", Tokens: routing.EstimateTokens("ab") + routing.EstimateTokens("cdefgh")}},
		{"token ids", `{"model":"m","input":[1,2,3]}`, want{Model: "m", Tokens: 3}},
		{"token id arrays", `{"model":"m","input":[[1,2],[3]]}`, want{Model: "m", Tokens: 3}},
		{"stream false", `{"model":"m","input":"x","stream":false}`, want{Model: "m", Prompt: "x", Tokens: 1}},
		{"missing input", `{"model":"m"}`, want{Param: "input", Err: true}},
		{"null input", `{"model":"m","input":null}`, want{Param: "input", Err: true}},
		{"empty string", `{"model":"m","input":""}`, want{Param: "input", Err: true}},
		{"empty array", `{"model":"m","input":[]}`, want{Param: "input", Err: true}},
		{"number input", `{"model":"m","input":5}`, want{Param: "input", Err: true}},
		{"object input", `{"model":"m","input":{"a":1}}`, want{Param: "input", Err: true}},
		{"mixed array", `{"model":"m","input":["a",1]}`, want{Param: "input[1]", Err: true}},
		{"empty entry", `{"model":"m","input":["a",""]}`, want{Param: "input[1]", Err: true}},
		{"negative id", `{"model":"m","input":[1,-2]}`, want{Param: "input", Err: true}},
		{"empty id array", `{"model":"m","input":[[1],[]]}`, want{Param: "input[1]", Err: true}},
		{"bool entry", `{"model":"m","input":[true]}`, want{Param: "input[0]", Err: true}},
		{"missing model", `{"input":"x"}`, want{Param: "model", Err: true}},
		{"model type", `{"model":3,"input":"x"}`, want{Param: "model", Err: true}},
		{"bad format", `{"model":"m","input":"x","encoding_format":"int8"}`, want{Param: "encoding_format", Err: true}},
		{"bad dimensions", `{"model":"m","input":"x","dimensions":0}`, want{Param: "dimensions", Err: true}},
		{"bad user", `{"model":"m","input":"x","user":1}`, want{Param: "user", Err: true}},
		{"stream", `{"model":"m","input":"x","stream":true}`, want{Param: "stream", Err: true}},
		{"not an object", `["x"]`, want{Err: true}},
		{"broken", `{"model":`, want{Err: true}},
		{"empty", ``, want{Err: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := parseEmbedding([]byte(tc.body))
			var got want
			if err != nil {
				got = want{Param: paramOf(t, err), Err: true}
			} else {
				got = want{Model: b.model, Prompt: b.prompt, Tokens: b.promptTokens}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.body, d)
			}
		})
	}
}

func TestParseEmbeddingTooMany(t *testing.T) {
	in := make([]string, maxEmbeddingInputs+1)
	for i := range in {
		in[i] = "x"
	}
	raw, _ := json.Marshal(map[string]any{"model": "m", "input": in})
	var pe *paramError
	if _, err := parseEmbedding(raw); !errors.As(err, &pe) || pe.param != "input" {
		t.Fatalf("2049 inputs: %v", err)
	}
}

// FuzzParseEmbedding holds the parser to its contract on any body: a
// *paramError or a body that is a JSON object whose model is a non-empty
// string and whose input is present; never a panic.
func FuzzParseEmbedding(f *testing.F) {
	for _, s := range []string{
		`{"model":"minilm","input":"hello"}`,
		`{"model":"auto","input":["a","b"],"encoding_format":"base64","dimensions":8}`,
		`{"model":"m","input":[1,2,3]}`,
		`{"model":"m","input":[[1],[2,3]]}`,
		`{"model":"m","input":[]}`,
		`{"model":"m","input":[[]]}`,
		`{"model":"m","input":["",1]}`,
		`{"model":"m","input":"\ud800"}`,
		`{"model":"m","model":"n","input":"x","input":null}`,
		`{"model":"m","input":"x","stream":true}`,
		`{"input":"x"}`, `{"model":1}`, `[]`, ` `, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := parseEmbedding(raw)
		obj, ok := acceptedBody(t, raw, b, err)
		if !ok {
			return
		}
		if in, ok := obj["input"]; !ok || string(in) == "null" {
			t.Fatalf("%q accepted without input", raw)
		}
		if b.promptTokens < 1 {
			t.Fatalf("%q accepted with %d prompt tokens", raw, b.promptTokens)
		}
	})
}
