package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
)

// FuzzParseCompletion holds the one-pass parser to the decoder it replaced
// (oldParseCompletion: encoding/json into maps, each member decoded again
// for its checks): the same answer, field by field, or the same 400.
func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{
		`{"model":"auto","messages":[{"role":"user","content":"Hello\nthere \u00e9\ud83d\ude00"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"max_completion_tokens":3,"messages":[{"role":"system","content":""},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},null]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[1]}]}`,
		`{"model":"m","messages":[null]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[]},{"role":"user","content":"q","content":"r"}]}`,
		`{"model":"m","model":"n","messages":[{"role":"user","content":"\u0000\ud800"}],"stream":null}`,
		`{"model":"m","prompt":["a","b"],"max_tokens":"7"}`,
		`{"model":"m","prompt":[[1,2],[3]]}`,
		`{"model":"m","prompt":"x","stream_options":[]}`,
		`{"model":"","prompt":"x"}`,
		`{"mod\u0065l":"m","prompt":"x","stream":"yes"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}]} trailing`,
		`{"model":1}`, `[]`, `  `, `{`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot","n":1.5}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.2,"top_p":1,"n":2,"seed":-9,"stop":["a",null],"user":"u"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5,"1":"x"},"tools":[{},null],"tool_choice":{},"response_format":"t"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":1e2,"parallel_tool_calls":null,"frequency_penalty":-2.5}`,
		`{"model":"m","prompt":"x","logprobs":3,"echo":true,"best_of":9223372036854775808,"suffix":"s","temperature":1e400}`,
		`{"model":"m","prompt":"x","presence_penalty":2,"stop":"s","seed":-0,"logprobs":false}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Add([]byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"), true)
	f.Fuzz(func(t *testing.T, raw []byte, chat bool) {
		ep := proxy.Completions
		if chat {
			ep = proxy.Chat
		}
		got, gerr := parseCompletion(raw, ep)
		want, werr := oldParseCompletion(raw, ep)
		if diff := cmp.Diff(fmt.Sprint(werr), fmt.Sprint(gerr)); diff != "" {
			t.Fatalf("%s: errors differ (-old +new):\n%s", raw, diff)
		}
		if gerr != nil {
			return
		}
		g := oldBody{model: got.model, stream: got.stream, includeUsage: got.includeUsage, maxTokens: got.maxTokens,
			prompt: got.prompt, promptTokens: got.promptTokens}
		w := *want
		w.fields = nil
		if diff := cmp.Diff(w, g, cmp.AllowUnexported(oldBody{})); diff != "" {
			t.Errorf("%s: (-old +new):\n%s", raw, diff)
		}
		for _, k := range []string{"routebalance", "model", "messages", "stream_options"} {
			gv, gok := present(got.fields, k)
			wv, wok := oldPresent(want.fields, k)
			if gok != wok || !bytes.Equal(gv, wv) {
				t.Errorf("%s: member %s: new %s %v, old %s %v", raw, k, gv, gok, wv, wok)
			}
		}
	})
}

// oldBody is what oldParseCompletion returns.
type oldBody struct {
	fields       map[string]json.RawMessage
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int
	prompt       string
	promptTokens int
}

// oldParseCompletion is parseCompletion as it was before the one-pass
// parser, kept as FuzzParseCompletion's reference.
func oldParseCompletion(raw []byte, ep proxy.Endpoint) (*oldBody, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, badParam("", "the request body is empty; send a JSON object")
	}
	if raw[0] != '{' {
		return nil, badParam("", "the request body must be a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, &paramError{param: "", msg: "could not parse the JSON body: " + jsonErrText(err)}
	}
	b := &oldBody{fields: fields}
	var err error
	if b.model, err = oldReqString(fields, "model"); err != nil {
		return nil, err
	}
	if b.stream, err = oldOptBool(fields, "stream"); err != nil {
		return nil, err
	}
	if raw, ok := oldPresent(fields, "stream_options"); ok {
		var opts map[string]json.RawMessage
		if json.Unmarshal(raw, &opts) != nil {
			return nil, typeError("stream_options", "an object", raw)
		}
		if b.includeUsage, err = oldOptBool(opts, "include_usage"); err != nil {
			return nil, typeError("stream_options.include_usage", "a boolean", opts["include_usage"])
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if k == "max_completion_tokens" && ep != proxy.Chat {
			continue
		}
		n, ok, err := oldOptPositiveInt(fields, k)
		if err != nil {
			return nil, err
		}
		if ok && (b.maxTokens == 0 || n < b.maxTokens) {
			b.maxTokens = n
		}
	}
	if ep == proxy.Chat {
		err = b.oldParseMessages()
	} else {
		err = b.oldParsePrompt()
	}
	if err != nil {
		return nil, err
	}
	if err := oldCheckFields(fields, ep); err != nil {
		return nil, err
	}
	return b, nil
}

// oldEveryValueANumber reports whether raw is an object whose every
// member (repeated keys included) is a number, walking its tokens.
func oldEveryValueANumber(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return false
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return false
		}
		if _, ok := v.(json.Number); !ok {
			return false
		}
	}
	return true
}

