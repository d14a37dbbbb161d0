package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// Writer receives the relayed body. The api side implements it over its
// HTTP connection; Flush pushes what was written to the client. An error
// from either method means the client is gone.
type Writer interface {
	Write(p []byte) (int, error)
	Flush() error
}

// Progress receives the running count of output tokens streamed so far;
// *routing.Assignment implements it.
type Progress interface {
	Progress(tokens int)
}

// Status values of a Result, as billing.UsageEvent names them.
const (
	ResultOK        = "ok"
	ResultError     = "error"
	ResultCancelled = "cancelled"
	ResultBudget    = "budget"
)

// Result is what happened while relaying a response.
type Result struct {
	// Outcome is ready to hand to Assignment.Release.
	Outcome routing.Outcome
	// Status is ResultOK, ResultError, ResultCancelled or ResultBudget.
	Status string
	// UsageReported tells whether the token counts came from the
	// upstream's usage object rather than from counting.
	UsageReported bool
	// Bytes is how many body bytes reached the Writer.
	Bytes int64
}

// Response is an upstream answer whose headers arrived with a 2xx status.
// Relay it exactly once; Relay closes it. Close releases it unrelayed.
type Response struct {
	// Status is the upstream's HTTP status.
	Status int

	p        *Proxy
	body     io.ReadCloser
	cancel   context.CancelFunc
	stream   bool
	usage    bool
	chat     bool
	resp     bool // the Responses API: typed events, its own usage shape
	budget   float64
	prompt   int
	priceIn  float64
	priceOut float64
	start    time.Time
	size     int64 // the upstream's Content-Length, -1 when unknown
}

// Close aborts the upstream exchange without relaying it.
func (r *Response) Close() {
	r.cancel()
	r.body.Close()
}

// Relay copies the response to w and returns what happened; it closes the
// response. A stream is relayed one event at a time with a Flush after each
// event, counting tokens and calling prog (may be nil) as they pass; it is
// cut with finish_reason "length" once the budget is spent, and ended with
// an SSE error event when the upstream dies. A non-streamed body is read
// whole (up to Config.MaxResponseBytes) and written once; if it cannot be
// read nothing is written and the Result carries the error. ctx must be the
// context given to Open (or its parent): it tells a client's cancellation
// from an upstream failure.
func (r *Response) Relay(ctx context.Context, w Writer, prog Progress) Result {
	defer r.Close()
	if r.stream {
		return r.relayStream(ctx, w, prog)
	}
	return r.relayBody(ctx, w)
}

func (r *Response) cost(out int) float64 {
	return (float64(r.prompt)*r.priceIn + float64(out)*r.priceOut) / 1e6
}

func (r *Response) relayBody(ctx context.Context, w Writer) Result {
	var res Result
	raw, err := readAll(r.body, r.size, r.p.cfg.MaxResponseBytes+1)
	end := r.p.clock.Now()
	res.Outcome.E2E = end.Sub(r.start)
	res.Outcome.PromptTokens = r.prompt
	switch {
	case err != nil && ctx.Err() != nil:
		res.Outcome.Err, res.Status = fmt.Errorf("reading upstream body: %w", ctx.Err()), ResultCancelled
		return res
	case err != nil:
		res.Outcome.Err, res.Outcome.Upstream, res.Status = fmt.Errorf("%w: reading body: %v", ErrStreamBroken, err), true, ResultError
		return res
	case int64(len(raw)) > r.p.cfg.MaxResponseBytes:
		res.Outcome.Err, res.Outcome.Upstream, res.Status = fmt.Errorf("%w: body larger than %d bytes", ErrStreamBroken, r.p.cfg.MaxResponseBytes), true, ResultError
		return res
	}
	// A non-streamed answer arrives at once: its first token was not
	// observed, so TTFT stays 0 (see routing.Outcome).
	if r.resp {
		countResponse(raw, &res)
	} else {
		countChat(raw, &res)
	}
	n, werr := w.Write(raw)
	if werr == nil {
		werr = w.Flush()
	}
	res.Bytes = int64(n)
	if werr != nil {
		res.Outcome.Err, res.Status = fmt.Errorf("writing to client: %w", werr), ResultCancelled
		return res
	}
	res.Status = ResultOK
	return res
}

// countChat reads the tokens and the truncation of a non-streamed chat
// or text completion into res: the usage object when there is one, else
// an estimate from the returned text. The answer is scanned in place
// (scanChat); an answer the scanner is not sure of is decoded.
func countChat(raw []byte, res *Result) {
	if !scanChat(raw, res) {
		countChatDecode(raw, res)
	}
}

