package vllmemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// choiceOut is one choice of a generation: its engine sequence's final
// length and finish reason, and where its tokens come from.
type choiceOut struct {
	index  int
	target int    // the sequence's final length (from the Ticket)
	reason string // its finish reason as the client sees it
	sent   int    // tokens written (streaming) or collected
	text   *textSource
	pieces []string // a structured answer (JSON, tool arguments), one piece per token
	toolID string   // set when the answer is a tool call
	tool   string
	buf    strings.Builder
	lps    []tokenLogprob
	offset int // bytes of text so far (completions' text_offset)
}

func (c *choiceOut) token(i int) string {
	if c.pieces != nil {
		if i < len(c.pieces) {
			return c.pieces[i]
		}
		return ""
	}
	return c.text.token(i)
}

// responder writes one generation's answer, streamed or whole.
type responder struct {
	s            *Server
	w            http.ResponseWriter
	j            *job
	id           string
	created      int64
	promptTokens int
	choices      []*choiceOut
	flusher      http.Flusher
	err          error
}

// startSSE sends the headers of a server-sent-events answer and returns
// the writer's flusher (nil when it has none).
func startSSE(w http.ResponseWriter) http.Flusher {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return f
}

func (o *responder) startStream() {
	o.flusher = startSSE(o.w)
	if o.j.chat {
		// vLLM opens a chat stream with the assistant role and empty
		// content, once per choice.
		for _, c := range o.choices {
			empty := ""
			o.event(chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.s.model,
				Choices: []chatChoice{{Index: c.index, Delta: &chatOutMessage{Role: "assistant", Content: &empty}}}})
		}
	}
	o.flush()
}

// progress emits choice c's tokens up to n; for streams, one chunk per
// token, the last one carrying the finish reason (as vLLM does).
func (o *responder) progress(c *choiceOut, n int) error {
	for c.sent < n {
		var fin *string
		if c.sent+1 == c.target {
			fin = &c.reason
		}
		o.emit(c, c.token(c.sent), fin)
		c.sent++
	}
	return o.err
}

func (o *responder) logprob(c *choiceOut, tok string) *tokenLogprob {
	if !o.j.logprobs {
		return nil
	}
	lp := logprobFor(o.s.model, tok, c.sent, o.j.topLogprobs)
	return &lp
}

func (o *responder) emit(c *choiceOut, tok string, finish *string) {
	lp := o.logprob(c, tok)
	if !o.j.stream {
		c.buf.WriteString(tok)
		if lp != nil {
			c.lps = append(c.lps, *lp)
		}
		return
	}
	if o.j.chat {
		ch := chatChoice{Index: c.index, Delta: &chatOutMessage{}, FinishReason: finish}
		if c.toolID != "" {
			tc := toolCall{Index: new(int), Function: toolCallFunc{Arguments: tok}}
			if c.sent == 0 {
				tc.ID, tc.Type, tc.Function.Name = c.toolID, "function", c.tool
			}
			ch.Delta.ToolCalls = []toolCall{tc}
		} else {
			t := tok
			ch.Delta.Content = &t
		}
		if lp != nil {
			ch.Logprobs = chatLogprobs([]tokenLogprob{*lp})
		}
		o.event(chatResponse{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.s.model, Choices: []chatChoice{ch}})
		return
	}
	ch := completionChoice{Index: c.index, Text: tok, FinishReason: finish}
	if lp != nil {
		ch.Logprobs = completionLogprobs([]tokenLogprob{*lp}, c.offset)
	}
	c.offset += len(tok)
	o.event(completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.s.model, Choices: []completionChoice{ch}})
}

// chatLogprobs is vLLM's chat logprobs object: {"content":[{token,
// logprob, bytes, top_logprobs:[{token, logprob, bytes}]}]}.
func chatLogprobs(lps []tokenLogprob) any {
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	type entry struct {
		alt
		Top []alt `json:"top_logprobs"`
	}
	content := make([]entry, len(lps))
	for i, lp := range lps {
		e := entry{alt: alt{Token: lp.Token, Logprob: lp.Logprob, Bytes: tokenBytes(lp.Token)}, Top: []alt{}}
		for _, a := range lp.Top {
			e.Top = append(e.Top, alt{Token: a.Token, Logprob: a.Logprob, Bytes: tokenBytes(a.Token)})
		}
		content[i] = e
	}
	return map[string]any{"content": content}
}

// completionLogprobs is the legacy completions logprobs object:
// {"text_offset","token_logprobs","tokens","top_logprobs":[{token: lp}]}.
func completionLogprobs(lps []tokenLogprob, offset int) any {
	out := struct {
		TextOffset    []int                `json:"text_offset"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		Tokens        []string             `json:"tokens"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}{TextOffset: []int{}, TokenLogprobs: []float64{}, Tokens: []string{}, TopLogprobs: []map[string]float64{}}
	for _, lp := range lps {
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(lp.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, lp.Logprob)
		out.Tokens = append(out.Tokens, lp.Token)
		top := make(map[string]float64, len(lp.Top))
		for _, a := range lp.Top {
			top[a.Token] = a.Logprob
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
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

// finish ends the answer once every choice's sequence is done; tokens[i]
// is choice i's final length.
func (o *responder) finish(tokens []int) {
	total := 0
	for _, n := range tokens {
		total += n
	}
	u := &usage{PromptTokens: o.promptTokens, CompletionTokens: total, TotalTokens: o.promptTokens + total}
	if o.j.stream {
		for i, c := range o.choices {
			_ = o.progress(c, tokens[i])
			if tokens[i] != c.target {
				// Cannot happen (the engine ends a sequence at its target),
				// but a stream must never end without a finish reason.
				o.emit(c, "", &c.reason)
			}
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
	for i, c := range o.choices {
		_ = o.progress(c, tokens[i])
	}
	if o.j.chat {
		out := make([]chatChoice, len(o.choices))
		for i, c := range o.choices {
			reason := c.reason
			msg := &chatOutMessage{Role: "assistant"}
			if c.toolID != "" {
				msg.ToolCalls = []toolCall{{ID: c.toolID, Type: "function", Function: toolCallFunc{Name: c.tool, Arguments: c.buf.String()}}}
			} else {
				text := c.buf.String()
				msg.Content = &text
			}
			out[i] = chatChoice{Index: c.index, Message: msg, FinishReason: &reason}
			if o.j.logprobs {
				out[i].Logprobs = chatLogprobs(c.lps)
			}
		}
		writeJSON(o.w, http.StatusOK, chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.s.model, Choices: out, Usage: u})
		return
	}
	out := make([]completionChoice, len(o.choices))
	for i, c := range o.choices {
		reason := c.reason
		out[i] = completionChoice{Index: c.index, Text: c.buf.String(), FinishReason: &reason}
		if o.j.logprobs {
			out[i].Logprobs = completionLogprobs(c.lps, 0)
		}
	}
	writeJSON(o.w, http.StatusOK, completionResponse{ID: o.id, Object: "text_completion", Created: o.created, Model: o.s.model, Choices: out, Usage: u})
}

// toolCallID is the id of choice i's tool call, derived from the request id.
func toolCallID(reqID string, i int) string { return fmt.Sprintf("chatcmpl-tool-%s-%d", reqID, i) }
