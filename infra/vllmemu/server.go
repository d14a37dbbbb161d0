package vllmemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// TaskLookup tells the task of a prompt for the output-length world model.
// Implementations must be safe for concurrent use.
type TaskLookup interface {
	// Task returns the prompt's task and whether it is known.
	Task(prompt string) (string, bool)
}

// ServerConfig configures one emulated instance.
type ServerConfig struct {
	// Spec is the instance (its index, ID and tier).
	Spec engine.InstanceSpec
	// Lengths is the output-length world model.
	Lengths engine.OutputLengths
	// Seed selects the world (output lengths, injected-error draws).
	Seed uint64
	// TimeScale is wall seconds per world second: 0.1 runs the world ten
	// times faster. 0 means 1.
	TimeScale float64
	// ZeroLatency answers with no modelled delay (token counts unchanged).
	ZeroLatency bool
	// Tasks maps prompts to tasks; nil means every prompt is "default".
	Tasks TaskLookup
	// Fault is the initial fault.
	Fault Fault
	// Log receives warnings; nil discards.
	Log *slog.Logger
	// Judge, when set, makes the instance a judge-kind instance
	// (judge.go).
	Judge *Judge
	// Vocab is the tokenizer table /tokenize fills and /detokenize reads;
	// share one across a cluster's instances. nil gives the instance its own.
	Vocab *Vocab
}

// Validate checks the configuration.
func (c *ServerConfig) Validate() error {
	if c.Spec.Tier == nil {
		return errors.New("server: no tier")
	}
	if err := c.Spec.Tier.Validate(); err != nil {
		return err
	}
	if math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) || c.TimeScale < 0 {
		return fmt.Errorf("time scale must be a number > 0, got %v", c.TimeScale)
	}
	if err := c.Fault.Validate(); err != nil {
		return fmt.Errorf("fault: %w", err)
	}
	if c.Judge != nil {
		if err := c.Judge.Validate(); err != nil {
			return err
		}
	}
	return c.Lengths.Validate()
}

// Server is one emulated vLLM instance: an Engine driven in real time by
// the goroutine Run owns, and the http.Handler that speaks vLLM's API.
type Server struct {
	spec  engine.InstanceSpec
	tier  engine.Tier
	model string
	scale float64
	tasks TaskLookup
	log   *slog.Logger
	start time.Time // wall and world epoch
	wake  chan struct{}
	stop  chan struct{} // closed when Run returns
	// stalled counts requests held by an injected stall.
	stalled atomic.Int64

	mu      sync.Mutex
	eng     *engine.Engine
	streams map[string]*stream
	events  []engine.Event
	fault   Fault
	dead    bool
	life    chan struct{} // closed when the instance dies; replaced on revive
	rng     *rand.Rand
	nextID  uint64
	created int64
	vocab   *Vocab
	judge   *Judge
	seed    uint64
	// judgedMu guards judged: judgments so far per (model, prompt), the
	// n of each one's flip draw.
	judgedMu sync.Mutex
	judged   map[string]uint64
}

// stream is a request's progress as the driver reports it; fields are
// guarded by Server.mu.
type stream struct {
	notify chan struct{} // cap 1: "something changed"
	tokens int
	done   bool
	finish string
}

// NewServer returns an instance ready to be Run and served.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	scale := cfg.TimeScale
	if scale == 0 {
		scale = 1
	}
	start := time.Now()
	eng, err := engine.NewEngine(engine.EngineConfig{Tier: *cfg.Spec.Tier, Lengths: cfg.Lengths, Seed: cfg.Seed, Start: start, ZeroLatency: cfg.ZeroLatency})
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		spec: cfg.Spec, tier: *cfg.Spec.Tier, model: cfg.Spec.Tier.Model, scale: scale, tasks: cfg.Tasks,
		log: log.With(slog.String("instance", cfg.Spec.ID)), start: start,
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
		eng: eng, streams: map[string]*stream{}, fault: cfg.Fault, dead: cfg.Fault.Dead, life: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Spec.Index)+1)),
		created: start.Unix(),
		vocab:   cfg.Vocab,
		judge:   cfg.Judge,
		seed:    cfg.Seed,
	}
	if s.vocab == nil {
		s.vocab = NewVocab()
	}
	if s.dead {
		close(s.life)
	}
	return s, nil
}

