package vllmemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// The Responses API (POST /v1/responses), as vLLM serves it for generative
// models: input as a string or a list of messages, optional instructions,
// max_output_tokens, and streaming as typed server-sent events
// (response.created … response.output_text.delta … response.completed).
// Stored responses (previous_response_id), tools and background mode are
// not emulated and are refused with 400.

type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       string          `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
	Background         bool            `json:"background"`
	Tools              json.RawMessage `json:"tools"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
}

// responseInput reads input into the roles and texts of its messages.
func responseInput(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("input is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, errors.New("input must be a string or a non-empty array of messages")
	}
	texts := make([]string, 0, len(items))
	for i, it := range items {
		if it.Type != "" && it.Type != "message" {
			return nil, fmt.Errorf("input[%d]: item type %q is not emulated (only messages)", i, it.Type)
		}
		t, err := responseContent(it.Content)
		if err != nil {
			return nil, fmt.Errorf("input[%d].content: %w", i, err)
		}
		texts = append(texts, t)
	}
	return texts, nil
}

// responseContent reads a message's content: a string or parts of type
// input_text / output_text / text.
func responseContent(raw json.RawMessage) (string, error) {
	return partsText(raw, "input_text", "output_text", "text")
}

// The response objects (the fields clients read; values follow OpenAI's).
type respUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type respPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type respItem struct {
	Type    string     `json:"type"`
	ID      string     `json:"id"`
	Status  string     `json:"status"`
	Role    string     `json:"role"`
	Content []respPart `json:"content"`
}

type respObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Model             string            `json:"model"`
	Status            string            `json:"status"`
	IncompleteDetails map[string]string `json:"incomplete_details"`
	Instructions      *string           `json:"instructions"`
	MaxOutputTokens   *int              `json:"max_output_tokens"`
	Output            []respItem        `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	Temperature       float64           `json:"temperature"`
	TopP              float64           `json:"top_p"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []any             `json:"tools"`
	Text              map[string]any    `json:"text"`
	Usage             *respUsage        `json:"usage"`
	Error             any               `json:"error"`
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	if s.tier.IsEmbedding() {
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("The model `%s` is an embedding model and does not support this API.", s.model))
		return
	}
	var req responsesRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	switch {
	case req.PreviousResponseID != "":
		s.fail(w, &badRequest{"previous_response_id", "stored responses are not emulated"})
		return
	case req.Background:
		s.fail(w, &badRequest{"background", "background responses are not emulated"})
		return
	case len(bytes.TrimSpace(req.Tools)) > 0 && string(bytes.TrimSpace(req.Tools)) != "null" && string(bytes.TrimSpace(req.Tools)) != "[]":
		s.fail(w, &badRequest{"tools", "tools in the Responses API are not emulated; use chat completions"})
		return
	}
	texts, err := responseInput(req.Input)
	if err != nil {
		s.fail(w, &badRequest{"input", err.Error()})
		return
	}
	mt, err := checkMax("max_output_tokens", req.MaxOutputTokens)
	if err != nil {
		s.fail(w, err)
		return
	}
	contents := texts
	if req.Instructions != "" {
		contents = append([]string{req.Instructions}, texts...)
	}
	prompt := engine.JoinChat(contents)
	promptTokens := routing.EstimateChatTokens(contents)
	if ctxLen := s.tier.ContextLen(); promptTokens+mt > ctxLen || promptTokens >= ctxLen {
		s.fail(w, &badRequest{"input", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the input, %d in the output).",
			ctxLen, promptTokens+mt, promptTokens, mt)})
		return
	}
	if !s.admit(w, r, req.Model) {
		return
	}
	sub := s.submitOr(w, "resp_", []engine.Request{{Prompt: prompt, Task: s.taskOf(prompt), PromptTokens: promptTokens, MaxTokens: mt}}, "input")
	if sub == nil {
		return
	}
	tk := sub.tickets[0]
	rs := &respStream{s: s, w: w, stream: req.Stream, text: newTextSource(s.model, prompt, 0),
		obj: respObject{ID: sub.ids[0], Object: "response", CreatedAt: time.Now().Unix(), Model: s.model, Status: "in_progress",
			MaxOutputTokens: req.MaxOutputTokens, Output: []respItem{}, ParallelToolCalls: true, Temperature: 1, TopP: 1,
			ToolChoice: "auto", Tools: []any{}, Text: map[string]any{"format": map[string]string{"type": "text"}}},
		itemID: "msg_" + sub.ids[0]}
	if req.Instructions != "" {
		rs.obj.Instructions = &req.Instructions
	}
	if req.Temperature != nil {
		rs.obj.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		rs.obj.TopP = *req.TopP
	}
	if req.Stream {
		rs.start()
	}
	tokens, ok := s.await(r.Context(), sub, func(tokens []int) error { return rs.progress(tokens[0]) })
	if !ok {
		return
	}
	rs.finish(tokens[0], tk.PromptTokens, tk.Finish)
}

