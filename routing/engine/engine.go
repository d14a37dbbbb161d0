package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds, in the order a sequence produces them.
const (
	// EventFirstToken: the sequence's prefill finished and its first output
	// token exists (Tokens = 1). TTFT = At − submission time.
	EventFirstToken EventKind = iota + 1
	// EventToken: one decode step gave the sequence one more token (Tokens
	// = the running total, ≥ 2).
	EventToken
	// EventDone: the sequence finished; it follows the event of its last
	// token at the same instant. Tokens = final output length, Finish is
	// "stop" or "length".
	EventDone
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first_token"
	case EventToken:
		return "token"
	case EventDone:
		return "done"
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one observable change of one sequence. Events are produced by
// Advance in time order; events of the same instant come in admission
// order of their sequences, a sequence's token event before its done
// event.
type Event struct {
	Kind EventKind
	// ID is the request's ID as given to Submit.
	ID string
	// At is the engine time the event happened (the end of a step), which
	// is never later than the now passed to Advance.
	At time.Time
	// Tokens is the sequence's output tokens so far.
	Tokens int
	// Finish is set on EventDone: "length" when max_tokens (or the context
	// length) cut the answer, else "stop".
	Finish string
}

// Request is one generation request submitted to an Engine.
type Request struct {
	// ID identifies the request in events and Abort; unique among the
	// engine's live requests.
	ID string
	// Prompt is the text the output-length world model hashes (the chat
	// contents joined by JoinChat, or the completion prompt).
	Prompt string
	// Task selects the median output length; "" means DefaultTask.
	Task string
	// PromptTokens is the prompt size; 0 means routing.EstimateTokens(Prompt).
	PromptTokens int
	// MaxTokens caps the output; 0 means the context length minus the
	// prompt.
	MaxTokens int
	// IgnoreEOS makes the output exactly the cap (MaxTokens, or the context
	// length minus the prompt).
	IgnoreEOS bool
	// OutputTokens, when > 0, overrides the world model's length (still
	// capped); for replaying recorded traffic.
	OutputTokens int
}

// Ticket is what Submit decided about a request.
type Ticket struct {
	PromptTokens int
	// OutputTokens is the length the sequence will have when it completes
	// (unless aborted).
	OutputTokens int
	// Finish is the finish reason it will have: "stop" or "length".
	Finish string
}

// Errors of Submit.
var (
	// ErrDuplicateID means a live request already has the ID.
	ErrDuplicateID = errors.New("duplicate request id")
	// ErrPromptTooLong means the prompt leaves no room for one output token
	// in the context length (vLLM answers such requests with 400).
	ErrPromptTooLong = errors.New("prompt exceeds the context length")
)

// EngineConfig describes one instance.
type EngineConfig struct {
	// Tier holds the instance's parameters; it must be valid.
	Tier Tier
	// Lengths is the output-length world model; it must be valid.
	Lengths OutputLengths
	// Seed selects the world: the same seed gives the same lengths.
	Seed uint64
	// Start is the engine's initial time.
	Start time.Time
	// ZeroLatency makes every overhead, prefill and decode step take no
	// time (for measuring a gateway's own overhead); token counts and
	// metrics are unchanged.
	ZeroLatency bool
}

// Validate checks the configuration.
func (c *EngineConfig) Validate() error {
	if err := c.Tier.Validate(); err != nil {
		return err
	}
	return c.Lengths.Validate()
}

type seqState uint8

const (
	stateArriving seqState = iota // within ttft_overhead of submission
	stateWaiting                  // schedulable, behind max_num_seqs
	stateRunning                  // admitted: prefilling or decoding
	stateGone                     // finished or aborted
)

type seq struct {
	id        string
	prompt    int
	target    int
	finish    string
	tokens    int
	state     seqState
	submitted time.Time
	ready     time.Time // submitted + overhead
	admitted  time.Time
	firstTok  time.Time
	lastTok   time.Time
}

// Engine is one emulated vLLM instance: a deterministic state machine with
// no goroutines and no clock of its own. The caller owns time: it calls
// Submit and Abort at the current time, asks NextEvent when something will
// next happen, and calls Advance to move time forward and collect the
// events. Time never goes backwards: a now earlier than the engine's time
// is treated as the engine's time.
//
// Model (see README.md): a submitted request is schedulable after
// ttft_overhead_ms (off the GPU); it then waits FCFS. The engine works in
// steps. At each step boundary it admits waiting requests in order while
// fewer than max_num_seqs run. A step lasts
//
//	tpot(b) (if b > 0 sequences are decoding) + Σ prefill(p) of the sequences admitted at its start
//
// At the step's end every decoding sequence gains one token and every
// newly admitted one gets its first token; a sequence that reaches its
// length completes there and frees its slot for the next step. So
// prefills delay the step that carries them (no chunked prefill), and an
// arrival waits for the step in progress to end.
//
// An Engine is not safe for concurrent use.
type Engine struct {
	tier     Tier
	lengths  OutputLengths
	seed     uint64
	zero     bool
	kvCap    int
	overhead time.Duration
	now      time.Time // latest time the caller gave
	clock    time.Time // time of the last internal event processed
	stepEnd  time.Time
	busy     bool
	arriving []*seq // FIFO: ready times are non-decreasing
	waiting  []*seq // FIFO
	running  []*seq // admission order
	byID     map[string]*seq
	kvHeld   int // tokens held by running sequences (prompt + output)
	stats    Stats
}

// NewEngine returns an idle engine at cfg.Start.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		tier:    cfg.Tier,
		lengths: cfg.Lengths,
		seed:    cfg.Seed,
		zero:    cfg.ZeroLatency,
		kvCap:   cfg.Tier.KVCapacity(),
		now:     cfg.Start,
		clock:   cfg.Start,
		byID:    map[string]*seq{},
	}
	if !e.zero {
		e.overhead = cfg.Tier.Overhead()
	}
	e.stats = newStats()
	return e, nil
}