// oldCheckFields is checkFields by decoding each field with encoding/json
// into the Go type it must have: the reference FuzzParseCompletion holds
// the in-place checks to.
func oldCheckFields(fields map[string]json.RawMessage, ep proxy.Endpoint) error {
	for i := range completionFields {
		r := &completionFields[i]
		if !r.applies(ep) {
			continue
		}
		raw, ok := oldPresent(fields, r.key)
		if !ok {
			continue
		}
		valid := false
		switch r.kind {
		case numberField:
			var f float64
			valid = json.Unmarshal(raw, &f) == nil && f >= r.min && f <= r.max
		case intField:
			var n int64
			valid = json.Unmarshal(raw, &n) == nil && float64(n) >= r.min && float64(n) <= r.max
		case boolField:
			var v bool
			valid = json.Unmarshal(raw, &v) == nil
		case stringField:
			var v string
			valid = json.Unmarshal(raw, &v) == nil
		case objectField:
			var v map[string]json.RawMessage
			valid = json.Unmarshal(raw, &v) == nil
		case stringOrObjField:
			var v string
			var o map[string]json.RawMessage
			valid = json.Unmarshal(raw, &v) == nil || json.Unmarshal(raw, &o) == nil
		case stopField:
			var v string
			var vs []*string
			valid = json.Unmarshal(raw, &v) == nil || (json.Unmarshal(raw, &vs) == nil && !slices.Contains(vs, nil))
		case toolsField:
			var vs []map[string]json.RawMessage
			valid = json.Unmarshal(raw, &vs) == nil && !slices.ContainsFunc(vs, func(m map[string]json.RawMessage) bool { return m == nil })
		case biasField:
			valid = oldEveryValueANumber(raw)
		}
		if !valid {
			return r.fieldError(raw)
		}
	}
	return nil
}

// jsonErrText says where JSON went wrong without echoing the body.

// present returns a field unless it is missing or null.
func oldPresent(f map[string]json.RawMessage, k string) (json.RawMessage, bool) {
	raw, ok := f[k]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

func oldReqString(f map[string]json.RawMessage, k string) (string, error) {
	raw, ok := oldPresent(f, k)
	if !ok {
		return "", missingParam(k)
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", typeError(k, "a string", raw)
	}
	if s == "" {
		return "", badParam(k, "empty string. Expected a non-empty string.")
	}
	return s, nil
}

func oldOptBool(f map[string]json.RawMessage, k string) (bool, error) {
	raw, ok := oldPresent(f, k)
	if !ok {
		return false, nil
	}
	var v bool
	if json.Unmarshal(raw, &v) != nil {
		return false, typeError(k, "a boolean", raw)
	}
	return v, nil
}

func oldOptPositiveInt(f map[string]json.RawMessage, k string) (int, bool, error) {
	raw, ok := oldPresent(f, k)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil || n < 1 {
		return 0, false, positiveIntError(k, raw)
	}
	return int(n), true, nil
}

func (b *oldBody) oldParseMessages() error {
	raw, ok := oldPresent(b.fields, "messages")
	if !ok {
		return missingParam("messages")
	}
	var msgs []json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return typeError("messages", "an array of message objects", raw)
	}
	if len(msgs) == 0 {
		return badParam("messages", "empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	var text strings.Builder
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		var msg map[string]json.RawMessage
		if json.Unmarshal(m, &msg) != nil || msg == nil {
			return typeError(param, "an object", m)
		}
		if _, err := oldReqString(msg, "role"); err != nil {
			return badParam(param+".role", "must be a non-empty string")
		}
		content, ok := oldPresent(msg, "content")
		if !ok {
			continue // assistant tool calls carry no content
		}
		var s string
		if json.Unmarshal(content, &s) == nil {
			appendPrompt(&text, s)
			continue
		}
		var parts []map[string]json.RawMessage
		if json.Unmarshal(content, &parts) != nil {
			return contentError(param+".content", content)
		}
		for j, p := range parts {
			typ, err := oldReqString(p, "type")
			if err != nil {
				return badParam(fmt.Sprintf("%s.content[%d].type", param, j), "must be a non-empty string")
			}
			if typ != "text" {
				continue // images and audio do not feed the text estimators
			}
			t, err := oldReqString(p, "text")
			if err != nil {
				return badParam(fmt.Sprintf("%s.content[%d].text", param, j), "must be a string")
			}
			appendPrompt(&text, t)
		}
	}
	b.prompt = text.String()
	// ChatML-style framing costs about 4 tokens per message plus 3 to
	// prime the reply.
	b.promptTokens = routing.EstimateTokens(b.prompt) + routing.ChatTemplateTokens*len(msgs) + routing.ChatPrimingTokens
	return nil
}

func (b *oldBody) oldParsePrompt() error {
	raw, ok := oldPresent(b.fields, "prompt")
	if !ok {
		return missingParam("prompt")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b.prompt, b.promptTokens = s, routing.EstimateTokens(s)
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		var text strings.Builder
		for _, p := range ss {
			appendPrompt(&text, p)
			b.promptTokens += routing.EstimateTokens(p)
		}
		b.prompt = text.String()
		return nil
	}
	// Token-id prompts: counted exactly, no text for the estimators.
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		b.promptTokens = len(ids)
		return nil
	}
	var batches [][]uint32
	if json.Unmarshal(raw, &batches) == nil && len(batches) > 0 {
		for _, ids := range batches {
			b.promptTokens += len(ids)
		}
		return nil
	}
	return badParam("prompt", "must be a string, an array of strings, or an array of token ids")
}

// BenchmarkParseCompletion compares the one-pass parser with the decoder
// it replaced on a chat body with a 460-character prompt:
//
//	go test -run '^$' -bench ParseCompletion -benchmem ./api/
func BenchmarkParseCompletion(b *testing.B) {
	prompt := strings.Repeat("Which of these is a prime number? Answer with the letter only.\n", 8)[:460]
	raw, _ := json.Marshal(map[string]any{"model": "auto", "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": prompt}}, "temperature": 0})
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := parseCompletion(raw, proxy.Chat); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-maps", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := oldParseCompletion(raw, proxy.Chat); err != nil {
				b.Fatal(err)
			}
		}
	})
}