// Spec returns the instance's description.
func (s *Server) Spec() engine.InstanceSpec { return s.spec }

// worldNow maps the wall clock to engine time.
func (s *Server) worldNow() time.Time {
	return s.start.Add(time.Duration(float64(time.Since(s.start)) / s.scale))
}

// wallDelay is how long to wait in wall time until world time t.
func (s *Server) wallDelay(t time.Time) time.Duration {
	d := time.Duration(float64(t.Sub(s.worldNow())) * s.scale)
	if d < 0 {
		return 0
	}
	return d
}

// Run drives the engine in real time until ctx ends, then aborts every
// live request. It must be called exactly once.
func (s *Server) Run(ctx context.Context) error {
	defer close(s.stop)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.advanceLocked()
		next, ok := s.eng.NextEvent()
		s.mu.Unlock()
		if ok {
			timer.Reset(s.wallDelay(next))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			now := s.worldNow()
			for id, st := range s.streams {
				s.eng.Abort(now, id)
				delete(s.streams, id)
				notify(st)
			}
			s.mu.Unlock()
			return nil
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// advanceLocked moves the engine to now and hands events to their streams.
func (s *Server) advanceLocked() {
	s.events = s.eng.Advance(s.worldNow(), s.events[:0])
	for _, ev := range s.events {
		st := s.streams[ev.ID]
		if st == nil {
			continue
		}
		st.tokens = ev.Tokens
		if ev.Kind == engine.EventDone {
			st.done, st.finish = true, ev.Finish
			delete(s.streams, ev.ID)
		}
		notify(st)
	}
}

func notify(st *stream) {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Fault returns the current fault.
func (s *Server) Fault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

// SetFault replaces the fault. Dying cuts every in-flight request off;
// reviving accepts requests again.
func (s *Server) SetFault(f Fault) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case f.Dead && !s.dead:
		close(s.life)
	case !f.Dead && s.dead:
		s.life = make(chan struct{})
	}
	s.dead = f.Dead
	s.fault = f
	return nil
}

// Stalled returns how many requests an injected stall is holding back
// from the engine right now.
func (s *Server) Stalled() int { return int(s.stalled.Load()) }

// State returns the engine's gauges now.
func (s *Server) State() engine.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	return s.eng.State()
}

// Stats returns the engine's counters and histograms now.
func (s *Server) Stats() engine.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	return s.eng.Stats()
}

// Handler returns the HTTP API of the instance.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.live(s.handleChat))
	mux.HandleFunc("POST /v1/completions", s.live(s.handleCompletion))
	mux.HandleFunc("GET /v1/models", s.live(s.handleModels))
	mux.HandleFunc("POST /v1/embeddings", s.live(s.handleEmbeddings))
	mux.HandleFunc("POST /v1/responses", s.live(s.handleResponses))
	mux.HandleFunc("POST /tokenize", s.live(s.handleTokenize))
	mux.HandleFunc("POST /detokenize", s.live(s.handleDetokenize))
	mux.HandleFunc("GET /health", s.live(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	mux.HandleFunc("GET /metrics", s.live(s.handleMetrics))
	mux.HandleFunc("GET /admin/fault", s.handleGetFault)
	mux.HandleFunc("POST /admin/fault", s.handleSetFault)
	mux.HandleFunc("/", s.live(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "Not Found")
	}))
	return mux
}

func (s *Server) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// live wraps a handler: a dead instance drops the connection unanswered.
func (s *Server) live(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.isDead() {
			dropConnection(w)
			return
		}
		h(w, r)
	}
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // net/http closes the connection quietly
}

func (s *Server) handleGetFault(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Fault())
}

func (s *Server) handleSetFault(w http.ResponseWriter, r *http.Request) {
	var p FaultPatch
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "", "invalid fault: "+err.Error())
		return
	}
	f := p.Apply(s.Fault())
	if err := s.SetFault(f); err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	s.log.Info("fault set", slog.Float64("error_rate", f.ErrorRate), slog.Int("error_status", f.ErrorStatus),
		slog.Float64("stall_ms", f.StallMs), slog.Bool("dead", f.Dead))
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelCard{{
		ID: s.model, Object: "model", Created: s.created, OwnedBy: "vllm", Root: s.model, MaxModelLen: s.tier.ContextLen(),
	}}})
}

