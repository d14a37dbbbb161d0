package vllmemu

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

func userChat(model, prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
}

func TestChoicesN(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[0])
	p := userChat("big", "explain how a hash map works")
	p.N = openai.Int(3)
	resp, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 3 {
		t.Fatalf("choices = %d, want 3", len(resp.Choices))
	}
	words := 0
	seen := map[string]bool{}
	for i, ch := range resp.Choices {
		if int(ch.Index) != i {
			t.Errorf("choice %d has index %d", i, ch.Index)
		}
		if !strings.HasPrefix(ch.Message.Content, EmulatedMarker) {
			t.Errorf("choice %d = %q, want it to open with %q", i, ch.Message.Content, EmulatedMarker)
		}
		words += len(strings.Fields(ch.Message.Content))
		seen[ch.Message.Content] = true
	}
	if len(seen) != 3 {
		t.Errorf("the 3 choices are not all different: %d distinct", len(seen))
	}
	if int(resp.Usage.CompletionTokens) != words {
		t.Errorf("usage.completion_tokens = %d, want the sum over choices %d", resp.Usage.CompletionTokens, words)
	}
	// The same request gets the same answers.
	again, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again.Choices {
		if again.Choices[i].Message.Content != resp.Choices[i].Message.Content {
			t.Errorf("choice %d differs between identical requests", i)
		}
	}

	// Streaming: every choice streams to its own finish reason.
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := client.Chat.Completions.NewStreaming(context.Background(), p)
	text := map[int64]string{}
	finished := map[int64]string{}
	var streamed int64
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			text[c.Index] += c.Delta.Content
			if c.FinishReason != "" {
				finished[c.Index] = c.FinishReason
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			streamed = ch.Usage.CompletionTokens
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 3; i++ {
		if text[i] != resp.Choices[i].Message.Content || finished[i] == "" {
			t.Errorf("streamed choice %d = %q (finish %q), want %q", i, text[i], finished[i], resp.Choices[i].Message.Content)
		}
	}
	if streamed != resp.Usage.CompletionTokens {
		t.Errorf("streamed usage %d, want %d", streamed, resp.Usage.CompletionTokens)
	}
}

func TestChatLogprobs(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[1])
	p := userChat("small", "what is the capital of France")
	p.Logprobs = openai.Bool(true)
	p.TopLogprobs = openai.Int(3)
	resp, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if len(ch.Logprobs.Content) != int(resp.Usage.CompletionTokens) {
		t.Fatalf("logprobs entries = %d, want one per token (%d)", len(ch.Logprobs.Content), resp.Usage.CompletionTokens)
	}
	var joined strings.Builder
	for i, e := range ch.Logprobs.Content {
		joined.WriteString(e.Token)
		if e.Logprob > 0 || len(e.TopLogprobs) != 3 {
			t.Fatalf("entry %d = %+v, want logprob <= 0 and 3 alternatives", i, e)
		}
		if e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob {
			t.Errorf("entry %d: the top alternative is %q, want the token itself %q", i, e.TopLogprobs[0].Token, e.Token)
		}
		for k := 1; k < 3; k++ {
			if e.TopLogprobs[k].Logprob >= e.TopLogprobs[k-1].Logprob {
				t.Errorf("entry %d: alternatives not in descending order: %+v", i, e.TopLogprobs)
			}
		}
		if string(bytesOf(e.Bytes)) != e.Token {
			t.Errorf("entry %d: bytes %v do not spell %q", i, e.Bytes, e.Token)
		}
	}
	if joined.String() != ch.Message.Content {
		t.Errorf("logprob tokens spell %q, content is %q", joined.String(), ch.Message.Content)
	}
	// Probabilities of the alternatives sum to at most 1.
	var sum float64
	for _, a := range ch.Logprobs.Content[0].TopLogprobs {
		sum += math.Exp(a.Logprob)
	}
	if sum > 1+1e-9 {
		t.Errorf("top_logprobs probabilities sum to %v > 1", sum)
	}
}

func bytesOf(b []int64) []byte {
	out := make([]byte, len(b))
	for i, x := range b {
		out[i] = byte(x)
	}
	return out
}

