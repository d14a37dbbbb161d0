// Package vllmtest runs a small vLLM-like OpenAI server on loopback for
// tests of the inference path: chat and text completions, streamed (one
// SSE chunk per token, the usage chunk when stream_options.include_usage
// is set, then [DONE]) or not, /v1/models and /health, vLLM's error
// bodies, and injected faults (an error status, death mid-stream, a hold
// before the first token that notices the client going away).
package vllmtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Config shapes a Server's behaviour.
type Config struct {
	// Model is the served model name (default "test-model").
	Model string
	// Tokens is the reply length when the request has no max_tokens
	// (default 8).
	Tokens int
	// Status, when non-zero, answers every completion request with this
	// status and a vLLM error body.
	Status int
	// DieAfter, when > 0, aborts the connection after that many streamed
	// tokens, without the terminating chunk.
	DieAfter int
	// Hold, when non-nil, makes each completion request wait before its
	// first token until Hold is closed or the client goes away.
	Hold chan struct{}
	// APIKey, when set, is required as "Authorization: Bearer <APIKey>".
	APIKey string
	// OmitUsage leaves the usage object out of every answer, so the caller
	// has to count tokens itself.
	OmitUsage bool
	// StallAfter, when > 0, stops sending after that many streamed tokens
	// and keeps the connection open until the client goes away.
	StallAfter int
	// TokenDelay is slept between two streamed tokens.
	TokenDelay time.Duration
	// LingerAfterDone is slept after "data: [DONE]" is flushed, before the
	// chunked body is terminated (as a real server's separate writes).
	LingerAfterDone time.Duration
}

// Request is one completion request as the server received it.
type Request struct {
	Path          string
	Authorization string
	// Header is a copy of all the request's headers.
	Header http.Header
	Body   map[string]any
}

// Server is a running fake vLLM server.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port).
	URL string

	cfg       Config
	srv       *httptest.Server
	mu        sync.Mutex
	reqs      []Request
	arrived   chan struct{}
	cancelled atomic.Int64
	finished  atomic.Int64
	running   atomic.Int64
	conns     atomic.Int64
}

// New starts a Server and stops it when the test ends.
func New(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 8
	}
	s := &Server{cfg: cfg, arrived: make(chan struct{}, 1024)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /metrics", s.metrics)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// RefusedURL returns the base URL of a loopback port nothing listens on.
func RefusedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// Requests returns the completion requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Arrived is signalled once per completion request that reached the
// server (after its body was read).
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Cancelled is how many requests ended because the client went away
// before their answer was complete.
func (s *Server) Cancelled() int64 { return s.cancelled.Load() }

// Conns is how many TCP connections clients opened to the server.
func (s *Server) Conns() int64 { return s.conns.Load() }

// Finished is how many requests were answered completely.
func (s *Server) Finished() int64 { return s.finished.Load() }

// metrics serves the vLLM gauges a router scrapes.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m := fmt.Sprintf("{model_name=%q}", s.cfg.Model)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d\n", m, s.running.Load())
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s 0\n", m)
	fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s 0.0\n", m)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": s.cfg.Model, "object": "model", "owned_by": "vllm"}},
	})
}

// vllmError writes vLLM's flat error object.
func vllmError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	s.running.Add(1)
	defer s.running.Add(-1)
	if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
		vllmError(w, http.StatusUnauthorized, "Unauthorized", "invalid upstream API key")
		return
	}
	if s.cfg.Status != 0 {
		vllmError(w, s.cfg.Status, "InternalServerError", fmt.Sprintf("injected failure %d", s.cfg.Status))
		return
	}
	if m, _ := body["model"].(string); m != s.cfg.Model {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", m))
		return
	}
	// The reply is Tokens long ("stop") unless max_tokens cuts it
	// ("length").
	n, finish := s.cfg.Tokens, "stop"
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := body[k].(float64); ok && int(v) <= n {
			n, finish = int(v), "length"
		}
	}
	prompt := promptWords(body, chat)
	stream, _ := body["stream"].(bool)
	if s.cfg.Hold != nil {
		select {
		case <-s.cfg.Hold:
		case <-r.Context().Done():
			s.cancelled.Add(1)
			return
		}
	}
	if stream {
		s.stream(w, r, body, chat, n, prompt, finish)
		return
	}
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	text := strings.Join(words, " ")
	resp := map[string]any{"id": "cmpl-test", "created": 1700000000, "model": s.cfg.Model}
	if chat {
		resp["object"] = "chat.completion"
		resp["choices"] = []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": text},
			"logprobs": nil, "finish_reason": finish,
		}}
	} else {
		resp["object"] = "text_completion"
		resp["choices"] = []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}}
	}
	if !s.cfg.OmitUsage {
		resp["usage"] = map[string]any{"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
	}
	writeJSON(w, http.StatusOK, resp)
	s.finished.Add(1)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, body map[string]any, chat bool, n, prompt int, finish string) {
	fl := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	send := func(choices []any, usage any) bool {
		c := map[string]any{"id": "cmpl-test", "object": object, "created": 1700000000, "model": s.cfg.Model, "choices": choices}
		if usage != nil {
			c["usage"] = usage
		}
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		fl.Flush()
		return r.Context().Err() == nil
	}
	choice := func(text string, finish any) map[string]any {
		if chat {
			return map[string]any{"index": 0, "delta": map[string]any{"content": text}, "logprobs": nil, "finish_reason": finish}
		}
		return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	if chat && !send([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil}}, nil) {
		s.cancelled.Add(1)
		return
	}
	for i := 0; i < n; i++ {
		if s.cfg.DieAfter > 0 && i == s.cfg.DieAfter {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
		if s.cfg.StallAfter > 0 && i == s.cfg.StallAfter {
			<-r.Context().Done()
			s.cancelled.Add(1)
			return
		}
		text := fmt.Sprintf(" w%d", i)
		if i == 0 {
			text = "w0"
		}
		if !send([]any{choice(text, nil)}, nil) {
			s.cancelled.Add(1)
			return
		}
		if s.cfg.TokenDelay > 0 {
			time.Sleep(s.cfg.TokenDelay)
		}
	}
	if !send([]any{choice("", finish)}, nil) {
		s.cancelled.Add(1)
		return
	}
	opts, _ := body["stream_options"].(map[string]any)
	if inc, _ := opts["include_usage"].(bool); inc && !s.cfg.OmitUsage {
		send([]any{}, map[string]any{"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
	if s.cfg.LingerAfterDone > 0 {
		time.Sleep(s.cfg.LingerAfterDone)
	}
	s.finished.Add(1)
}

// promptWords counts the words of the prompt: a stand-in for a tokenizer.
func promptWords(body map[string]any, chat bool) int {
	var text []string
	if chat {
		msgs, _ := body["messages"].([]any)
		for _, m := range msgs {
			mm, _ := m.(map[string]any)
			if c, ok := mm["content"].(string); ok {
				text = append(text, c)
			}
		}
	} else if p, ok := body["prompt"].(string); ok {
		text = append(text, p)
	}
	return len(strings.Fields(strings.Join(text, " ")))
}