// job is a parsed generation request.
type job struct {
	chat         bool
	model        string
	prompt       string // what the world model hashes
	promptTokens int
	maxTokens    int
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	n            int            // choices, ≥ 1
	logprobs     bool           // per-token logprobs in the answer
	topLogprobs  int            // alternatives per token
	tool         *toolPlan      // a tool call the answer must make
	schema       map[string]any // response_format's schema
}

// structured returns choice i's structured answer (tool arguments or a
// response_format document), or "" for free text.
func (j *job) structured(model string, i int) (string, error) {
	switch {
	case j.tool != nil:
		return generateJSON(model, j.prompt, i, j.tool.schema, "tools")
	case j.schema != nil:
		return generateJSON(model, j.prompt, i, j.schema, "response_format")
	}
	return "", nil
}

const maxBody = 8 << 20

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return &badRequest{"", "reading body: " + err.Error()}
	}
	if len(b) > maxBody {
		return &badRequest{"", "request body too large"}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &badRequest{"", "invalid JSON body: " + err.Error()}
	}
	return nil
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	j, err := s.chatJob(&req)
	if err != nil {
		s.fail(w, err)
		return
	}
	if s.judge != nil {
		if _, _, ok := rubricTexts(j.prompt); ok {
			s.serveJudgment(w, j, j.prompt)
			return
		}
	}
	s.serve(w, r, j)
}

// chatJob validates a chat request and turns it into a job.
func (s *Server) chatJob(req *chatRequest) (*job, error) {
	if len(req.Messages) == 0 {
		return nil, &badRequest{"messages", "messages must be a non-empty array"}
	}
	contents := make([]string, 0, len(req.Messages))
	for i, m := range req.Messages {
		c, err := messageText(m.Content)
		if err != nil {
			return nil, &badRequest{fmt.Sprintf("messages[%d].content", i), err.Error()}
		}
		contents = append(contents, c)
	}
	n, err := checkN(req.N)
	if err != nil {
		return nil, err
	}
	mt, err := checkMax("max_tokens", req.MaxTokens)
	if err != nil {
		return nil, err
	}
	if req.MaxCompletionTokens != nil {
		if mt, err = checkMax("max_completion_tokens", req.MaxCompletionTokens); err != nil {
			return nil, err
		}
	}
	top := 0
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs {
			return nil, &badRequest{"top_logprobs", fmt.Sprintf("top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *req.TopLogprobs)}
		}
		if !req.Logprobs {
			return nil, &badRequest{"top_logprobs", "top_logprobs needs logprobs set to true"}
		}
		top = *req.TopLogprobs
	}
	prompt := engine.JoinChat(contents)
	tool, err := planTools(req.Tools, req.ToolChoice, s.model, prompt)
	if err != nil {
		return nil, err
	}
	schema, err := formatSchema(req.ResponseFormat)
	if err != nil {
		return nil, err
	}
	return &job{chat: true, model: req.Model, prompt: prompt, promptTokens: routing.EstimateChatTokens(contents),
		maxTokens: mt, ignoreEOS: req.IgnoreEOS, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		n: n, logprobs: req.Logprobs, topLogprobs: top, tool: tool, schema: schema}, nil
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	prompt, err := completionPrompt(req.Prompt)
	if err != nil {
		s.fail(w, &badRequest{"prompt", err.Error()})
		return
	}
	n, err := checkN(req.N)
	if err != nil {
		s.fail(w, err)
		return
	}
	mt, err := checkMax("max_tokens", req.MaxTokens)
	if err != nil {
		s.fail(w, err)
		return
	}
	if req.MaxTokens == nil {
		mt = completionDefaultMaxTokens
	}
	j := &job{model: req.Model, prompt: prompt, promptTokens: max(routing.EstimateTokens(prompt), 1),
		maxTokens: mt, ignoreEOS: req.IgnoreEOS, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, n: n}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxTopLogprobs {
			s.fail(w, &badRequest{"logprobs", fmt.Sprintf("logprobs must be between 0 and %d, got %d", maxTopLogprobs, *req.Logprobs)})
			return
		}
		j.logprobs, j.topLogprobs = true, *req.Logprobs
	}
	s.serve(w, r, j)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		writeError(w, http.StatusBadRequest, br.param, br.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, "", err.Error())
}

