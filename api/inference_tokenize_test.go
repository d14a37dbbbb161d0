package api

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/routebalance/routebalance/routing/proxy"
)

func TestParseTokenize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ep    proxy.Endpoint
		body  string
		param string // "" with ok: accepted
		ok    bool
	}{
		{"prompt", proxy.Tokenize, `{"model":"qwen","prompt":"hello","add_special_tokens":false}`, "", true},
		{"empty prompt", proxy.Tokenize, `{"model":"qwen","prompt":""}`, "", true},
		{"messages", proxy.Tokenize, `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}`, "", true},
		{"both", proxy.Tokenize, `{"model":"qwen","prompt":"x","messages":[{"role":"user","content":"hi"}]}`, "prompt", false},
		{"neither", proxy.Tokenize, `{"model":"qwen"}`, "prompt", false},
		{"prompt not a string", proxy.Tokenize, `{"model":"qwen","prompt":[1,2]}`, "prompt", false},
		{"no messages", proxy.Tokenize, `{"model":"qwen","messages":[]}`, "messages", false},
		{"messages not an array", proxy.Tokenize, `{"model":"qwen","messages":{}}`, "messages", false},
		{"message without role", proxy.Tokenize, `{"model":"qwen","messages":[{"content":"x"}]}`, "messages[0].role", false},
		{"message not an object", proxy.Tokenize, `{"model":"qwen","messages":["x"]}`, "messages[0]", false},
		{"auto", proxy.Tokenize, `{"model":"auto","prompt":"x"}`, "model", false},
		{"no model", proxy.Tokenize, `{"prompt":"x"}`, "model", false},
		{"tokens", proxy.Detokenize, `{"model":"qwen","tokens":[1,2,30000]}`, "", true},
		{"no tokens", proxy.Detokenize, `{"model":"qwen"}`, "tokens", false},
		{"empty tokens", proxy.Detokenize, `{"model":"qwen","tokens":[]}`, "tokens", false},
		{"negative token", proxy.Detokenize, `{"model":"qwen","tokens":[1,-2]}`, "tokens[1]", false},
		{"fraction", proxy.Detokenize, `{"model":"qwen","tokens":[1.5]}`, "tokens[0]", false},
		{"huge token", proxy.Detokenize, `{"model":"qwen","tokens":[99999999999]}`, "tokens[0]", false},
		{"string token", proxy.Detokenize, `{"model":"qwen","tokens":["1"]}`, "tokens[0]", false},
		{"tokens not an array", proxy.Detokenize, `{"model":"qwen","tokens":"1 2"}`, "tokens", false},
		{"not an object", proxy.Tokenize, `[1]`, "", false},
		{"broken", proxy.Detokenize, `{"model":`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := parseTokenize([]byte(tc.body), tc.ep)
			if tc.ok {
				if err != nil || b.model != "qwen" {
					t.Fatalf("%s: %v, want accepted", tc.body, err)
				}
				return
			}
			var pe *paramError
			if !errors.As(err, &pe) || pe.param != tc.param {
				t.Fatalf("%s: %v, want a 400 naming %q", tc.body, err, tc.param)
			}
		})
	}
}

// FuzzParseTokenize holds the /tokenize and /detokenize parser to its
// contract on any body: a *paramError, or a JSON object naming a model
// other than "auto" with, for /detokenize, a non-empty array of token ids
// >= 0 and, for /tokenize, exactly one of a string prompt or a non-empty
// messages array; never a panic.
func FuzzParseTokenize(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","tokens":[1,2,3]}`,
		`{"model":"m","tokens":[1e3,-0,01]}`, `{"model":"m","tokens":[-0]}`,
		`{"model":"m","prompt":null,"messages":[{"role":"u"}]}`,
		`{"model":"auto","prompt":"x"}`, `{"model":"m","tokens":[]}`, `[]`, `{`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, detok bool) {
		ep := proxy.Tokenize
		if detok {
			ep = proxy.Detokenize
		}
		b, err := parseTokenize(raw, ep)
		obj, ok := acceptedBody(t, raw, b, err)
		if !ok {
			return
		}
		if b.model == "auto" {
			t.Fatalf("%q accepted for model auto", raw)
		}
		if detok {
			var ids []uint32
			if json.Unmarshal(obj["tokens"], &ids) != nil || len(ids) == 0 {
				t.Fatalf("%q accepted with tokens %s", raw, obj["tokens"])
			}
			return
		}
		var prompt *string
		var msgs []json.RawMessage
		_ = json.Unmarshal(obj["prompt"], &prompt)
		_ = json.Unmarshal(obj["messages"], &msgs)
		if (prompt != nil) == (len(msgs) > 0) {
			t.Fatalf("%q accepted with prompt %v and %d messages", raw, prompt, len(msgs))
		}
	})
}