// respStream writes a response, as one object or as typed events.
type respStream struct {
	s       *Server
	w       http.ResponseWriter
	stream  bool
	text    *textSource
	obj     respObject
	itemID  string
	sent    int
	buf     strings.Builder
	seq     int
	flusher http.Flusher
	err     error
}

func (o *respStream) event(typ string, fields map[string]any) {
	if o.err != nil {
		return
	}
	fields["type"] = typ
	fields["sequence_number"] = o.seq
	o.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		o.err = err
		return
	}
	if _, err := fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
		o.err = err
	}
}

func (o *respStream) flush() {
	if o.flusher != nil && o.err == nil {
		o.flusher.Flush()
	}
}

func (o *respStream) start() {
	o.flusher = startSSE(o.w)
	o.event("response.created", map[string]any{"response": o.obj})
	o.event("response.in_progress", map[string]any{"response": o.obj})
	o.event("response.output_item.added", map[string]any{"output_index": 0,
		"item": respItem{Type: "message", ID: o.itemID, Status: "in_progress", Role: "assistant", Content: []respPart{}}})
	o.event("response.content_part.added", map[string]any{"item_id": o.itemID, "output_index": 0, "content_index": 0,
		"part": respPart{Type: "output_text", Text: "", Annotations: []any{}}})
	o.flush()
}

func (o *respStream) progress(n int) error {
	for o.sent < n {
		tok := o.text.token(o.sent)
		o.buf.WriteString(tok)
		o.sent++
		if o.stream {
			o.event("response.output_text.delta", map[string]any{"item_id": o.itemID, "output_index": 0, "content_index": 0,
				"delta": tok, "logprobs": []any{}})
		}
	}
	if o.stream {
		o.flush()
	}
	return o.err
}

func (o *respStream) finish(n, promptTokens int, finish string) {
	_ = o.progress(n)
	text := o.buf.String()
	part := respPart{Type: "output_text", Text: text, Annotations: []any{}}
	item := respItem{Type: "message", ID: o.itemID, Status: "completed", Role: "assistant", Content: []respPart{part}}
	o.obj.Status = "completed"
	final := "response.completed"
	if finish == "length" && o.obj.MaxOutputTokens != nil && n >= *o.obj.MaxOutputTokens {
		o.obj.Status, final = "incomplete", "response.incomplete"
		o.obj.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
		item.Status = "incomplete"
	}
	o.obj.Output = []respItem{item}
	o.obj.Usage = &respUsage{InputTokens: promptTokens, InputTokensDetails: map[string]int{"cached_tokens": 0},
		OutputTokens: n, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}, TotalTokens: promptTokens + n}
	if !o.stream {
		writeJSON(o.w, http.StatusOK, o.obj)
		return
	}
	o.event("response.output_text.done", map[string]any{"item_id": o.itemID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}})
	o.event("response.content_part.done", map[string]any{"item_id": o.itemID, "output_index": 0, "content_index": 0, "part": part})
	o.event("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	o.event(final, map[string]any{"response": o.obj})
	o.flush()
}