// admit runs the checks every request to the engine passes first: the
// served model, the injected error rate and stall. false means the
// request was answered (or dropped) here.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, model string) bool {
	if !s.servesModel(w, model) {
		return false
	}
	s.mu.Lock()
	f := s.fault
	fail := f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate
	s.mu.Unlock()
	if fail {
		writeError(w, f.status(), "", "injected fault: the instance failed this request")
		return false
	}
	if f.StallMs > 0 && !s.sleepWorld(r.Context(), w, time.Duration(f.StallMs*float64(time.Millisecond))) {
		return false
	}
	return true
}

// servesModel answers 404 (vLLM's body, param null) unless model is empty
// or the instance's model.
func (s *Server) servesModel(w http.ResponseWriter, model string) bool {
	if model != "" && model != s.model {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("The model `%s` does not exist.", model))
		return false
	}
	return true
}

// submitOr submits reqs like submit; when that fails it answers the
// client itself (a dead instance drops the connection, anything else is
// a 400 about param) and returns nil.
func (s *Server) submitOr(w http.ResponseWriter, prefix string, reqs []engine.Request, param string) *submitted {
	sub, err := s.submit(prefix, reqs)
	switch {
	case errors.Is(err, errDead):
		dropConnection(w)
		return nil
	case err != nil:
		s.fail(w, &badRequest{param, err.Error()})
		return nil
	}
	return sub
}

func (s *Server) taskOf(prompt string) string {
	if s.tasks != nil {
		if t, ok := s.tasks.Task(prompt); ok {
			return t
		}
	}
	return engine.DefaultTask
}

// submitted is a job's engine sequences, one per choice.
type submitted struct {
	ids     []string
	streams []*stream
	notify  chan struct{}
	life    chan struct{}
	tickets []engine.Ticket
}

// submit puts reqs into the engine under ids prefix-<k>[-c<i>] and
// registers their streams; on error nothing stays submitted. It returns
// errDead when the instance has died.
func (s *Server) submit(prefix string, reqs []engine.Request) (*submitted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil, errDead
	}
	s.nextID++
	base := fmt.Sprintf("%s%d-%d", prefix, s.spec.Index, s.nextID)
	sub := &submitted{notify: make(chan struct{}, 1), life: s.life}
	s.advanceLocked()
	now := s.worldNow()
	for i, rq := range reqs {
		rq.ID = base
		if i > 0 {
			rq.ID = fmt.Sprintf("%s-c%d", base, i)
		}
		tk, err := s.eng.Submit(now, rq)
		if err != nil {
			for _, id := range sub.ids {
				s.eng.Abort(now, id)
				delete(s.streams, id)
			}
			return nil, err
		}
		st := &stream{notify: sub.notify}
		s.streams[rq.ID] = st
		sub.ids, sub.streams, sub.tickets = append(sub.ids, rq.ID), append(sub.streams, st), append(sub.tickets, tk)
	}
	s.advanceLocked() // zero latency completes here
	s.poke()
	return sub, nil
}

var errDead = errors.New("instance is dead")

// await follows sub until every sequence is done, calling progress with
// each sequence's tokens so far after every change. It returns false when
// the request ended early (client gone or progress failed); the sequences
// are then aborted. An instance that dies or stops cuts the connection.
func (s *Server) await(ctx context.Context, sub *submitted, progress func(tokens []int) error) ([]int, bool) {
	tokens := make([]int, len(sub.ids))
	for {
		s.mu.Lock()
		all := true
		for i, st := range sub.streams {
			tokens[i] = st.tokens
			all = all && st.done
		}
		s.mu.Unlock()
		if err := progress(tokens); err != nil {
			s.abort(sub.ids...) // the client stopped reading
			return nil, false
		}
		if all {
			return tokens, true
		}
		select {
		case <-sub.notify:
		case <-ctx.Done():
			s.abort(sub.ids...) // client went away
			return nil, false
		case <-sub.life:
			s.abort(sub.ids...)
			panic(http.ErrAbortHandler) // cut the connection mid-response
		case <-s.stop:
			s.abort(sub.ids...)
			panic(http.ErrAbortHandler)
		}
	}
}

