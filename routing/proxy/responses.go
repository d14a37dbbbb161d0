package proxy

import (
	"encoding/json"
	"strings"

	"github.com/routebalance/routebalance/routing"
)

// The Responses API (POST /v1/responses) streams typed server-sent events
// ("event: response.output_text.delta\ndata: {…}") instead of chat
// chunks, and ends with a terminal event (response.completed,
// response.incomplete or response.failed) that carries the whole response
// with its usage, not with [DONE]. The relay passes each event on as the
// upstream wrote it (event name and data), one flush per event; this file
// holds what it reads from them.

// respUsage is the Responses API's usage object.
type respUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// respBody is the part of a response object the relay reads.
type respBody struct {
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage  *respUsage `json:"usage"`
	Output []struct {
		Arguments string `json:"arguments"`
		Content   []struct {
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		} `json:"content"`
	} `json:"output"`
}

// truncated reports a response cut by max_output_tokens.
func (b *respBody) truncated() bool {
	return b.Status == "incomplete" && b.IncompleteDetails != nil && b.IncompleteDetails.Reason == "max_output_tokens"
}

// respEvent is the part of one stream event the relay reads.
type respEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int64           `json:"sequence_number"`
	Response       json.RawMessage `json:"response"`
}

// respStream is the Responses API's part of a relayed stream.
type respStream struct {
	snapshot []byte // the last response object seen (response.created / in_progress)
	seq      int64  // the last sequence_number seen
	open     bool   // a response was created and has not reached its terminal event
}

// countResponse reads the tokens and the truncation of a non-streamed
// response object into res: its usage when there is one, else an
// estimate from the output text.
func countResponse(raw []byte, res *Result) {
	var b respBody
	if json.Unmarshal(raw, &b) != nil {
		return
	}
	res.Outcome.Truncated = b.truncated()
	if b.Usage != nil {
		res.UsageReported = true
		res.Outcome.PromptTokens, res.Outcome.OutputTokens = b.Usage.InputTokens, b.Usage.OutputTokens
		return
	}
	for _, o := range b.Output {
		res.Outcome.OutputTokens += routing.EstimateTokens(o.Arguments)
		for _, c := range o.Content {
			res.Outcome.OutputTokens += routing.EstimateTokens(c.Text) + routing.EstimateTokens(c.Refusal)
		}
	}
}

// responseEvent relays one event of a Responses API stream and counts
// it: every ".delta" event is one output token (vLLM emits one per decode
// step), the terminal event's usage replaces the count. It reports
// whether the stream is over (a terminal event) and whether the budget is
// spent.
func (s *streamState) responseEvent(name, payload []byte, prog Progress) (done, budgetHit bool) {
	var ev respEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		s.writeEvent(name, payload) // not ours to judge: relay it untouched
		return false, false
	}
	typ := ev.Type
	if typ == "" {
		typ = string(name)
	}
	if ev.SequenceNumber > s.rs.seq {
		s.rs.seq = ev.SequenceNumber
	}
	if !s.writeEvent(name, payload) {
		return false, false
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		if len(ev.Response) > 0 {
			s.rs.snapshot, s.rs.open = append(s.rs.snapshot[:0], ev.Response...), true
		}
		return false, false
	case "response.completed", "response.incomplete", "response.failed":
		var b respBody
		if json.Unmarshal(ev.Response, &b) == nil {
			if b.Usage != nil {
				s.upUsage = &usage{PromptTokens: b.Usage.InputTokens, CompletionTokens: b.Usage.OutputTokens}
			}
			s.cut = s.cut || b.truncated()
		}
		s.upErr = s.upErr || typ == "response.failed"
		s.rs.open = false
		return true, false
	case "error":
		s.upErr = true
		return false, false
	}
	if !strings.HasSuffix(typ, ".delta") {
		return false, false
	}
	if s.first.IsZero() {
		s.first = s.r.p.clock.Now()
	}
	s.out++
	if prog != nil {
		prog.Progress(s.out)
	}
	if s.r.budget > 0 && s.r.cost(s.out) >= s.r.budget && s.rs.open {
		return false, true
	}
	return false, false
}

// writeEvent writes one event: its name line when it has one, its data.
func (s *streamState) writeEvent(name, payload []byte) bool {
	if len(name) == 0 {
		return s.writeData(payload)
	}
	buf := make([]byte, 0, len(name)+len(payload)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	return s.write(buf)
}

// writeTyped writes an event the relay makes: fields gets its type and
// the next sequence number.
func (s *streamState) writeTyped(typ string, fields map[string]any) {
	s.rs.seq++
	fields["type"], fields["sequence_number"] = typ, s.rs.seq
	b, err := json.Marshal(fields)
	if err != nil {
		return
	}
	s.writeEvent([]byte(typ), b)
}

// stopResponseForBudget ends a response whose budget is spent with a
// response.incomplete event (reason max_output_tokens, as when the model
// hits its own limit): the last response object the upstream sent, with
// that status and the usage so far. Its output is the snapshot's (the
// text went out as deltas).
func (s *streamState) stopResponseForBudget() {
	obj := map[string]any{}
	_ = json.Unmarshal(s.rs.snapshot, &obj) // a missing snapshot leaves the object bare
	obj["status"] = "incomplete"
	obj["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
	prompt := s.r.prompt
	obj["usage"] = map[string]any{"input_tokens": prompt, "output_tokens": s.out, "total_tokens": prompt + s.out,
		"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
	if _, ok := obj["object"]; !ok {
		obj["object"] = "response"
	}
	s.writeTyped("response.incomplete", map[string]any{"response": obj})
}

// writeResponseError ends a broken Responses stream with the API's own
// error event (type "error"), which OpenAI's SDKs deliver as an event.
func (s *streamState) writeResponseError(msg string) {
	s.writeTyped("error", map[string]any{"code": "upstream_stream_broken", "message": msg, "param": nil})
}