// countChatDecode is countChat with encoding/json: the reference the
// scanner matches (FuzzScanChat), and the way for answers it leaves.
func countChatDecode(raw []byte, res *Result) {
	var body struct {
		Usage   *usage `json:"usage"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Text         string `json:"text"`
			Message      struct {
				Content          string          `json:"content"`
				ReasoningContent string          `json:"reasoning_content"`
				ToolCalls        json.RawMessage `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(raw, &body) == nil {
		for _, c := range body.Choices {
			res.Outcome.Truncated = res.Outcome.Truncated || c.FinishReason == "length"
		}
		if body.Usage != nil {
			res.UsageReported = true
			res.Outcome.PromptTokens = body.Usage.PromptTokens
			res.Outcome.OutputTokens = body.Usage.CompletionTokens
		} else {
			for _, c := range body.Choices {
				for _, t := range [...]string{c.Text, c.Message.Content, c.Message.ReasoningContent, string(c.Message.ToolCalls)} {
					res.Outcome.OutputTokens += routing.EstimateTokens(t)
				}
			}
		}
	}
}

// readAll reads at most limit bytes of body into one buffer of the
// announced size (Content-Length; size < 0 when unknown), so a body of
// known length is read without growing the buffer.
func readAll(body io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size >= limit {
		return io.ReadAll(io.LimitReader(body, limit))
	}
	buf := make([]byte, 0, size+1) // +1: the read that sees EOF
	for {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) { // longer than announced: read on, within the limit
			rest, err := io.ReadAll(io.LimitReader(body, limit-int64(len(buf))))
			return append(buf, rest...), err
		}
	}
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// chunk is the part of a streamed chunk the relay reads.
type chunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Error   json.RawMessage `json:"error"`
	Usage   *usage          `json:"usage"`
	Choices []struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// After [DONE], at most drainBytes are read within Config.DrainTimeout to
// let the upstream connection be reused.
const drainBytes = 64 << 10

// streamState tracks one relayed stream.
type streamState struct {
	r        *Response
	w        Writer
	out      int
	first    time.Time
	id       string
	object   string
	created  int64
	model    string
	open     map[int]bool // choice indexes seen without a finish_reason
	upUsage  *usage
	upErr    bool       // the upstream sent an error event
	rs       respStream // the Responses API's stream state
	cut      bool       // a choice finished with "length"
	bytes    int64
	writeErr error
}

func (s *streamState) write(b []byte) bool {
	if s.writeErr != nil {
		return false
	}
	n, err := s.w.Write(b)
	s.bytes += int64(n)
	if err == nil {
		err = s.w.Flush()
	}
	if err != nil {
		s.writeErr = err
		return false
	}
	return true
}

var (
	dataPrefix = []byte("data: ")
	eventEnd   = []byte("\n\n")
)

// writeData writes one "data: payload" event and flushes it: three writes
// into the client's buffered writer rather than a copy of the event.
func (s *streamState) writeData(payload []byte) bool {
	if s.writeErr != nil {
		return false
	}
	for _, part := range [3][]byte{dataPrefix, payload, eventEnd} {
		n, err := s.w.Write(part)
		s.bytes += int64(n)
		if err != nil {
			s.writeErr = err
			return false
		}
	}
	if err := s.w.Flush(); err != nil {
		s.writeErr = err
		return false
	}
	return true
}

// streamReaders holds the relays' 32 KiB line readers between streams.
var streamReaders sync.Pool

func (r *Response) relayStream(ctx context.Context, w Writer, prog Progress) Result {
	s := &streamState{r: r, w: w, open: map[int]bool{}}
	// The idle timer cancels the upstream request when no event arrives
	// for StreamIdleTimeout; a stall is then reported as a broken stream.
	var stalled atomic.Bool
	idle := time.AfterFunc(r.p.cfg.StreamIdleTimeout, func() {
		stalled.Store(true)
		r.cancel()
	})
	defer idle.Stop()

	br, _ := streamReaders.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(r.body, 32<<10)
	} else {
		br.Reset(r.body)
	}
	defer func() { br.Reset(nil); streamReaders.Put(br) }()
	var data []byte // the current event's data lines, joined by "\n"
	var name []byte // the current event's name (event: line), relayed for the Responses API
	hasData := false
	var readErr error
	done, budgetHit := false, false
	for !done && !budgetHit && s.writeErr == nil {
		line, err := readLine(br, r.p.cfg.MaxEventBytes)
		if err != nil {
			readErr = err
			break
		}
		idle.Reset(r.p.cfg.StreamIdleTimeout)
		if len(line) == 0 { // end of an event
			if !hasData {
				continue
			}
			done, budgetHit = s.event(name, data, prog)
			data, name, hasData = data[:0], name[:0], false
			continue
		}
		field, value := splitField(line)
		if field == "event" && r.resp {
			name = append(name[:0], value...)
			continue
		}
		if field != "data" {
			continue // comments, ids, retry hints (and chat's event names) are not relayed
		}
		if hasData {
			data = append(data, '\n')
		}
		data = append(data, value...)
		hasData = true
		if len(data) > r.p.cfg.MaxEventBytes {
			readErr = fmt.Errorf("event larger than %d bytes", r.p.cfg.MaxEventBytes)
			break
		}
	}
	if readErr == io.EOF && hasData && !done && !budgetHit && s.writeErr == nil {
		// A last event without its blank line still counts.
		done, budgetHit = s.event(name, data, prog)
	}
	if done && readErr == nil {
		// Read the end of the body (vLLM closes the chunked body right
		// after [DONE]) so the connection goes back to the keep-alive
		// pool; an upstream that lingers is cut after DrainTimeout.
		idle.Reset(r.p.cfg.DrainTimeout)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.body, drainBytes))
	}

	res := Result{Bytes: 0}
	end := r.p.clock.Now()
	res.Outcome.E2E = end.Sub(r.start)
	if !s.first.IsZero() {
		res.Outcome.TTFT = s.first.Sub(r.start)
	}
	res.Outcome.PromptTokens, res.Outcome.OutputTokens = r.prompt, s.out
	if s.upUsage != nil {
		res.UsageReported = true // the Responses API's usage is read into the same fields
		res.Outcome.PromptTokens = s.upUsage.PromptTokens
		res.Outcome.OutputTokens = s.upUsage.CompletionTokens
	}

	res.Outcome.Truncated = s.cut || budgetHit
	switch {
	case budgetHit:
		s.stopForBudget()
		res.Status = ResultBudget
	case done && s.upErr:
		res.Status = ResultError
		res.Outcome.Err, res.Outcome.Upstream = fmt.Errorf("%w: upstream sent an error event", ErrStreamBroken), true
	case done:
		res.Status = ResultOK
	case s.writeErr != nil:
		res.Status = ResultCancelled
		res.Outcome.Err = fmt.Errorf("writing to client: %w", s.writeErr)
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && !stalled.Load():
		// the request's own time limit, not the client leaving
		s.writeError("the request exceeded its time limit")
		res.Status = ResultError
		res.Outcome.Err = fmt.Errorf("relaying stream: %w", ctx.Err())
	case ctx.Err() != nil && !stalled.Load():
		res.Status = ResultCancelled
		res.Outcome.Err = fmt.Errorf("relaying stream: %w", ctx.Err())
	default:
		reason := "the upstream closed the stream before [DONE]"
		if r.resp {
			reason = "the upstream closed the stream before its final event"
		}
		switch {
		case stalled.Load():
			reason = fmt.Sprintf("the upstream sent nothing for %v", r.p.cfg.StreamIdleTimeout)
		case readErr != nil && readErr != io.EOF:
			reason = "the upstream connection failed: " + readErr.Error()
		}
		if s.upErr { // an error event already went out; the upstream then hung up
			reason = "the upstream reported an error and closed the stream"
		} else {
			s.writeError(reason)
		}
		res.Status = ResultError
		res.Outcome.Err, res.Outcome.Upstream = fmt.Errorf("%w: %s", ErrStreamBroken, reason), true
		r.p.log.Warn("upstream stream broken", slog.String("reason", reason), slog.Int("tokens_sent", s.out))
	}
	if res.Status == ResultBudget && s.writeErr != nil {
		res.Status = ResultCancelled
		res.Outcome.Err = fmt.Errorf("writing to client: %w", s.writeErr)
	}
	res.Bytes = s.bytes
	return res
}

