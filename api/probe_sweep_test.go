package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// TestProbeFieldMessagesNameTheField: a wrong max_tokens,
// max_completion_tokens, stream or stream_options.include_usage was
// refused with the field in param only ("must be an integer >= 1"). The
// message names it too, as OpenAI's do ("Invalid type for 'max_tokens':
// expected an integer, but got a string instead."), seen through the
// official SDK (option.WithJSONSet sends the wrong types its params cannot).
func TestProbeFieldMessagesNameTheField(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	c := e.client()
	chat := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	for _, tc := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		opts   []option.RequestOption
		param  string
		want   string // the whole message
	}{
		{"max_tokens a string", chat, []option.RequestOption{option.WithJSONSet("max_tokens", "10")}, "max_tokens",
			"Invalid type for 'max_tokens': expected an integer, but got a string instead."},
		{"max_tokens 1.5", chat, []option.RequestOption{option.WithJSONSet("max_tokens", 1.5)}, "max_tokens",
			"Invalid type for 'max_tokens': expected an integer, but got a decimal instead."},
		{"max_tokens 0", withMax(chat, 0, false), nil, "max_tokens",
			"Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{"max_tokens -5", withMax(chat, -5, false), nil, "max_tokens",
			"Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -5 instead."},
		{"max_tokens 2^31", withMax(chat, 1<<31, false), nil, "max_tokens",
			"Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 2147483648 instead."},
		{"max_completion_tokens true", chat, []option.RequestOption{option.WithJSONSet("max_completion_tokens", true)}, "max_completion_tokens",
			"Invalid type for 'max_completion_tokens': expected an integer, but got a boolean instead."},
		{"max_completion_tokens 0", withMax(chat, 0, true), nil, "max_completion_tokens",
			"Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{"stream a string", chat, []option.RequestOption{option.WithJSONSet("stream", "yes")}, "stream",
			"Invalid type for 'stream': expected a boolean, but got a string instead."},
		{"stream a number", chat, []option.RequestOption{option.WithJSONSet("stream", 1)}, "stream",
			"Invalid type for 'stream': expected a boolean, but got a number instead."},
		{"stream_options a string", chat, []option.RequestOption{option.WithJSONSet("stream_options", "usage")}, "stream_options",
			"Invalid type for 'stream_options': expected an object, but got a string instead."},
		{"include_usage a string", chat, []option.RequestOption{option.WithJSONSet("stream_options.include_usage", "true")}, "stream_options.include_usage",
			"Invalid type for 'stream_options.include_usage': expected a boolean, but got a string instead."},
		{"include_usage an object", chat, []option.RequestOption{option.WithJSONSet("stream_options", map[string]any{"include_usage": map[string]any{}})},
			"stream_options.include_usage", "Invalid type for 'stream_options.include_usage': expected a boolean, but got an object instead."},
	} {
		_, err := c.Chat.Completions.New(context.Background(), tc.params, tc.opts...)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != tc.param ||
			apiErr.Type != typeInvalidRequest || apiErr.Message != tc.want {
			t.Errorf("%s: %v, want 400 invalid_request_error param %q message %q", tc.name, err, tc.param, tc.want)
		}
	}
	// The text completions endpoint answers its max_tokens alike.
	_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(0),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.Param != "max_tokens" || !strings.Contains(apiErr.Message, "'max_tokens'") {
		t.Errorf("completions max_tokens 0: %v, want the message to name 'max_tokens'", err)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("%d refused requests reached the instance", n)
	}
	// Well-typed values still pass.
	if _, err := c.Chat.Completions.New(context.Background(), withMax(chat, 5, true)); err != nil {
		t.Errorf("max_completion_tokens 5: %v", err)
	}
}

func withMax(p openai.ChatCompletionNewParams, n int64, completion bool) openai.ChatCompletionNewParams {
	if completion {
		p.MaxCompletionTokens = openai.Int(n)
	} else {
		p.MaxTokens = openai.Int(n)
	}
	return p
}

// sweepCase is one malformed request of TestProbeSweepMalformedInputs.
type sweepCase struct {
	path, body string
	ct         string // Content-Type; "" is application/json, "-" none
	status     int
	param      string // want in param and, quoted, in the message ("" for the whole body)
}