// serve runs a generation job: model check, faults, engine, response.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, j *job) {
	if s.tier.IsEmbedding() {
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("The model `%s` is an embedding model and does not support this API.", s.model))
		return
	}
	if !s.admit(w, r, j.model) {
		return
	}
	task := s.taskOf(j.prompt)
	if ctxLen := s.tier.ContextLen(); j.promptTokens+j.maxTokens > ctxLen || j.promptTokens >= ctxLen {
		param := "max_tokens"
		if j.promptTokens >= ctxLen {
			param = "messages"
		}
		writeError(w, http.StatusBadRequest, param, fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			ctxLen, j.promptTokens+j.maxTokens, j.promptTokens, j.maxTokens))
		return
	}
	choices := make([]*choiceOut, j.n)
	reqs := make([]engine.Request, j.n)
	for i := range choices {
		c := &choiceOut{index: i}
		rq := engine.Request{Prompt: j.prompt, Task: task, PromptTokens: j.promptTokens, MaxTokens: j.maxTokens, IgnoreEOS: j.ignoreEOS}
		if i > 0 {
			// Extra choices fork after the shared prefill (as vLLM's n
			// sampling does): their own length draw, one prompt token.
			rq.Prompt = j.prompt + "\x00choice " + strconv.Itoa(i)
			rq.PromptTokens = 1
			if rq.MaxTokens == 0 {
				rq.MaxTokens = s.tier.ContextLen() - j.promptTokens
			}
		}
		forced, err := j.structured(s.model, i)
		if err != nil {
			s.fail(w, err)
			return
		}
		if forced != "" {
			c.pieces = splitPieces(forced, max(1, routing.EstimateTokens(forced)))
			limit := len(c.pieces)
			if j.maxTokens > 0 && j.maxTokens < limit {
				limit = j.maxTokens
			}
			rq.MaxTokens, rq.IgnoreEOS = limit, true
		} else {
			c.text = newTextSource(s.model, j.prompt, i)
		}
		if j.tool != nil {
			c.tool = j.tool.name
		}
		choices[i], reqs[i] = c, rq
	}
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	sub, err := s.submit(prefix, reqs)
	if errors.Is(err, errDead) {
		dropConnection(w)
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "messages", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages: %v",
			s.tier.ContextLen(), j.promptTokens, err))
		return
	}
	for i, c := range choices {
		tk := sub.tickets[i]
		c.target, c.reason = tk.OutputTokens, tk.Finish
		if c.pieces != nil {
			c.reason = "length"
			if c.target >= len(c.pieces) {
				c.reason = "stop"
				if c.tool != "" {
					c.reason = "tool_calls"
				}
			}
		}
		if c.tool != "" {
			c.toolID = toolCallID(sub.ids[0], i)
		}
	}
	out := &responder{s: s, w: w, j: j, id: sub.ids[0], created: time.Now().Unix(), promptTokens: sub.tickets[0].PromptTokens, choices: choices}
	if j.stream {
		out.startStream()
	}
	tokens, ok := s.await(r.Context(), sub, func(tokens []int) error {
		for i, c := range choices {
			if err := out.progress(c, tokens[i]); err != nil {
				return err
			}
		}
		if j.stream {
			out.flush()
		}
		return out.err
	})
	if ok {
		out.finish(tokens)
	}
}

func (s *Server) abort(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.streams, id)
		s.eng.Abort(s.worldNow(), id)
	}
	s.poke()
}

// sleepWorld waits d of world time; false means the request ended (and
// was answered or dropped).
func (s *Server) sleepWorld(ctx context.Context, w http.ResponseWriter, d time.Duration) bool {
	s.stalled.Add(1)
	defer s.stalled.Add(-1)
	t := time.NewTimer(time.Duration(float64(d) * s.scale))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.stop:
		writeError(w, http.StatusServiceUnavailable, "", "instance shutting down")
		return false
	}
}
