package vllmemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// The OpenAI-compatible wire types the emulator reads and writes. Field
// names and presence follow vLLM's OpenAI server.

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               []toolDef       `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      *responseFormat `json:"response_format"`
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	N             *int            `json:"n"`
	Logprobs      *int            `json:"logprobs"`
}

// toolDef is one entry of a chat request's tools.
type toolDef struct {
	Type     string      `json:"type"`
	Function toolFuncDef `json:"function"`
}

type toolFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// responseFormat is a chat request's response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// completionDefaultMaxTokens is the max_tokens of /v1/completions when the
// request has none (OpenAI's and vLLM's default).
const completionDefaultMaxTokens = 16

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatOutMessage `json:"message,omitempty"`
	Delta        *chatOutMessage `json:"delta,omitempty"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   any             `json:"stop_reason"`
}

type chatOutMessage struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

// toolCall is an assistant message's tool call; in a stream delta Index
// says which call the piece belongs to and ID/Type/Name come only with the
// first piece.
type toolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function toolCallFunc `json:"function"`
}

type toolCallFunc struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	Parent      any    `json:"parent"`
	MaxModelLen int    `json:"max_model_len"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// apiError is vLLM's error body: {"error":{"message","type","param","code"}}
// with code = the HTTP status (recent vLLM nests the fields under "error"
// like OpenAI; older releases put them at the top level with
// "object":"error").
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// errorType is the "type" vLLM gives an HTTP status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	}
	return http.StatusText(status)
}

func writeError(w http.ResponseWriter, status int, param, msg string) {
	body := apiError{Error: apiErrorBody{Message: msg, Type: errorType(status), Code: status}}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// badRequest is a client error with the field it concerns.
type badRequest struct {
	param, msg string
}

func (e *badRequest) Error() string { return e.msg }

// messageText reads a chat message's content: a string, or an array of
// parts of which the "text" parts count.
func messageText(raw json.RawMessage) (string, error) { return partsText(raw, "text") }

// partsText reads a message content: null, a string, or an array of parts
// whose text counts when their type is one of types.
func partsText(raw json.RawMessage, types ...string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if slices.Contains(types, p.Type) {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// completionPrompt reads /v1/completions' prompt: a string or an array of
// exactly one string.
func completionPrompt(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var arr []string
	if err := json.Unmarshal(raw, &arr); err == nil && len(arr) == 1 {
		return arr[0], nil
	}
	return "", errors.New("prompt must be a string (or an array of one string); token-id and batched prompts are not emulated")
}

// maxN is the largest n the emulator accepts (vLLM has no fixed limit;
// this keeps one request from occupying a whole engine).
const maxN = 16

func checkN(n *int) (int, error) {
	if n == nil {
		return 1, nil
	}
	if *n < 1 || *n > maxN {
		return 0, &badRequest{"n", fmt.Sprintf("n must be between 1 and %d, got %d", maxN, *n)}
	}
	return *n, nil
}

func checkMax(name string, v *int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, &badRequest{name, fmt.Sprintf("%s must be at least 1, got %d", name, *v)}
	}
	return *v, nil
}