// event handles one data payload. It reports whether the stream is over
// ([DONE]) and whether the budget is spent.
func (s *streamState) event(name, payload []byte, prog Progress) (done, budgetHit bool) {
	if bytes.Equal(bytes.TrimSpace(payload), []byte("[DONE]")) {
		s.write([]byte("data: [DONE]\n\n"))
		return true, false
	}
	if s.r.resp {
		return s.responseEvent(name, payload, prog)
	}
	var c chunkView
	if !scanChunk(payload, s.id == "", &c) {
		// Not sure of it in place: decode it as before.
		var dc chunk
		if err := json.Unmarshal(payload, &dc); err != nil {
			s.writeData(payload) // not ours to judge: relay it untouched
			return false, false
		}
		c = chunkView{}
		c.fromChunk(&dc)
	}
	if c.errEvent {
		s.upErr = true
		s.writeData(payload)
		return false, false
	}
	if s.id == "" {
		s.id, s.object, s.created, s.model = c.id, c.object, c.created, c.model
	}
	if c.hasUsage {
		if s.upUsage == nil {
			s.upUsage = new(usage)
		}
		*s.upUsage = c.usage
		if c.n == 0 && !s.r.usage {
			return false, false // the usage chunk only we asked for
		}
	}
	counted := 0
	for i := range c.n {
		ch := c.choice(i)
		if ch.finished {
			s.open[ch.index] = false
			s.cut = s.cut || ch.length
		} else if _, seen := s.open[ch.index]; !seen {
			s.open[ch.index] = true
		}
		if ch.content {
			counted++
		}
	}
	if !s.writeData(payload) {
		return false, false
	}
	if counted == 0 {
		return false, false
	}
	if s.first.IsZero() {
		s.first = s.r.p.clock.Now()
	}
	s.out += counted
	if prog != nil {
		prog.Progress(s.out)
	}
	if s.r.budget > 0 && s.r.cost(s.out) >= s.r.budget && s.anyOpen() {
		return false, true
	}
	return false, false
}