func TestCompletionLogprobs(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[0])
	resp, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel("big"), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(8), Logprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp := resp.Choices[0].Logprobs
	if len(lp.Tokens) != 8 || len(lp.TokenLogprobs) != 8 || len(lp.TopLogprobs) != 8 || len(lp.TextOffset) != 8 {
		t.Fatalf("logprobs = %+v, want 8 entries in each array", lp)
	}
	if strings.Join(lp.Tokens, "") != resp.Choices[0].Text {
		t.Errorf("tokens spell %q, text is %q", strings.Join(lp.Tokens, ""), resp.Choices[0].Text)
	}
	off := int64(0)
	for i, tok := range lp.Tokens {
		if lp.TextOffset[i] != off {
			t.Errorf("text_offset[%d] = %d, want %d", i, lp.TextOffset[i], off)
		}
		off += int64(len(tok))
		if len(lp.TopLogprobs[i]) != 2 {
			t.Errorf("top_logprobs[%d] has %d entries, want 2", i, len(lp.TopLogprobs[i]))
		}
	}
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name: "get_weather",
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"city":  map[string]any{"type": "string"},
			"unit":  map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
			"days":  map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
			"alert": map[string]any{"type": "boolean"},
		},
		"required": []any{"city", "unit"},
	},
})

func checkWeatherArgs(t *testing.T, args string) {
	t.Helper()
	var a struct {
		City  *string  `json:"city"`
		Unit  *string  `json:"unit"`
		Days  *float64 `json:"days"`
		Alert *bool    `json:"alert"`
	}
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		t.Fatalf("arguments %q are not JSON: %v", args, err)
	}
	if a.City == nil || *a.City == "" || a.Unit == nil || (*a.Unit != "celsius" && *a.Unit != "fahrenheit") ||
		a.Days == nil || *a.Days < 1 || *a.Days > 7 || *a.Days != math.Trunc(*a.Days) || a.Alert == nil {
		t.Errorf("arguments %s do not satisfy the schema", args)
	}
}

func TestToolCalls(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[0])
	p := userChat("big", "what is the weather in Paris")
	p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	resp, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("choice = %+v, want one tool call, no content, finish tool_calls", ch)
	}
	tc := ch.Message.ToolCalls[0]
	if tc.Function.Name != "get_weather" || tc.ID == "" || tc.Type != "function" {
		t.Errorf("tool call = %+v", tc)
	}
	checkWeatherArgs(t, tc.Function.Arguments)

	// Streamed, the SDK's accumulator reassembles the same call.
	st := client.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0].Message.ToolCalls
	if len(got) != 1 || got[0].Function.Arguments != tc.Function.Arguments || got[0].Function.Name != "get_weather" || !strings.HasPrefix(got[0].ID, "chatcmpl-tool-") {
		t.Errorf("streamed tool calls = %+v, want %+v", got, tc)
	}
	if acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("streamed finish = %q", acc.Choices[0].FinishReason)
	}

	// "auto" answers with text (no tool parser), a named function is called.
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	resp, err = client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices[0].Message.ToolCalls) != 0 || resp.Choices[0].Message.Content == "" {
		t.Errorf("auto: %+v, want a text answer", resp.Choices[0])
	}
	p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
	resp, err = client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("named: %+v", resp.Choices[0])
	}
	checkWeatherArgs(t, resp.Choices[0].Message.ToolCalls[0].Function.Arguments)

	// A max_tokens too small for the arguments cuts them: finish "length".
	p.MaxTokens = openai.Int(2)
	resp, err = client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 2 {
		t.Errorf("truncated tool call: finish %q, %d tokens", resp.Choices[0].FinishReason, resp.Usage.CompletionTokens)
	}
}