// sweepFieldValues are wrong values for a field of each kind of
// completionFields (and the typed fields of the parsers).
func sweepFieldValues(kind fieldKind) []string {
	nanLike := []string{`"NaN"`, `"Infinity"`, `"-inf"`}
	switch kind {
	case numberField:
		return append(nanLike, `"0.5"`, `true`, `[]`, `{}`, `1e400`, `-1e400`, `99999999999999999999999999999999999999999`)
	case intField:
		return append(nanLike, `"1"`, `false`, `[1]`, `{"n":1}`, `1.5`, `1e3`, `-99999999999999999999999`, `99999999999999999999999`)
	case boolField:
		return []string{`"true"`, `1`, `0`, `[]`, `{}`, `"yes"`}
	case stringField:
		return []string{`1`, `true`, `[]`, `{}`, `["a"]`}
	case objectField:
		return []string{`"json"`, `1`, `[]`, `true`}
	case stopField:
		return []string{`1`, `true`, `{}`, `[1]`, `["a",2]`, `[["a"]]`}
	case biasField:
		return []string{`"x"`, `[]`, `{"1":"ban"}`, `{"1":[1]}`, `{"1":1,"2":{}}`}
	case toolsField:
		return []string{`{}`, `"f"`, `[1]`, `[{},"f"]`, `[[]]`}
	case stringOrObjField:
		return []string{`1`, `true`, `[]`}
	}
	return nil
}