func (s *streamState) anyOpen() bool {
	for _, open := range s.open {
		if open {
			return true
		}
	}
	return false
}

// stopForBudget ends every open choice with finish_reason "length", adds
// the usage chunk when the client asked for it, and sends [DONE].
func (s *streamState) stopForBudget() {
	if s.r.resp {
		s.stopResponseForBudget()
		return
	}
	object := s.object
	if object == "" {
		object = "text_completion"
		if s.r.chat {
			object = "chat.completion.chunk"
		}
	}
	for idx, open := range s.open {
		if !open {
			continue
		}
		choice := map[string]any{"index": idx, "logprobs": nil, "finish_reason": "length"}
		if s.r.chat {
			choice["delta"] = map[string]any{}
		} else {
			choice["text"] = ""
		}
		b, _ := json.Marshal(map[string]any{
			"id": s.id, "object": object, "created": s.created, "model": s.model,
			"choices": []any{choice},
		})
		s.writeData(b)
	}
	if s.r.usage {
		prompt := s.r.prompt
		b, _ := json.Marshal(map[string]any{
			"id": s.id, "object": object, "created": s.created, "model": s.model,
			"choices": []any{},
			"usage": map[string]int{
				"prompt_tokens": prompt, "completion_tokens": s.out, "total_tokens": prompt + s.out,
			},
		})
		s.writeData(b)
	}
	s.write([]byte("data: [DONE]\n\n"))
}

// writeError ends a broken stream with an error event in OpenAI's
// envelope (the OpenAI SDKs surface it as an error).
func (s *streamState) writeError(msg string) {
	if s.r.resp {
		s.writeResponseError(msg)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "upstream_error", "param": nil, "code": "upstream_stream_broken",
	}})
	s.writeData(b)
}

// readLine returns one line without its terminator ("\n", "\r\n" or
// "\r\n"), at most max bytes long.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var long []byte
	for {
		frag, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			// max bounds the line without its end: one more byte may be
			// the "\r" of a "\r\n" still to come.
			if len(long) > max+1 {
				return nil, errLineTooLong(max)
			}
			continue
		}
		if err != nil {
			if err == io.EOF && len(frag)+len(long) > 0 {
				// a final line without a newline: hand it over, EOF next time
				return boundLine(trimEOL(append(long, frag...)), max)
			}
			return nil, err
		}
		if long != nil {
			frag = append(long, frag...)
		}
		return boundLine(trimEOL(frag), max)
	}
}

// boundLine refuses a line (its end already trimmed) longer than max.
func boundLine(line []byte, max int) ([]byte, error) {
	if len(line) > max {
		return nil, errLineTooLong(max)
	}
	return line, nil
}

func errLineTooLong(max int) error { return fmt.Errorf("line longer than %d bytes", max) }

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// splitField splits an SSE line into field and value; one space after the
// colon is dropped, as the SSE format says.
func splitField(line []byte) (string, []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return string(line), nil
	}
	if i == 0 {
		return "", nil // a comment
	}
	v := line[i+1:]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return string(line[:i]), v
}