func TestResponseFormatJSON(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[1])
	p := userChat("small", "list a person")
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: map[string]any{
			"type": "object", "required": []any{"name", "age", "tags"},
			"properties": map[string]any{
				"name": map[string]any{"type": "string"},
				"age":  map[string]any{"type": "integer", "minimum": 0, "maximum": 120},
				"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "maxItems": 3},
				"address": map[string]any{"type": "object", "properties": map[string]any{
					"zip": map[string]any{"type": "string"}, "kind": map[string]any{"const": "home"}}},
			},
		}},
	}}
	resp, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var person struct {
		Name    string   `json:"name"`
		Age     *int     `json:"age"`
		Tags    []string `json:"tags"`
		Address struct {
			Zip  string `json:"zip"`
			Kind string `json:"kind"`
		} `json:"address"`
	}
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &person); err != nil {
		t.Fatalf("content %q is not JSON: %v", resp.Choices[0].Message.Content, err)
	}
	if person.Name == "" || person.Age == nil || *person.Age < 0 || *person.Age > 120 || len(person.Tags) < 1 || len(person.Tags) > 3 || person.Address.Kind != "home" {
		t.Errorf("document %s does not satisfy the schema", resp.Choices[0].Message.Content)
	}
	if resp.Choices[0].FinishReason != "stop" {
		t.Errorf("finish = %q", resp.Choices[0].FinishReason)
	}
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	resp, err = client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &obj); err != nil || len(obj) == 0 {
		t.Errorf("json_object content %q: %v", resp.Choices[0].Message.Content, err)
	}
}

func embedCluster(t *testing.T) *Cluster {
	t.Helper()
	f, err := engine.ParseCluster([]byte(`{"name":"e","tiers":[
		{"model":"big","gpu":"a100","tensor_parallel":1,"instances":1,"tpot_ms_light":30,"tpot_load_factor":2,"max_num_seqs":8,
		 "ttft_overhead_ms":40,"prefill_ms_per_1k_prompt_tokens":80,"verbosity":1},
		{"model":"minilm","gpu":"a30","instances":2,"kind":"embedding","ttft_overhead_ms":5,"prefill_ms_per_1k_prompt_tokens":10},
		{"model":"tiny-embed","gpu":"a30","instances":1,"kind":"embedding","dimensions":64}],
		"output_lengths":{"sigma":0.5,"median_tokens_by_task":{"default":20}}}`))
	if err != nil {
		t.Fatal(err)
	}
	return testCluster(t, func(c *Config) { c.File = f })
}

func cosine(a, b []float64) float64 {
	var d float64
	for i := range a {
		d += a[i] * b[i]
	}
	return d
}