// sweepCases is the table: wrong types for every documented field of the
// four inference endpoints, huge, negative and zero numbers, NaN-like
// strings, nested wrong types in messages and input items, empty arrays,
// repeated keys, bodies that are not one JSON object, wrong Content-Types.
func sweepCases() []sweepCase {
	const (
		chatP  = "/v1/chat/completions"
		textP  = "/v1/completions"
		embP   = "/v1/embeddings"
		respP  = "/v1/responses"
		chatOK = `"model":"m","messages":[{"role":"user","content":"hi"}]`
		textOK = `"model":"m","prompt":"hi"`
		embOK  = `"model":"e","input":"hi"`
		respOK = `"model":"m","input":"hi"`
	)
	var cs []sweepCase
	add := func(path, body, param string) {
		cs = append(cs, sweepCase{path: path, body: body, status: 400, param: param})
	}
	field := func(path, base, key, v string) { add(path, "{"+base+`,"`+key+`":`+v+"}", key) }

	// Every checked completion field, every wrong value of its kind.
	for i := range completionFields {
		r := &completionFields[i]
		for _, v := range sweepFieldValues(r.kind) {
			if v[0] == '9' && r.kind == numberField && math.IsInf(r.max, 1) {
				continue // a huge number is in [min, +inf): vLLM takes a temperature of 1e41
			}
			if r.chat {
				field(chatP, chatOK, r.key, v)
			}
			if r.text {
				field(textP, textOK, r.key, v)
			}
		}
	}
	ints := []string{`"10"`, `"NaN"`, `true`, `[]`, `{}`, `1.5`, `1e2`, `0`, `-1`, `-0`, `2147483648`, `99999999999999999999999999`, `-99999999999999999999999999`}
	bools := []string{`"true"`, `"false"`, `1`, `0`, `"NaN"`, `[]`, `{}`}
	for _, v := range ints {
		field(chatP, chatOK, "max_tokens", v)
		field(chatP, chatOK, "max_completion_tokens", v)
		field(textP, textOK, "max_tokens", v)
		field(embP, embOK, "dimensions", v)
		field(respP, respOK, "max_output_tokens", v)
	}
	for _, v := range bools {
		field(chatP, chatOK, "stream", v)
		field(textP, textOK, "stream", v)
		field(respP, respOK, "stream", v)
		field(respP, respOK, "background", v)
		add(chatP, "{"+chatOK+`,"stream_options":{"include_usage":`+v+"}}", "stream_options.include_usage")
		add(textP, "{"+textOK+`,"stream_options":{"include_usage":`+v+"}}", "stream_options.include_usage")
	}
	for _, v := range []string{`"usage"`, `1`, `true`, `[]`, `[{"include_usage":true}]`} {
		field(chatP, chatOK, "stream_options", v)
		field(textP, textOK, "stream_options", v)
		field(respP, respOK, "stream_options", v)
	}
	for _, v := range []string{`true`, `"yes"`, `1`, `{}`} {
		field(embP, embOK, "stream", v) // embeddings are never streamed
	}
	for _, v := range []string{`1`, `true`, `"int8"`, `""`, `["float"]`} {
		field(embP, embOK, "encoding_format", v)
	}
	for _, v := range []string{`1`, `true`, `[]`, `{}`} {
		field(embP, embOK, "user", v)
		field(respP, respOK, "instructions", v)
	}
	for _, k := range []string{"previous_response_id", "conversation"} {
		field(respP, respOK, k, `"resp_1"`)
	}

	// model, on every endpoint: missing, wrong type, empty.
	for _, p := range []struct{ path, rest string }{
		{chatP, `"messages":[{"role":"user","content":"hi"}]`}, {textP, `"prompt":"hi"`}, {embP, `"input":"hi"`}, {respP, `"input":"hi"`},
	} {
		add(p.path, "{"+p.rest+"}", "model")
		for _, v := range []string{`1`, `true`, `[]`, `{}`, `["m"]`, `""`} {
			add(p.path, `{"model":`+v+","+p.rest+"}", "model")
		}
		// repeated keys: the last one counts, as in encoding/json (and vLLM)
		add(p.path, `{"model":"m","model":5,`+p.rest+"}", "model")
	}

	// messages and their nested parts.
	msgs := func(v string) string { return `{"model":"m","messages":` + v + "}" }
	for _, tc := range []struct{ v, param string }{
		{`[]`, "messages"}, {`{}`, "messages"}, {`"hi"`, "messages"}, {`1`, "messages"},
		{`[1]`, "messages[0]"}, {`["hi"]`, "messages[0]"}, {`[null]`, "messages[0]"}, {`[[]]`, "messages[0]"},
		{`[{"role":"user","content":"a"},2]`, "messages[1]"},
		{`[{"content":"x"}]`, "messages[0].role"}, {`[{"role":5,"content":"x"}]`, "messages[0].role"},
		{`[{"role":"","content":"x"}]`, "messages[0].role"}, {`[{"role":["user"],"content":"x"}]`, "messages[0].role"},
		{`[{"role":"user","content":7}]`, "messages[0].content"}, {`[{"role":"user","content":true}]`, "messages[0].content"},
		{`[{"role":"user","content":{"type":"text","text":"x"}}]`, "messages[0].content"},
		{`[{"role":"user","content":[1]}]`, "messages[0].content"}, {`[{"role":"user","content":["x"]}]`, "messages[0].content"},
		{`[{"role":"user","content":[{"type":"text","text":"a"},[]]}]`, "messages[0].content"},
		{`[{"role":"user","content":[{}]}]`, "messages[0].content[0].type"},
		{`[{"role":"user","content":[{"type":5,"text":"x"}]}]`, "messages[0].content[0].type"},
		{`[{"role":"user","content":[{"type":"","text":"x"}]}]`, "messages[0].content[0].type"},
		{`[{"role":"user","content":[{"type":"text"}]}]`, "messages[0].content[0].text"},
		{`[{"role":"user","content":[{"type":"text","text":5}]}]`, "messages[0].content[0].text"},
		{`[{"role":"user","content":[{"type":"text","text":{"value":"x"}}]}]`, "messages[0].content[0].text"},
		{`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":["b"]}]}]`, "messages[0].content[1].text"},
	} {
		add(chatP, msgs(tc.v), tc.param)
	}

	// prompt.
	for _, v := range []string{`1`, `true`, `{}`, `[]`, `[1.5]`, `[-1]`, `["a",1]`, `[[1],["a"]]`, `[{}]`} {
		add(textP, `{"model":"m","prompt":`+v+"}", "prompt")
	}
	add(textP, `{"model":"m"}`, "prompt")
	add(chatP, `{"model":"m"}`, "messages")

	// embeddings input.
	emb := func(v string) string { return `{"model":"e","input":` + v + "}" }
	for _, tc := range []struct{ v, param string }{
		{`1`, "input"}, {`true`, "input"}, {`{}`, "input"}, {`""`, "input"}, {`[]`, "input"},
		{`["a",1]`, "input[1]"}, {`["a",""]`, "input[1]"}, {`[1,"a"]`, "input"}, {`[-1]`, "input"}, {`[1.5]`, "input"},
		{`[[1],[]]`, "input[1]"}, {`[[1],["a"]]`, "input[1]"}, {`[{}]`, "input[0]"}, {`[true]`, "input[0]"}, {`[null]`, "input[0]"},
	} {
		add(embP, emb(tc.v), tc.param)
	}
	add(embP, `{"model":"e"}`, "input")
	add(embP, emb("["+strings.Repeat(`"a",`, maxEmbeddingInputs)+`"a"]`), "input")

	// responses input items.
	resp := func(v string) string { return `{"model":"m","input":` + v + "}" }
	for _, tc := range []struct{ v, param string }{
		{`1`, "input"}, {`true`, "input"}, {`{}`, "input"}, {`""`, "input"}, {`[]`, "input"},
		{`[1]`, "input[0]"}, {`["hi"]`, "input[0]"}, {`[null]`, "input[0]"},
		{`[{"type":5}]`, "input[0].type"}, {`[{"type":""}]`, "input[0].type"},
		{`[{"content":"x"}]`, "input[0].role"}, {`[{"role":7,"content":"x"}]`, "input[0].role"},
		{`[{"role":"user"}]`, "input[0].content"}, {`[{"role":"user","content":5}]`, "input[0].content"},
		{`[{"role":"user","content":{}}]`, "input[0].content"},
		{`[{"role":"user","content":[1]}]`, "input[0].content[0]"},
		{`[{"role":"user","content":[{}]}]`, "input[0].content[0].type"},
		{`[{"role":"user","content":[{"type":"input_text"}]}]`, "input[0].content[0].text"},
		{`[{"role":"user","content":[{"type":"input_text","text":5}]}]`, "input[0].content[0].text"},
	} {
		add(respP, resp(tc.v), tc.param)
	}
	add(respP, `{"model":"m"}`, "input")

	// repeated keys: the last one counts.
	add(chatP, "{"+chatOK+`,"max_tokens":5,"max_tokens":"x"}`, "max_tokens")
	add(chatP, `{"model":"m","messages":[{"role":"user","content":"hi"}],"messages":[]}`, "messages")
	add(chatP, "{"+chatOK+`,"temperature":1,"temperature":"hot"}`, "temperature")

	// routebalance's own body object.
	for _, tc := range []struct{ v, param string }{
		{`"fast"`, "routebalance"}, {`{"bogus":1}`, "routebalance"}, {`{"preset":"turbo"}`, "routebalance.preset"},
		{`{"priority":"urgent"}`, "routebalance.priority"}, {`{"budget_usd":-1}`, "routebalance.budget_usd"},
		{`{"ttft_slo_ms":-5}`, "routebalance.ttft_slo_ms"}, {`{"policy":"oracle"}`, "routebalance.policy"},
		{`{"weights":"quality=2"}`, "routebalance.weights"}, {`{"weights":{"speed":1}}`, "routebalance.weights"},
	} {
		field(chatP, chatOK, "routebalance", tc.v)
		cs[len(cs)-1].param = tc.param
	}

	// Bodies that are not one JSON object, on every endpoint (param "").
	for _, p := range []string{chatP, textP, embP, respP} {
		for _, b := range []string{``, `   `, `[]`, `null`, `"x"`, `42`, `{`, `{"model":"m",}`, `{"model":NaN}`, `{"model":"m"} {}`,
			"{\"model\":\"m\"\xff}", `{"model":"m","messages":[{"role":"user","content":"x"}]}trailing`} {
			cs = append(cs, sweepCase{path: p, body: b, status: 400})
		}
		for _, ct := range []string{"text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "application/xml", "text/json", "application/jsonx"} {
			cs = append(cs, sweepCase{path: p, body: `{"model":"m"}`, ct: ct, status: 415, param: "Content-Type"})
		}
	}
	return cs
}