// Tier returns the instance's parameters.
func (e *Engine) Tier() *Tier { return &e.tier }

// Lengths returns the output-length world model the engine draws from.
func (e *Engine) Lengths() OutputLengths { return e.lengths }

// Now returns the engine's time: the latest time given to Submit, Abort or
// Advance.
func (e *Engine) Now() time.Time { return e.now }

// Plan returns what Submit would decide for r without submitting it:
// the prompt tokens, the output length and the finish reason.
func (e *Engine) Plan(r *Request) (Ticket, error) {
	p := r.PromptTokens
	if p <= 0 {
		p = routing.EstimateTokens(r.Prompt)
	}
	room := e.tier.ContextLen() - p
	if room < 1 {
		return Ticket{}, fmt.Errorf("%w: %d prompt tokens, max_model_len %d", ErrPromptTooLong, p, e.tier.ContextLen())
	}
	limit := room
	if r.MaxTokens > 0 && r.MaxTokens < limit {
		limit = r.MaxTokens
	}
	n := r.OutputTokens
	if n <= 0 {
		n = e.lengths.Natural(r.Prompt, e.tier.Model, r.Task, e.tier.Verbosity, e.seed)
	}
	if r.IgnoreEOS || n >= limit {
		// vLLM reports "length" whenever the cap ended the sequence, also
		// with ignore_eos.
		return Ticket{PromptTokens: p, OutputTokens: limit, Finish: "length"}, nil
	}
	return Ticket{PromptTokens: p, OutputTokens: n, Finish: "stop"}, nil
}

// Submit adds a request at time now. It becomes schedulable at now +
// ttft_overhead_ms. The returned Ticket tells its prompt and output
// lengths; its events come from later Advance calls.
func (e *Engine) Submit(now time.Time, r Request) (Ticket, error) {
	e.setNow(now)
	if _, dup := e.byID[r.ID]; dup {
		return Ticket{}, fmt.Errorf("%w: %q", ErrDuplicateID, r.ID)
	}
	tk, err := e.Plan(&r)
	if err != nil {
		return Ticket{}, err
	}
	s := &seq{id: r.ID, prompt: tk.PromptTokens, target: tk.OutputTokens, finish: tk.Finish,
		submitted: e.now, ready: e.now.Add(e.overhead)}
	e.byID[r.ID] = s
	e.arriving = append(e.arriving, s)
	e.stats.Submitted++
	return tk, nil
}

// Abort removes a live request (client cancel) at time now. It reports
// whether the ID was live. An aborted request produces no further events
// and does not count as a success; if it was running, the step in progress
// keeps its duration and its slot frees at the step's end.
func (e *Engine) Abort(now time.Time, id string) bool {
	e.setNow(now)
	s, ok := e.byID[id]
	if !ok {
		return false
	}
	delete(e.byID, id)
	switch s.state {
	case stateArriving:
		e.arriving = removeSeq(e.arriving, s)
	case stateWaiting:
		e.waiting = removeSeq(e.waiting, s)
	case stateRunning:
		// Left in e.running, marked gone; the step's end drops it.
		e.kvHeld -= s.prompt + s.tokens
	}
	s.state = stateGone
	e.stats.Aborted++
	return true
}

func removeSeq(q []*seq, s *seq) []*seq {
	for i, x := range q {
		if x == s {
			copy(q[i:], q[i+1:])
			q[len(q)-1] = nil
			return q[:len(q)-1]
		}
	}
	return q
}

// NextEvent returns the time of the engine's next internal event (the end
// of the step in progress, or, while idle, the moment the earliest arriving
// request becomes schedulable), and false when the engine has nothing to do
// until the next Submit. Advance to that time makes progress; it may yield
// no Event (a request became schedulable and a step started).
func (e *Engine) NextEvent() (time.Time, bool) {
	if e.busy {
		return e.stepEnd, true
	}
	if len(e.waiting) > 0 {
		return e.clock, true
	}
	if len(e.arriving) > 0 {
		t := e.arriving[0].ready
		if t.Before(e.clock) {
			t = e.clock
		}
		return t, true
	}
	return time.Time{}, false
}

