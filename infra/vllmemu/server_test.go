package vllmemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// testCluster is a two-instance cluster whose world runs 100 times faster
// than the wall clock.
func testCluster(t *testing.T, mutate func(*Config)) *Cluster {
	t.Helper()
	f := &engine.ClusterFile{Name: "test", Tiers: []engine.Tier{
		{Model: "big", GPU: "a100", TensorParallel: 4, Instances: 1, TPOTMsLight: 30, TPOTLoadFactor: 2, MaxNumSeqs: 8,
			TTFTOverheadMs: 40, PrefillMsPer1kPromptTokens: 80, Verbosity: 1.2},
		{Model: "small", GPU: "a30", TensorParallel: 1, Instances: 1, TPOTMsLight: 20, TPOTLoadFactor: 2, MaxNumSeqs: 8,
			TTFTOverheadMs: 40, PrefillMsPer1kPromptTokens: 60, Verbosity: 1},
	}, OutputLengths: engine.OutputLengths{Sigma: 0.6, MedianTokensByTask: map[string]float64{"default": 40, "trivia": 10}}}
	cfg := Config{File: f, TimeScale: 0.01, Seed: 11}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := StartCluster(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		c.Close()
	})
	return c
}

func sdk(in *Instance) openai.Client {
	return openai.NewClient(option.WithBaseURL(in.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// plan is what the instance's engine will decide for a chat of one user
// message.
func plan(t *testing.T, in *Instance, prompt string, maxTokens int) engine.Ticket {
	t.Helper()
	e, err := engine.NewEngine(engine.EngineConfig{Tier: *in.Spec().Tier, Lengths: in.lengths(), Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := e.Plan(&engine.Request{Prompt: prompt, PromptTokens: routing.EstimateChatTokens([]string{prompt}), MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func (s *Server) lengths() engine.OutputLengths {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.Lengths()
}

func TestSDKStreamingChat(t *testing.T) {
	c := testCluster(t, nil)
	in := c.Instances[1]
	client := sdk(in)
	prompt := "Name three prime numbers."
	want := plan(t, in, prompt, 0)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "small",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	contentChunks, usageChunks := 0, 0
	var finish []string
	for stream.Next() {
		ch := stream.Current()
		if !acc.AddChunk(ch) {
			t.Fatalf("accumulator rejected chunk %+v", ch)
		}
		if ch.ID == "" || ch.Model != "small" || ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk header = id %q model %q object %q", ch.ID, ch.Model, ch.Object)
		}
		if len(ch.Choices) == 0 {
			usageChunks++
			if ch.Usage.CompletionTokens != int64(want.OutputTokens) || ch.Usage.PromptTokens != int64(want.PromptTokens) ||
				ch.Usage.TotalTokens != int64(want.PromptTokens+want.OutputTokens) {
				t.Errorf("usage chunk = %+v, want %d prompt + %d completion", ch.Usage, want.PromptTokens, want.OutputTokens)
			}
			continue
		}
		if ch.Usage.TotalTokens != 0 {
			t.Errorf("content chunk carries usage %+v", ch.Usage)
		}
		if ch.Choices[0].Delta.Content != "" {
			contentChunks++
		}
		if fr := ch.Choices[0].FinishReason; fr != "" {
			finish = append(finish, fr)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if contentChunks != want.OutputTokens {
		t.Errorf("content chunks = %d, want one per token = %d", contentChunks, want.OutputTokens)
	}
	if usageChunks != 1 {
		t.Errorf("usage chunks = %d, want 1", usageChunks)
	}
	if diff := cmp.Diff([]string{want.Finish}, finish); diff != "" {
		t.Errorf("finish reasons (-want +got):\n%s", diff)
	}
	if got := len(strings.Fields(acc.Choices[0].Message.Content)); got != want.OutputTokens {
		t.Errorf("accumulated %d words, want %d", got, want.OutputTokens)
	}
	if acc.Usage.CompletionTokens != int64(want.OutputTokens) {
		t.Errorf("accumulated usage = %+v", acc.Usage)
	}
}

func TestSDKNonStreamingAndLengths(t *testing.T) {
	c := testCluster(t, nil)
	in := c.Instances[0]
	client := sdk(in)
	ctx := context.Background()
	prompt := "Explain the Pythagorean theorem."
	want := plan(t, in, prompt, 0)
	var got []int64
	for i := 0; i < 2; i++ {
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "big",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Choices[0].FinishReason != want.Finish || r.Choices[0].Message.Role != "assistant" {
			t.Errorf("choice = %+v", r.Choices[0])
		}
		got = append(got, r.Usage.CompletionTokens)
	}
	if diff := cmp.Diff([]int64{int64(want.OutputTokens), int64(want.OutputTokens)}, got); diff != "" {
		t.Errorf("completion tokens of the same prompt twice (-want +got):\n%s", diff)
	}
	// max_tokens caps; ignore_eos makes the length exactly max_tokens.
	capped := min(want.OutputTokens-1, 5)
	r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(int64(capped)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.CompletionTokens != int64(capped) || r.Choices[0].FinishReason != "length" {
		t.Errorf("capped: %d tokens, finish %q; want %d, length", r.Usage.CompletionTokens, r.Choices[0].FinishReason, capped)
	}
	long := want.OutputTokens + 7
	r, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(int64(long)),
	}, option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.CompletionTokens != int64(long) {
		t.Errorf("ignore_eos: %d tokens, want %d", r.Usage.CompletionTokens, long)
	}
	// Legacy completions, streamed, default max_tokens 16.
	cs := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "big", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts, usageTokens := 0, int64(-1)
	for cs.Next() {
		ch := cs.Current()
		if len(ch.Choices) == 0 {
			usageTokens = ch.Usage.CompletionTokens
			continue
		}
		texts++
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	wantTok := min(plan(t, in, prompt, 16).OutputTokens, 16)
	if texts != int(usageTokens) || texts < 1 || texts > 16 {
		t.Errorf("completion stream: %d text chunks, usage %d (natural %d)", texts, usageTokens, wantTok)
	}
}

func TestUnknownModelAndBadRequest(t *testing.T) {
	c := testCluster(t, nil)
	client := sdk(c.Instances[0])
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: err = %v, want a 404 API error", err)
	}
	if !strings.Contains(apiErr.Message, "does not exist") {
		t.Errorf("404 message = %q", apiErr.Message)
	}
	tests := []struct {
		path, body string
		status     int
		wantParam  string
	}{
		{"/v1/chat/completions", `{"model":"big","messages":[]}`, 400, "messages"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "max_tokens"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"n":0}`, 400, "n"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"n":17}`, 400, "n"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, 400, "top_logprobs"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, 400, "tool_choice"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice"},
		{"/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, 400, "response_format.type"},
		{"/v1/completions", `{"model":"big","prompt":"x","logprobs":21}`, 400, "logprobs"},
		{"/v1/responses", `{"model":"big"}`, 400, "input"},
		{"/v1/responses", `{"model":"big","input":"x","previous_response_id":"resp_1"}`, 400, "previous_response_id"},
		{"/tokenize", `{"model":"big"}`, 400, "prompt"},
		{"/detokenize", `{"model":"big","tokens":[12345]}`, 400, "tokens"},
		{"/v1/chat/completions", `{not json`, 400, ""},
		{"/v1/completions", `{"model":"big","prompt":[1,2,3]}`, 400, "prompt"},
		{"/v1/completions", `{"model":"big","prompt":"x","max_tokens":8192}`, 400, "max_tokens"},
		{"/v1/completions", `{"model":"big","prompt":"x","max_tokens":8191}`, 200, ""},
		{"/v1/completions", `{"model":"nope","prompt":"x"}`, 404, ""},
		{"/v1/embeddings", `{}`, 400, ""},
		{"/v1/nothing", `{}`, 404, ""},
	}
	for _, tt := range tests {
		resp, err := http.Post(c.Instances[0].URL+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		var body apiError
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if tt.status == 200 {
			if resp.StatusCode != 200 {
				t.Errorf("%s %s: status %d", tt.path, tt.body, resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != tt.status || derr != nil || body.Error.Code != tt.status || body.Error.Message == "" {
			t.Errorf("%s %s: status %d body %+v (%v), want %d", tt.path, tt.body, resp.StatusCode, body, derr, tt.status)
		}
		param := ""
		if body.Error.Param != nil {
			param = *body.Error.Param
		}
		if param != tt.wantParam {
			t.Errorf("%s %s: param %q, want %q", tt.path, tt.body, param, tt.wantParam)
		}
	}
	resp, err := http.Get(c.Instances[0].URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml modelList
	_ = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if len(ml.Data) != 1 || ml.Data[0].ID != "big" || ml.Object != "list" {
		t.Errorf("/v1/models = %+v", ml)
	}
}

func scrape(t *testing.T, in *Instance) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(in.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

func single(t *testing.T, mfs map[string]*dto.MetricFamily, name, model string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("metric %s missing", name)
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if l.GetName() == "model_name" && l.GetValue() == model {
				return m
			}
		}
	}
	t.Fatalf("metric %s has no series with model_name=%q", name, model)
	return nil
}

func TestMetricsAgreeWithEngine(t *testing.T) {
	c := testCluster(t, nil)
	in := c.Instances[1]
	client := sdk(in)
	ctx := context.Background()
	var gen, prompt int64
	for i := 0; i < 5; i++ {
		r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("question %d", i))},
		})
		if err != nil {
			t.Fatal(err)
		}
		gen += r.Usage.CompletionTokens
		prompt += r.Usage.PromptTokens
	}
	mfs := scrape(t, in)
	stats := in.Stats()
	type kv struct {
		Name string
		V    float64
	}
	got := []kv{
		{"running", single(t, mfs, "vllm:num_requests_running", "small").GetGauge().GetValue()},
		{"waiting", single(t, mfs, "vllm:num_requests_waiting", "small").GetGauge().GetValue()},
		{"kv", single(t, mfs, "vllm:kv_cache_usage_perc", "small").GetGauge().GetValue()},
		{"prompt", single(t, mfs, "vllm:prompt_tokens_total", "small").GetCounter().GetValue()},
		{"gen", single(t, mfs, "vllm:generation_tokens_total", "small").GetCounter().GetValue()},
		{"ttft count", float64(single(t, mfs, "vllm:time_to_first_token_seconds", "small").GetHistogram().GetSampleCount())},
		{"itl count", float64(single(t, mfs, "vllm:inter_token_latency_seconds", "small").GetHistogram().GetSampleCount())},
		{"e2e count", float64(single(t, mfs, "vllm:e2e_request_latency_seconds", "small").GetHistogram().GetSampleCount())},
		{"queue count", float64(single(t, mfs, "vllm:request_queue_time_seconds", "small").GetHistogram().GetSampleCount())},
	}
	want := []kv{{"running", 0}, {"waiting", 0}, {"kv", 0}, {"prompt", float64(prompt)}, {"gen", float64(gen)},
		{"ttft count", 5}, {"itl count", float64(gen - 5)}, {"e2e count", 5}, {"queue count", 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	var succ float64
	for _, m := range mfs["vllm:request_success_total"].Metric {
		succ += m.GetCounter().GetValue()
	}
	if succ != 5 || uint64(succ) != stats.SuccessStop+stats.SuccessLength {
		t.Errorf("request_success_total = %v, engine %d+%d", succ, stats.SuccessStop, stats.SuccessLength)
	}
	e2e := single(t, mfs, "vllm:e2e_request_latency_seconds", "small").GetHistogram()
	if e2e.GetSampleSum() != stats.E2E.Sum {
		t.Errorf("e2e sum %v, engine %v", e2e.GetSampleSum(), stats.E2E.Sum)
	}
	if b := e2e.Bucket[len(e2e.Bucket)-1]; b.GetCumulativeCount() != 5 {
		t.Errorf("last e2e bucket = %v", b)
	}

	// While a long stream runs: one running request holding KV cache; after
	// the client disconnects the engine drops it.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(sctx, openai.ChatCompletionNewParams{
		Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("write a long story")},
		MaxTokens: openai.Int(4000),
	}, option.WithJSONSet("ignore_eos", true))
	for i := 0; i < 3 && stream.Next(); i++ {
	}
	mfs = scrape(t, in)
	if v := single(t, mfs, "vllm:num_requests_running", "small").GetGauge().GetValue(); v != 1 {
		t.Errorf("running during a stream = %v, want 1", v)
	}
	if v := single(t, mfs, "vllm:kv_cache_usage_perc", "small").GetGauge().GetValue(); v <= 0 || v > 1 {
		t.Errorf("kv usage during a stream = %v, want in (0,1]", v)
	}
	cancel()
	stream.Close()
	testwait.Until(t, "the aborted stream to leave the engine", func() bool { return in.State().Running == 0 && in.Stats().Aborted == 1 })
}

func postFault(t *testing.T, in *Instance, body string) Fault {
	t.Helper()
	resp, err := http.Post(in.URL+"/admin/fault", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /admin/fault %s: %d %s", body, resp.StatusCode, b)
	}
	var f Fault
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFaultErrorRate(t *testing.T) {
	c := testCluster(t, func(cfg *Config) { cfg.ZeroLatency = true })
	in := c.Instances[0]
	client := sdk(in)
	if diff := cmp.Diff(Fault{ErrorRate: 1, ErrorStatus: 500}, postFault(t, in, `{"error_rate":1,"error_status":500}`)); diff != "" {
		t.Errorf("fault (-want +got):\n%s", diff)
	}
	params := openai.ChatCompletionNewParams{Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	_, err := client.Chat.Completions.New(context.Background(), params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 {
		t.Fatalf("error_rate 1: err = %v, want 500", err)
	}
	postFault(t, in, `{"error_rate":0.3,"error_status":503}`)
	fails := 0
	for i := 0; i < 200; i++ {
		_, err := client.Chat.Completions.New(context.Background(), params)
		if errors.As(err, &apiErr) && apiErr.StatusCode == 503 {
			fails++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if fails < 40 || fails > 80 {
		t.Errorf("error_rate 0.3: %d of 200 failed", fails)
	}
	if got := in.Stats().Submitted; got != uint64(200-fails) {
		t.Errorf("engine saw %d requests, want %d (failed ones never reach it)", got, 200-fails)
	}
	resp, err := http.Post(in.URL+"/admin/fault", "application/json", strings.NewReader(`{"error_rate":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("error_rate 2: status %d, want 400", resp.StatusCode)
	}
}

func TestFaultStall(t *testing.T) {
	c := testCluster(t, nil)
	in := c.Instances[0]
	postFault(t, in, `{"stall_ms":1000000}`) // 10,000 s of wall time at scale 0.01
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	client := sdk(in)
	go func() {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		done <- err
	}()
	testwait.Until(t, "the request to be stalled", func() bool { return in.Stalled() == 1 })
	if st := in.Stats(); st.Submitted != 0 {
		t.Errorf("a stalled request reached the engine: %+v", st)
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("cancelled stalled request succeeded")
	}
	testwait.Until(t, "the stall to end", func() bool { return in.Stalled() == 0 })
}

func TestFaultDieAndRevive(t *testing.T) {
	c := testCluster(t, nil)
	in := c.Instances[1]
	client := sdk(in)
	ctx := context.Background()
	// A stream in flight is cut off when the instance dies.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("long")}, MaxTokens: openai.Int(4000),
	}, option.WithJSONSet("ignore_eos", true))
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	postFault(t, in, `{"dead":true}`)
	n := 0
	for stream.Next() {
		n++
	}
	if stream.Err() == nil {
		t.Errorf("stream ended cleanly after %d more chunks although the instance died", n)
	}
	testwait.Until(t, "the cut stream to leave the engine", func() bool { return in.State().Running == 0 })
	// New requests get no answer at all.
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/health", "/v1/models"} {
		resp, err := hc.Get(in.URL + path)
		if err == nil {
			resp.Body.Close()
			t.Errorf("GET %s on a dead instance answered %d", path, resp.StatusCode)
		}
	}
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	if err == nil || errors.As(err, &apiErr) {
		t.Errorf("chat on a dead instance: err = %v, want a connection error", err)
	}
	// Revive.
	postFault(t, in, `{"dead":false}`)
	resp, err := hc.Get(in.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health after revive = %d", resp.StatusCode)
	}
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}}); err != nil {
		t.Errorf("chat after revive: %v", err)
	}
}

func TestTaskLookupChangesLengths(t *testing.T) {
	table, err := ReadTaskTable(strings.NewReader(`{"id":"1","task":"trivia","prompt":"Who wrote Hamlet?","scores":{}}` + "\n\n" + `{"prompt":"no task"}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(TaskTable{"Who wrote Hamlet?": "trivia"}, table); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
	c := testCluster(t, func(cfg *Config) { cfg.Tasks = table; cfg.ZeroLatency = true })
	in := c.Instances[1]
	client := sdk(in)
	r, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "small", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Who wrote Hamlet?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	lengths := in.lengths()
	want := lengths.Natural("Who wrote Hamlet?", "small", "trivia", 1, 11)
	if r.Usage.CompletionTokens != int64(want) {
		t.Errorf("completion tokens = %d, want the trivia length %d", r.Usage.CompletionTokens, want)
	}
}

func TestRawSSEFraming(t *testing.T) {
	c := testCluster(t, func(cfg *Config) { cfg.ZeroLatency = true })
	resp, err := http.Post(c.Instances[0].URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"big","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	// role chunk + tokens + usage + [DONE]
	if len(lines) < 4 || lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("lines = %q", lines)
	}
	for _, l := range lines[:len(lines)-1] {
		var m map[string]any
		if !strings.HasPrefix(l, "data: ") || json.Unmarshal([]byte(l[6:]), &m) != nil {
			t.Errorf("bad SSE line %q", l)
		}
	}
}
