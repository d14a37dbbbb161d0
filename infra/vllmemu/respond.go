package vllmemu

import (
	"encoding/json"
	"net/http"
	"strings"
)

// responder writes one generation's answer, streamed or whole.
type responder struct {
	s            *Server
	w            http.ResponseWriter
	j            *job
	id           string
	created      int64
	promptTokens int
	target       int    // the sequence's final length (from the Ticket)
	reason       string // its finish reason
	words        func(i int) string
	sent         int // tokens written (streaming) or collected
	text         strings.Builder
	flusher      http.Flusher
	err          error
}

func (o *responder) token(i int) string {
	if i == 0 {
		return o.words(i)
	}
	return " " + o.words(i)
}

func (o *responder) startStream() {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	o.w.WriteHeader(http.StatusOK)
	o.flusher, _ = o.w.(http.Flusher)
	if o.j.chat {
		// vLLM opens a chat stream with the assistant role and empty content.
		empty := ""
		o.event(chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.s.model,
			Choices: []chatChoice{{Delta: &chatOutMessage{Role: "assistant", Content: &empty}}}})
	}
	o.flush()
}

// progress emits the tokens up to n; for streams, one chunk per token, the
// last one carrying the finish reason (as vLLM does).
func (o *responder) progress(n int) error {
	for o.sent < n {
		var fin *string
		if o.sent+1 == o.target {
			fin = &o.reason
		}
		o.emit(o.token(o.sent), fin)
		o.sent++
	}
	if o.j.stream {
		o.flush()
	}
	return o.err
}

func (o *responder) emit(tok string, finish *string) {
	if !o.j.stream {
		o.text.WriteString(tok)
		return
	}
	if o.j.chat {
		o.event(chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.s.model,
			Choices: []chatChoice{{Delta: &chatOutMessage{Content: &tok}, FinishReason: finish}}})
		return
	}
	o.event(completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.s.model,
		Choices: []completionChoice{{Text: tok, FinishReason: finish}}})
}

func (o *responder) event(v any) {
	if o.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		o.err = err
		return
	}
	if _, err := o.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
		o.err = err
	}
}

func (o *responder) flush() {
	if o.flusher != nil && o.err == nil {
		o.flusher.Flush()
	}
}

func (o *responder) finish(n int, reason string) {
	u := &usage{PromptTokens: o.promptTokens, CompletionTokens: n, TotalTokens: o.promptTokens + n}
	if o.j.stream {
		_ = o.progress(n)
		if n != o.target {
			// Cannot happen (the engine ends a sequence at its target), but a
			// stream must never end without a finish reason.
			o.emit("", &reason)
		}
		if o.j.includeUsage {
			if o.j.chat {
				o.event(chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.s.model, Choices: []chatChoice{}, Usage: u})
			} else {
				o.event(completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.s.model, Choices: []completionChoice{}, Usage: u})
			}
		}
		if o.err == nil {
			_, o.err = o.w.Write([]byte("data: [DONE]\n\n"))
		}
		o.flush()
		return
	}
	for o.sent < n {
		o.text.WriteString(o.token(o.sent))
		o.sent++
	}
	text := o.text.String()
	if o.j.chat {
		writeJSON(o.w, http.StatusOK, chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.s.model,
			Choices: []chatChoice{{Message: &chatOutMessage{Role: "assistant", Content: &text}, FinishReason: &reason}}, Usage: u})
		return
	}
	writeJSON(o.w, http.StatusOK, completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.s.model,
		Choices: []completionChoice{{Text: text, FinishReason: &reason}}, Usage: u})
}