// Advance moves the engine to time now, processing every internal event
// with a time <= now in time order, and appends the resulting events to
// out. Steps run back to back: a step that follows another starts at the
// previous step's end, however late Advance is called.
func (e *Engine) Advance(now time.Time, out []Event) []Event {
	e.setNow(now)
	for {
		t, ok := e.NextEvent()
		if !ok || t.After(e.now) {
			break
		}
		e.clock = t
		if e.busy {
			out = e.finishStep(out)
		}
		e.promote(t)
		e.startStep(t)
	}
	return out
}

// promote moves arriving requests whose overhead has passed by t into the
// waiting queue.
func (e *Engine) promote(t time.Time) {
	n := 0
	for n < len(e.arriving) && !e.arriving[n].ready.After(t) {
		s := e.arriving[n]
		s.state = stateWaiting
		e.waiting = append(e.waiting, s)
		n++
	}
	if n > 0 {
		clear(e.arriving[:n])
		e.arriving = e.arriving[n:]
	}
}

func (e *Engine) setNow(now time.Time) {
	if now.After(e.now) {
		e.now = now
	}
}

// startStep begins a step at t if there is work: it admits waiting
// sequences FCFS while fewer than max_num_seqs run and sets the step's end.
func (e *Engine) startStep(t time.Time) {
	decoding := len(e.running)
	var prefill time.Duration
	for len(e.waiting) > 0 && len(e.running) < e.tier.MaxNumSeqs {
		s := e.waiting[0]
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		s.state = stateRunning
		s.admitted = t
		e.running = append(e.running, s)
		e.kvHeld += s.prompt
		prefill += e.tier.Prefill(s.prompt)
		e.stats.Queue.Observe(t.Sub(s.ready).Seconds())
		e.stats.PromptTokens += uint64(s.prompt)
	}
	if len(e.running) == 0 {
		return
	}
	var d time.Duration
	if decoding > 0 {
		d = e.tier.TPOT(decoding)
	}
	d += prefill
	if e.zero {
		d = 0
	}
	e.busy = true
	e.stepEnd = t.Add(d)
	e.stats.Steps++
}

// finishStep ends the step in progress at e.stepEnd: one token for every
// running sequence, completion for those that reached their length.
func (e *Engine) finishStep(out []Event) []Event {
	t := e.stepEnd
	e.busy = false
	keep := e.running[:0]
	for _, s := range e.running {
		if s.state != stateRunning {
			continue // aborted during the step
		}
		s.tokens++
		e.kvHeld++
		e.stats.GenerationTokens++
		if s.tokens == 1 {
			s.firstTok = t
			e.stats.TTFT.Observe(t.Sub(s.submitted).Seconds())
			out = append(out, Event{Kind: EventFirstToken, ID: s.id, At: t, Tokens: 1})
		} else {
			e.stats.ITL.Observe(t.Sub(s.lastTok).Seconds())
			out = append(out, Event{Kind: EventToken, ID: s.id, At: t, Tokens: s.tokens})
		}
		s.lastTok = t
		if s.tokens < s.target {
			keep = append(keep, s)
			continue
		}
		s.state = stateGone
		delete(e.byID, s.id)
		e.kvHeld -= s.prompt + s.tokens
		e.stats.E2E.Observe(t.Sub(s.submitted).Seconds())
		if s.finish == "length" {
			e.stats.SuccessLength++
		} else {
			e.stats.SuccessStop++
		}
		out = append(out, Event{Kind: EventDone, ID: s.id, At: t, Tokens: s.tokens, Finish: s.finish})
	}
	clear(e.running[len(keep):])
	e.running = keep
	return out
}

// State is an instance's load as its /metrics gauges report it.
type State struct {
	// Running counts admitted sequences (prefilling or decoding).
	Running int
	// Waiting counts submitted requests not yet admitted (including those
	// still within ttft_overhead_ms of arrival).
	Waiting int
	// KVUsage is the KV-cache use in [0,1]: tokens held by running
	// sequences (prompt + output so far) / the tier's capacity.
	KVUsage float64
	// KVTokens is the tokens held.
	KVTokens int
}

// State returns the current gauges.
func (e *Engine) State() State {
	u := float64(e.kvHeld) / float64(e.kvCap)
	if u > 1 {
		u = 1
	}
	return State{Running: len(e.running) - e.goneRunning(), Waiting: len(e.arriving) + len(e.waiting), KVUsage: u, KVTokens: e.kvHeld}
}

func (e *Engine) goneRunning() int {
	n := 0
	for _, s := range e.running {
		if s.state != stateRunning {
			n++
		}
	}
	return n
}

// Stats returns a copy of the engine's counters and histograms.
func (e *Engine) Stats() Stats { return e.stats.clone() }

// Live reports how many requests are submitted and neither done nor
// aborted.
func (e *Engine) Live() int { return len(e.byID) }
