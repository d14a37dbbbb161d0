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
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	Spec InstanceSpec
	// Lengths is the output-length world model.
	Lengths OutputLengths
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
	return c.Lengths.Validate()
}

// Server is one emulated vLLM instance: an Engine driven in real time by
// the goroutine Run owns, and the http.Handler that speaks vLLM's API.
type Server struct {
	spec  InstanceSpec
	tier  Tier
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
	eng     *Engine
	streams map[string]*stream
	events  []Event
	fault   Fault
	dead    bool
	life    chan struct{} // closed when the instance dies; replaced on revive
	rng     *rand.Rand
	nextID  uint64
	created int64
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
	eng, err := NewEngine(EngineConfig{Tier: *cfg.Spec.Tier, Lengths: cfg.Lengths, Seed: cfg.Seed, Start: start, ZeroLatency: cfg.ZeroLatency})
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
	}
	if s.dead {
		close(s.life)
	}
	return s, nil
}

// Spec returns the instance's description.
func (s *Server) Spec() InstanceSpec { return s.spec }

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
		if ev.Kind == EventDone {
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
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	return s.eng.State()
}

// Stats returns the engine's counters and histograms now.
func (s *Server) Stats() Stats {
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
	if len(req.Messages) == 0 {
		s.fail(w, &badRequest{"messages", "messages must be a non-empty array"})
		return
	}
	contents := make([]string, 0, len(req.Messages))
	for i, m := range req.Messages {
		c, err := messageText(m.Content)
		if err != nil {
			s.fail(w, &badRequest{fmt.Sprintf("messages[%d].content", i), err.Error()})
			return
		}
		contents = append(contents, c)
	}
	if err := checkN(req.N); err != nil {
		s.fail(w, err)
		return
	}
	mt, err := checkMax("max_tokens", req.MaxTokens)
	if err != nil {
		s.fail(w, err)
		return
	}
	if req.MaxCompletionTokens != nil {
		if mt, err = checkMax("max_completion_tokens", req.MaxCompletionTokens); err != nil {
			s.fail(w, err)
			return
		}
	}
	s.serve(w, r, &job{chat: true, model: req.Model, prompt: JoinChat(contents), promptTokens: EstimateChatTokens(contents),
		maxTokens: mt, ignoreEOS: req.IgnoreEOS, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage})
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
	if err := checkN(req.N); err != nil {
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
	s.serve(w, r, &job{model: req.Model, prompt: prompt, promptTokens: max(EstimateTokens(prompt), 1),
		maxTokens: mt, ignoreEOS: req.IgnoreEOS, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage})
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		writeError(w, http.StatusBadRequest, br.param, br.msg)
		return
	}
	writeError(w, http.StatusInternalServerError, "", err.Error())
}

// serve runs a generation job: model check, faults, engine, response.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, j *job) {
	if j.model != "" && j.model != s.model {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("The model `%s` does not exist.", j.model)) // vLLM sends param null here
		return
	}
	ctx := r.Context()
	s.mu.Lock()
	f := s.fault
	fail := f.ErrorRate > 0 && s.rng.Float64() < f.ErrorRate
	s.mu.Unlock()
	if fail {
		writeError(w, f.status(), "", "injected fault: the instance failed this request")
		return
	}
	if f.StallMs > 0 && !s.sleepWorld(ctx, w, time.Duration(f.StallMs*float64(time.Millisecond))) {
		return
	}
	task := DefaultTask
	if s.tasks != nil {
		if t, ok := s.tasks.Task(j.prompt); ok {
			task = t
		}
	}

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
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		dropConnection(w)
		return
	}
	life := s.life
	s.nextID++
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	id := fmt.Sprintf("%s%d-%d", prefix, s.spec.Index, s.nextID)
	s.advanceLocked()
	tk, err := s.eng.Submit(s.worldNow(), Request{ID: id, Prompt: j.prompt, Task: task, PromptTokens: j.promptTokens,
		MaxTokens: j.maxTokens, IgnoreEOS: j.ignoreEOS})
	if err != nil {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "messages", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages: %v",
			s.tier.ContextLen(), j.promptTokens, err))
		return
	}
	st := &stream{notify: make(chan struct{}, 1)}
	s.streams[id] = st
	s.advanceLocked() // zero latency completes here
	s.mu.Unlock()
	s.poke()

	out := &responder{s: s, w: w, j: j, id: id, created: time.Now().Unix(), promptTokens: tk.PromptTokens,
		target: tk.OutputTokens, reason: tk.Finish, words: wordSource(j.prompt, s.model)}
	if j.stream {
		out.startStream()
	}
	for {
		s.mu.Lock()
		tokens, done, finish := st.tokens, st.done, st.finish
		s.mu.Unlock()
		if err := out.progress(tokens); err != nil {
			s.abort(id) // the client stopped reading
			return
		}
		if done {
			out.finish(tokens, finish)
			return
		}
		select {
		case <-st.notify:
		case <-ctx.Done():
			s.abort(id) // client went away
			return
		case <-life:
			s.abort(id)
			panic(http.ErrAbortHandler) // cut the connection mid-response
		case <-s.stop:
			s.abort(id)
			panic(http.ErrAbortHandler)
		}
	}
}

func (s *Server) abort(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.streams, id)
	s.eng.Abort(s.worldNow(), id)
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

// wordSource returns the deterministic filler text of an answer: token i
// is a word chosen by hash(model, prompt, i).
func wordSource(prompt, model string) func(i int) string {
	h := hashPrompt(0, model, prompt)
	return func(i int) string {
		x := splitmix(h + uint64(i)*0x9e3779b97f4a7c15)
		return fillerWords[x%uint64(len(fillerWords))]
	}
}

var fillerWords = strings.Fields(`the a of to and in is that for it as with on by this be are from at or an
which model answer value result step first then so we can each number two three therefore because
given let consider case sum total equal more less time data point example note thus following`)
