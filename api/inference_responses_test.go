package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
)

func TestParseResponses(t *testing.T) {
	type want struct {
		Model     string
		Prompt    string
		Tokens    int
		MaxTokens int
		Stream    bool
		Param     string // "" with Err false: accepted
		Err       bool
	}
	// as chat counts a prompt: the joined text, plus the template's tokens
	// per message (for one message exactly routing.EstimateChatTokens)
	chat := func(texts ...string) int {
		return routing.EstimateTokens(strings.Join(texts, "\n")) + routing.ChatTemplateTokens*len(texts) + routing.ChatPrimingTokens
	}
	for _, tc := range []struct {
		name string
		body string
		want want
	}{
		{"string", `{"model":"auto","input":"what is a monad"}`, want{Model: "auto", Prompt: "what is a monad", Tokens: chat("what is a monad")}},
		{"instructions count", `{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":20,"stream":true}`,
			want{Model: "m", Prompt: "be brief\nhi", Tokens: chat("be brief", "hi"), MaxTokens: 20, Stream: true}},
		{"message items", `{"model":"m","input":[{"role":"system","content":"terse"},{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"},{"type":"input_image","image_url":"x"}]}]}`,
			want{Model: "m", Prompt: "terse\nhello", Tokens: chat("terse", "hello")}},
		{"tool output counts", `{"model":"m","input":[{"role":"user","content":"weather?"},{"type":"function_call","call_id":"c","name":"w","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"sunny"}]}`,
			want{Model: "m", Prompt: "weather?\nsunny", Tokens: chat("weather?", "sunny")}},
		{"other fields forwarded", `{"model":"m","input":"x","temperature":0,"tools":[],"text":{"format":{"type":"text"}},"store":false,"stream_options":{"include_obfuscation":false}}`,
			want{Model: "m", Prompt: "x", Tokens: chat("x")}},
		{"missing input", `{"model":"m"}`, want{Param: "input", Err: true}},
		{"empty input", `{"model":"m","input":""}`, want{Param: "input", Err: true}},
		{"empty items", `{"model":"m","input":[]}`, want{Param: "input", Err: true}},
		{"number input", `{"model":"m","input":3}`, want{Param: "input", Err: true}},
		{"item not an object", `{"model":"m","input":["x"]}`, want{Param: "input[0]", Err: true}},
		{"item without role", `{"model":"m","input":[{"content":"x"}]}`, want{Param: "input[0].role", Err: true}},
		{"item without content", `{"model":"m","input":[{"role":"user"}]}`, want{Param: "input[0].content", Err: true}},
		{"bad content", `{"model":"m","input":[{"role":"user","content":1}]}`, want{Param: "input[0].content", Err: true}},
		{"bad part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, want{Param: "input[0].content[0].text", Err: true}},
		{"part without type", `{"model":"m","input":[{"role":"user","content":[{"text":"x"}]}]}`, want{Param: "input[0].content[0].type", Err: true}},
		{"bad item type", `{"model":"m","input":[{"type":3}]}`, want{Param: "input[0].type", Err: true}},
		{"bad instructions", `{"model":"m","input":"x","instructions":["a"]}`, want{Param: "instructions", Err: true}},
		{"bad limit", `{"model":"m","input":"x","max_output_tokens":0}`, want{Param: "max_output_tokens", Err: true}},
		{"bad stream", `{"model":"m","input":"x","stream":"yes"}`, want{Param: "stream", Err: true}},
		{"bad stream options", `{"model":"m","input":"x","stream_options":true}`, want{Param: "stream_options", Err: true}},
		{"stored response", `{"model":"m","input":"x","previous_response_id":"resp_1"}`, want{Param: "previous_response_id", Err: true}},
		{"conversation", `{"model":"m","input":"x","conversation":"conv_1"}`, want{Param: "conversation", Err: true}},
		{"background", `{"model":"m","input":"x","background":true}`, want{Param: "background", Err: true}},
		{"missing model", `{"input":"x"}`, want{Param: "model", Err: true}},
		{"not an object", `["x"]`, want{Err: true}},
		{"broken", `{"model":`, want{Err: true}},
		{"empty", ``, want{Err: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := parseResponses([]byte(tc.body))
			var got want
			if err != nil {
				got = want{Param: paramOf(t, err), Err: true}
			} else {
				got = want{Model: b.model, Prompt: b.prompt, Tokens: b.promptTokens, MaxTokens: b.maxTokens, Stream: b.stream}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.body, d)
			}
		})
	}
}

// FuzzParseResponses holds the parser to its contract on any body: a
// *paramError, or a JSON object with a non-empty string model, an input
// that is a non-empty string or array, no stored-response fields, a
// prompt estimate of at least the template's tokens; never a panic.
func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","input":"hello"}`,
		`{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true,"max_output_tokens":5}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"},{"type":"reasoning"}]}`,
		`{"model":"m","input":[{"role":"user","content":[null]}]}`,
		`{"model":"m","input":[{"role":"user","content":"\ud800"}],"input":"x"}`,
		`{"model":"m","input":"x","previous_response_id":null,"background":false}`,
		`{"model":"m","input":"x","previous_response_id":"r"}`,
		`{"input":"x"}`, `{"model":1}`, `[]`, ` `, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := parseResponses(raw)
		obj, ok := acceptedBody(t, raw, b, err)
		if !ok {
			return
		}
		var in any
		if json.Unmarshal(obj["input"], &in) != nil {
			t.Fatalf("%q accepted with input %s", raw, obj["input"])
		}
		switch v := in.(type) {
		case string:
			if v == "" {
				t.Fatalf("%q accepted with an empty input", raw)
			}
		case []any:
			if len(v) == 0 {
				t.Fatalf("%q accepted with no input items", raw)
			}
		default:
			t.Fatalf("%q accepted with input %T", raw, in)
		}
		if p, ok := obj["previous_response_id"]; ok && string(p) != "null" {
			t.Fatalf("%q accepted with a previous_response_id", raw)
		}
		if b.promptTokens < routing.ChatPrimingTokens || b.maxTokens < 0 {
			t.Fatalf("%q accepted with %d prompt tokens, max %d", raw, b.promptTokens, b.maxTokens)
		}
	})
}