func TestEmbeddings(t *testing.T) {
	c := embedCluster(t)
	client := sdk(c.Instances[1])
	resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "minilm",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{
			"how do I sort a list in python", "sorting a python list", "the french revolution began in 1789"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 3 || resp.Object != "list" || resp.Model != "minilm" {
		t.Fatalf("answer = %+v", resp)
	}
	for i, d := range resp.Data {
		if int(d.Index) != i || len(d.Embedding) != engine.DefaultEmbeddingDimensions {
			t.Fatalf("data[%d]: index %d, %d dims", i, d.Index, len(d.Embedding))
		}
		if n := cosine(d.Embedding, d.Embedding); math.Abs(n-1) > 1e-5 {
			t.Errorf("data[%d] has norm² %v, want 1", i, n)
		}
	}
	near, far := cosine(resp.Data[0].Embedding, resp.Data[1].Embedding), cosine(resp.Data[0].Embedding, resp.Data[2].Embedding)
	if near <= far {
		t.Errorf("cos(sort, sorting) = %.3f <= cos(sort, revolution) = %.3f", near, far)
	}
	want := 0
	for _, s := range []string{"how do I sort a list in python", "sorting a python list", "the french revolution began in 1789"} {
		want += routing.EstimateTokens(s)
	}
	if int(resp.Usage.PromptTokens) != want || int(resp.Usage.TotalTokens) != want {
		t.Errorf("usage = %+v, want %d prompt tokens", resp.Usage, want)
	}
	// The other instance of the tier gives the same vector.
	otherClient := sdk(c.Instances[2])
	other, err := otherClient.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "minilm",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("sorting a python list")}})
	if err != nil {
		t.Fatal(err)
	}
	if cosine(other.Data[0].Embedding, resp.Data[1].Embedding) < 1-1e-6 {
		t.Error("two instances of one tier embed the same text differently")
	}
	// dimensions truncates and renormalises; base64 is little-endian float32.
	small, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "minilm", Dimensions: openai.Int(32),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(small.Data[0].Embedding) != 32 || small.Usage.PromptTokens != 3 {
		t.Errorf("dimensions 32 / 3 token ids: %d dims, usage %+v", len(small.Data[0].Embedding), small.Usage)
	}
	raw, err := http.Post(c.Instances[3].URL+"/v1/embeddings", "application/json", strings.NewReader(`{"input":"abc","encoding_format":"base64"}`))
	if err != nil {
		t.Fatal(err)
	}
	var b64 struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	_ = json.NewDecoder(raw.Body).Decode(&b64)
	raw.Body.Close()
	bs, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(bs) != 64*4 {
		t.Fatalf("base64 embedding: %d bytes, %v", len(bs), err)
	}
	ref := EmbedText("tiny-embed", "abc", 64)
	for k := range ref {
		if math.Float32frombits(binary.LittleEndian.Uint32(bs[4*k:])) != ref[k] {
			t.Fatalf("base64 component %d differs", k)
		}
	}

	// Wrong API for the kind: 400 in the envelope.
	for _, tc := range []struct{ url, path, body, param string }{
		{c.Instances[1].URL, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, ""},
		{c.Instances[0].URL, "/v1/embeddings", `{"input":"x"}`, ""},
		{c.Instances[1].URL, "/v1/embeddings", `{"input":""}`, "input"},
		{c.Instances[1].URL, "/v1/embeddings", `{"input":[]}`, "input"},
		{c.Instances[1].URL, "/v1/embeddings", `{"input":{"a":1}}`, "input"},
		{c.Instances[1].URL, "/v1/embeddings", `{"input":"x","dimensions":385}`, "dimensions"},
		{c.Instances[1].URL, "/v1/embeddings", `{"input":"x","encoding_format":"hex"}`, "encoding_format"},
	} {
		resp, err := http.Post(tc.url+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var e apiError
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if resp.StatusCode != 400 || e.Error.Message == "" || param != tc.param {
			t.Errorf("%s %s: %d %+v, want 400 with param %q", tc.path, tc.body, resp.StatusCode, e, tc.param)
		}
	}
}