// TestProbeSweepMalformedInputs sends the inference endpoints the table of
// sweepCases over a real listener: each is answered with its status (400,
// 415) in OpenAI's error envelope (type invalid_request_error), param
// names the field and the message names it too ('param'); none reaches
// the instance. Bodies over the limit are 413 in the envelope, and the
// inputs the gateway lets through (unknown roles, invalid UTF-8 inside
// strings, JSON Content-Types with parameters, repeated keys whose last
// value is good) are relayed, never a 5xx.
func TestProbeSweepMalformedInputs(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	emb := inst("ie", up.URL, "e")
	emb.Kind = routing.KindEmbedding
	e := newInfEnv(t, envOpts{realRouter: true, bodyLimit: 256 << 10, instances: []tenants.Instance{inst("i1", up.URL, "m"), emb}})
	cases := sweepCases()
	for _, tc := range cases {
		status, raw := sweepSend(t, e.url, tc.path, tc.ct, tc.body)
		env, ok := sweepEnvelope(raw)
		switch {
		case !ok:
			t.Errorf("%s %q: %d %q is not an OpenAI error envelope", tc.path, tc.body, status, raw)
		case status != tc.status || env.Error.Type != typeInvalidRequest || str(env.Error.Param) != tc.param:
			t.Errorf("%s %q (ct %q): %d type %q param %q, want %d invalid_request_error param %q: %s",
				tc.path, tc.body, tc.ct, status, env.Error.Type, str(env.Error.Param), tc.status, tc.param, raw)
		case tc.param != "" && !strings.Contains(env.Error.Message, "'"+tc.param+"'"):
			t.Errorf("%s %q: message %q does not name '%s'", tc.path, tc.body, env.Error.Message, tc.param)
		case !utf8.ValidString(env.Error.Message) || strings.Contains(env.Error.Message, "\ufffd"):
			t.Errorf("%s %q: message %q echoes invalid UTF-8", tc.path, tc.body, env.Error.Message)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("%d of %d refused requests reached the instance", n, len(cases))
	}

	// Over the body limit: 413 in the envelope, before parsing.
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 300<<10) + `"}]}`
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"} {
		status, raw := sweepSend(t, e.url, p, "", big)
		if env, ok := sweepEnvelope(raw); status != http.StatusRequestEntityTooLarge || !ok || str(env.Error.Code) != "body_too_large" {
			t.Errorf("%s over the limit: %d %.200s, want 413 body_too_large", p, status, raw)
		}
	}

	// Let through to the instance (vLLM decides): unknown roles (vLLM's
	// custom roles), invalid UTF-8 inside a string (read as U+FFFD, as
	// encoding/json does), JSON media types with parameters or +json, no
	// Content-Type, a repeated key whose last value is good.
	for _, tc := range []struct{ body, ct string }{
		{`{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, ""},
		{"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"h\xffi\"}]}", ""},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "application/json; charset=utf-8"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "APPLICATION/JSON"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "application/vnd.api+json"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "-"},
		{`{"model":5,"model":"m","max_tokens":"x","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, ""},
	} {
		if status, raw := sweepSend(t, e.url, "/v1/chat/completions", tc.ct, tc.body); status != http.StatusOK {
			t.Errorf("%q (ct %q): %d %s, want it relayed (200 from the instance)", tc.body, tc.ct, status, raw)
		}
	}
	// Invalid UTF-8 in the model: an unknown model (404), and the
	// message is valid UTF-8.
	status, raw := sweepSend(t, e.url, "/v1/chat/completions", "", "{\"model\":\"m\xff\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}")
	if env, ok := sweepEnvelope(raw); status != http.StatusNotFound || !ok || str(env.Error.Param) != "model" || !utf8.ValidString(raw) {
		t.Errorf("model with invalid UTF-8: %d %q, want 404 param model in valid UTF-8", status, raw)
	}
}

// sweepSend posts body as it is with Content-Type ct ("" JSON, "-" none).
func sweepSend(t *testing.T, base, path, ct, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	switch ct {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", ct)
	}
	res, err := http.DefaultClient.Do(req)
	for try := 0; err != nil && try < 5 && isWriteRace(err); try++ { // see infEnv.post
		req.Body = io.NopCloser(strings.NewReader(body))
		res, err = http.DefaultClient.Do(req)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// sweepEnvelope decodes OpenAI's error envelope; ok is false for any
// other body (or one without a message or type).
func sweepEnvelope(raw string) (envelope, bool) {
	var env envelope
	err := json.Unmarshal([]byte(raw), &env)
	return env, err == nil && env.Error.Message != "" && env.Error.Type != ""
}

// FuzzJSONContentType holds jsonContentType to its definition, read
// through mime.ParseMediaType where that accepts the header: absent,
// application/json or application/<x>+json, whatever the case and the
// parameters.
func FuzzJSONContentType(f *testing.F) {
	for _, s := range []string{"", " ", "application/json", "APPLICATION/JSON; charset=utf-8", "application/vnd.api+json",
		"application/+json", "text/json", "application/jsonx", "text/plain", "multipart/form-data; boundary=x",
		"application/x-www-form-urlencoded", ";", "application/json;;", "/json", "application/", "application/\xff+json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		got := jsonContentType(ct)
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return // params the gateway ignores, or no media type at all
		}
		want := mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json") && len(mt) > len("application/+json"))
		if got != want {
			t.Errorf("jsonContentType(%q) = %v, want %v (media type %q)", ct, got, want, mt)
		}
	})
}