func TestResponsesAPI(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[0])
	params := responses.ResponseNewParams{Model: "big", Instructions: openai.String("answer briefly"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("what is a monad")}}
	resp, err := client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	text := resp.OutputText()
	if resp.Status != "completed" || !strings.HasPrefix(text, EmulatedMarker) || resp.Usage.OutputTokens != int64(len(strings.Fields(text))) {
		t.Fatalf("response = status %q, text %q, usage %+v", resp.Status, text, resp.Usage)
	}
	if want := routing.EstimateChatTokens([]string{"answer briefly", "what is a monad"}); resp.Usage.InputTokens != int64(want) {
		t.Errorf("input_tokens = %d, want %d", resp.Usage.InputTokens, want)
	}
	st := client.Responses.NewStreaming(context.Background(), params)
	var deltas strings.Builder
	var completed *responses.Response
	types := []string{}
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			completed = &r
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas.String() != text || completed == nil || completed.OutputText() != text || completed.Usage.OutputTokens != resp.Usage.OutputTokens {
		t.Errorf("stream: deltas %q, completed %v; want %q", deltas.String(), completed != nil, text)
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("event order %v", types)
	}
	// max_output_tokens cuts the answer: status incomplete.
	params.MaxOutputTokens = openai.Int(3)
	resp, err = client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.Usage.OutputTokens != 3 {
		t.Errorf("capped response: status %q, details %+v, usage %+v", resp.Status, resp.IncompleteDetails, resp.Usage)
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	c := testCluster(t, nil)
	post := func(url, body string, v any) int {
		t.Helper()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	prompt := "Tokenize me, then give me back: ünïcode too."
	var tok tokenizeResponse
	if st := post(c.Instances[0].URL+"/tokenize", `{"model":"big","prompt":`+mustJSON(prompt)+`}`, &tok); st != 200 {
		t.Fatalf("tokenize status %d", st)
	}
	if tok.Count != routing.EstimateTokens(prompt) || len(tok.Tokens) != tok.Count || tok.MaxModelLen != engine.DefaultMaxModelLen {
		t.Errorf("tokenize = %+v, want %d tokens", tok, routing.EstimateTokens(prompt))
	}
	// Another instance of the cluster detokenizes it.
	var de struct {
		Prompt string `json:"prompt"`
	}
	if st := post(c.Instances[1].URL+"/detokenize", `{"model":"small","tokens":`+mustJSON(tok.Tokens)+`}`, &de); st != 200 || de.Prompt != prompt {
		t.Errorf("detokenize = %d %q, want %q", st, de.Prompt, prompt)
	}
	// The chat form counts what usage.prompt_tokens counts.
	var chatTok tokenizeResponse
	post(c.Instances[0].URL+"/tokenize", `{"model":"big","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}`, &chatTok)
	client := sdk(c.Instances[0])
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "big",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello there")}, MaxTokens: openai.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	if int64(chatTok.Count) != resp.Usage.PromptTokens {
		t.Errorf("tokenize(messages).count = %d, usage.prompt_tokens = %d", chatTok.Count, resp.Usage.PromptTokens)
	}
	var e apiError
	if st := post(c.Instances[0].URL+"/tokenize", `{"model":"other","prompt":"x"}`, &e); st != 404 {
		t.Errorf("tokenize for another model: %d", st)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestClusterFileKinds(t *testing.T) {
	base := `{"name":"x","output_lengths":{"sigma":0.5,"median_tokens_by_task":{"default":20}},"tiers":[%s]}`
	for _, tc := range []struct {
		tier string
		ok   bool
	}{
		{`{"model":"e","gpu":"a30","instances":1,"kind":"embedding"}`, true},
		{`{"model":"e","gpu":"a30","instances":1,"kind":"embedding","dimensions":1024}`, true},
		{`{"model":"e","gpu":"a30","instances":1,"kind":"rerank"}`, false},
		{`{"model":"e","gpu":"a30","instances":1,"kind":"embedding","dimensions":-1}`, false},
		{`{"model":"c","gpu":"a30","instances":1,"tpot_ms_light":10,"tpot_load_factor":2,"max_num_seqs":4,"verbosity":1,"dimensions":8}`, false},
	} {
		_, err := engine.ParseCluster([]byte(strings.Replace(base, "%s", tc.tier, 1)))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.tier, err, tc.ok)
		}
		if err != nil && !errors.Is(err, engine.ErrInvalidCluster) {
			t.Errorf("%s: %v does not wrap ErrInvalidCluster", tc.tier, err)
		}
	}
}

// FuzzRequestParsers feeds the parsers of the new request fields (embedding
// input, responses input, tool choice, JSON schemas) arbitrary JSON: no
// panic, and a schema that is accepted always yields valid JSON.
func FuzzRequestParsers(f *testing.F) {
	for _, seed := range []string{
		`"hello"`, `["a","b"]`, `[1,2,3]`, `[[1],[2,3]]`, `[]`, `""`, `null`, `{"a":1}`,
		`[{"role":"user","content":"hi"}]`, `[{"type":"message","content":[{"type":"input_text","text":"x"}]}]`,
		`"required"`, `{"type":"function","function":{"name":"f"}}`,
		`{"type":"object","properties":{"a":{"type":"array","items":{"enum":[1,"x",null]}}}}`,
		`{"anyOf":[{"type":"integer","minimum":5,"maximum":1}]}`, `{"type":["string","null"]}`,
		`{"properties":{"p":{"properties":{"q":{"properties":{"r":{"const":{"z":[1]}}}}}}}}`,
	} {
		f.Add([]byte(seed))
	}
	tools := []toolDef{{Type: "function", Function: toolFuncDef{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _, _ = embeddingInputs(raw)
		_, _ = responseInput(raw)
		_, _ = planTools(tools, raw, "m", "p")
		schema, err := parseSchema(raw, "s")
		if err != nil {
			return
		}
		out, err := generateJSON("m", "p", 0, schema, "s")
		if err == nil && !json.Valid([]byte(out)) {
			t.Fatalf("schema %s gave invalid JSON %q", raw, out)
		}
	})
}
