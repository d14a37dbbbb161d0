// Package loadgen is the live load generator behind `routebalance bench`:
// it replays labelled prompts against an OpenAI-compatible endpoint (the
// router or one emulated instance) with Poisson or gamma arrivals, the way
// vLLM's `bench serve` does, and measures every request with the official
// OpenAI Go SDK as the client. The bookkeeping lives in routing/sim/metrics
// so the simulator reports the same quantities.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// Price is an instance's price in USD per million tokens.
type Price struct {
	InPerMTok  float64
	OutPerMTok float64
}

// Config is one load run.
type Config struct {
	// URL is the server's base URL; "/v1" is appended unless present. A
	// comma-separated list spreads the requests over several servers
	// round-robin by request index, as a load balancer over router
	// replicas would.
	URL    string
	APIKey string
	// Model is sent as the request's model; default "auto".
	Model string
	// Rate is the mean request rate λ in req/s; 0 or +Inf sends all at once.
	Rate float64
	// Burstiness is the gamma shape of the gaps (1 = Poisson).
	Burstiness float64
	// N is the number of requests.
	N int
	// Stream requests SSE streaming (needed for TTFT and ITL).
	Stream bool
	// MaxConcurrency caps requests in flight; 0 = no cap.
	MaxConcurrency int
	// MaxTokens is sent as max_tokens when > 0.
	MaxTokens int
	// Goodput holds the SLO budgets of the goodput figure.
	Goodput metrics.SLO
	// DurationLimit stops sending new requests after this long; 0 = none.
	DurationLimit time.Duration
	// Seed fixes the prompt sample and the arrival times.
	Seed uint64
	// Headers are added to every request (e.g. X-RouteBalance-Preset).
	Headers map[string]string
	// RequestTimeout bounds one request; default 5 minutes.
	RequestTimeout time.Duration
	// Prices by served model name, for the cost of a request from its
	// usage; without a price the X-RouteBalance-Predicted-Cost-Usd header
	// is used.
	Prices map[string]Price
	// RouterPID, when > 0, names the router's process: its CPU time
	// (utime + stime from /proc/PID/stat) is measured across the run.
	RouterPID int
}

// DefaultConfig returns a Config with the defaults filled in.
func DefaultConfig() Config {
	return Config{Model: "auto", Burstiness: 1, N: 200, Rate: math.Inf(1), RequestTimeout: 5 * time.Minute}
}

// Validate reports a Config that cannot run.
func (c *Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("url is required")
	case c.N <= 0:
		return fmt.Errorf("n must be > 0, got %d", c.N)
	case c.Rate < 0 || math.IsNaN(c.Rate):
		return fmt.Errorf("rate must be >= 0, got %v", c.Rate)
	case c.Burstiness <= 0:
		return fmt.Errorf("burstiness must be > 0, got %v", c.Burstiness)
	case c.MaxConcurrency < 0:
		return fmt.Errorf("max-concurrency must be >= 0, got %d", c.MaxConcurrency)
	}
	return nil
}

// Result is a finished run.
type Result struct {
	Target string `json:"target"`
	Model  string `json:"model"`
	// Rate is λ as given ("inf" when everything was sent at once).
	Rate    string          `json:"request_rate"`
	Stream  bool            `json:"stream"`
	Sent    int             `json:"sent"`
	Goodput string          `json:"goodput_slo,omitempty"`
	Summary metrics.Summary `json:"summary"`
	// CostSource says how costs were obtained: "prices" (usage × the
	// price of the served model), "predicted" (the router's header), or
	// "none".
	CostSource string `json:"cost_source"`
	// DecisionUs summarises X-RouteBalance-Decision-Us over the requests
	// that carried it.
	DecisionUs metrics.Stats `json:"decision_us"`
	// Served counts requests per served model (X-RouteBalance-Model, or
	// the response's model field).
	Served map[string]int `json:"served_models"`
	// Errors counts failures by message (first 20 distinct).
	Errors map[string]int `json:"errors,omitempty"`
	// ClientCPUPerReqMs is this process's CPU time (getrusage) per sent
	// request: the load generator's own cost.
	ClientCPUPerReqMs float64 `json:"client_cpu_per_req_ms"`
	// RouterCPUPerReqMs is the router process's CPU per sent request, when
	// Config.RouterPID was given.
	RouterCPUPerReqMs float64          `json:"router_cpu_per_req_ms,omitempty"`
	Records           []metrics.Record `json:"-"`
}

// Run sends the workload and measures it. items are sampled to cfg.N with
// cfg.Seed. It returns when every sent request finished or ctx ended.
func Run(ctx context.Context, cfg Config, items []workload.Item, log *slog.Logger) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Model == "" {
		cfg.Model = "auto"
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Minute
	}
	conns := cfg.MaxConcurrency
	if conns <= 0 {
		conns = 512
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	var clients []openai.Client
	for _, u := range strings.Split(cfg.URL, ",") {
		clients = append(clients, openai.NewClient(
			option.WithBaseURL(baseURL(strings.TrimSpace(u))),
			option.WithAPIKey(cfg.APIKey),
			option.WithHTTPClient(&http.Client{Transport: tr}),
			option.WithMaxRetries(0),
		))
	}
	sample := workload.Sample(items, cfg.N, cfg.Seed)
	arrivals := workload.Arrivals(cfg.N, cfg.Rate, cfg.Burstiness, cfg.Seed)
	recs := make([]metrics.Record, cfg.N)
	meta := make([]reqMeta, cfg.N)

	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	cpu0 := selfCPU()
	var router0 time.Duration
	if cfg.RouterPID > 0 {
		var err error
		if router0, err = procCPU(cfg.RouterPID); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	sent := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
dispatch:
	for k := range cfg.N {
		at := arrivals[k]
		if cfg.DurationLimit > 0 && at > cfg.DurationLimit {
			break
		}
		if wait := at - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break dispatch
			case <-timer.C:
			}
		}
		if sem != nil {
			select {
			case <-ctx.Done():
				break dispatch
			case sem <- struct{}{}:
			}
		}
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
			defer cancel()
			recs[k], meta[k] = do(rctx, &clients[k%len(clients)], &cfg, &sample[k], time.Since(start))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	recs, meta = recs[:sent], meta[:sent]

	rate := "inf"
	if cfg.Rate > 0 && !math.IsInf(cfg.Rate, 1) {
		rate = strconv.FormatFloat(cfg.Rate, 'g', -1, 64)
	}
	res := &Result{Target: cfg.URL, Model: cfg.Model, Rate: rate, Stream: cfg.Stream, Sent: sent,
		Goodput: cfg.Goodput.String(), Served: map[string]int{}, Records: recs}
	if sent > 0 {
		res.ClientCPUPerReqMs = float64(selfCPU()-cpu0) / float64(time.Millisecond) / float64(sent)
		if cfg.RouterPID > 0 {
			if r1, err := procCPU(cfg.RouterPID); err == nil {
				res.RouterCPUPerReqMs = float64(r1-router0) / float64(time.Millisecond) / float64(sent)
			} else {
				log.Warn("router cpu", slog.Any("err", err))
			}
		}
	}
	var dec []float64
	priced, predicted := 0, 0
	for k := range recs {
		r, m := &recs[k], &meta[k]
		if !r.OK() {
			if res.Errors == nil {
				res.Errors = map[string]int{}
			}
			if _, ok := res.Errors[r.Err]; ok || len(res.Errors) < 20 {
				res.Errors[r.Err]++
			}
			continue
		}
		res.Served[r.Model]++
		if m.decisionUs >= 0 {
			dec = append(dec, m.decisionUs)
		}
		if p, ok := cfg.Prices[r.Model]; ok {
			r.CostUSD = (float64(r.PromptTokens)*p.InPerMTok + float64(r.OutputTokens)*p.OutPerMTok) / 1e6
			priced++
		} else if m.predictedCost >= 0 {
			r.CostUSD = m.predictedCost
			predicted++
		}
		if q, ok := sample[k].Quality(r.Model); ok {
			r.Quality, r.HasQuality = q, true
		}
	}
	switch {
	case priced > 0:
		res.CostSource = "prices"
	case predicted > 0:
		res.CostSource = "predicted"
	default:
		res.CostSource = "none"
	}
	res.DecisionUs = metrics.Summarize(dec)
	// The run lasts until the last request ends; requests never sent do
	// not stretch it.
	res.Summary = metrics.SummarizeRun(recs, cfg.Goodput, elapsed)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

type reqMeta struct {
	decisionUs    float64
	predictedCost float64
}

func baseURL(u string) string {
	u = strings.TrimRight(u, "/")
	if !strings.HasSuffix(u, "/v1") {
		u += "/v1"
	}
	return u + "/"
}

// do sends one request and measures it. sentAt is its send time relative to
// the start of the run.
func do(ctx context.Context, client *openai.Client, cfg *Config, it *workload.Item, sentAt time.Duration) (metrics.Record, reqMeta) {
	rec := metrics.Record{Start: sentAt}
	meta := reqMeta{decisionUs: -1, predictedCost: -1}
	params := openai.ChatCompletionNewParams{
		Model:    cfg.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(it.Prompt)},
	}
	if cfg.MaxTokens > 0 {
		params.MaxTokens = openai.Int(int64(cfg.MaxTokens))
	}
	var resp *http.Response
	opts := []option.RequestOption{option.WithResponseInto(&resp)}
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	t0 := time.Now()
	if !cfg.Stream {
		out, err := client.Chat.Completions.New(ctx, params, opts...)
		rec.E2E = time.Since(t0)
		rec.TTFT = rec.E2E
		readHeaders(resp, &rec, &meta)
		if err != nil {
			rec.Err = errText(err)
			return rec, meta
		}
		rec.PromptTokens = int(out.Usage.PromptTokens)
		rec.OutputTokens = int(out.Usage.CompletionTokens)
		if rec.Model == "" {
			rec.Model = out.Model
		}
		return rec, meta
	}
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	stream := client.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	var last time.Time
	chunks := 0
	model := ""
	for stream.Next() {
		c := stream.Current()
		now := time.Now()
		if model == "" {
			model = c.Model
		}
		if c.Usage.CompletionTokens > 0 || c.Usage.PromptTokens > 0 {
			rec.PromptTokens = int(c.Usage.PromptTokens)
			rec.OutputTokens = int(c.Usage.CompletionTokens)
		}
		if len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		if chunks == 0 {
			rec.TTFT = now.Sub(t0)
		} else {
			rec.ITL = append(rec.ITL, now.Sub(last))
		}
		last = now
		chunks++
	}
	rec.E2E = time.Since(t0)
	readHeaders(resp, &rec, &meta)
	if rec.Model == "" {
		rec.Model = model
	}
	if err := stream.Err(); err != nil {
		rec.Err = errText(err)
		return rec, meta
	}
	if chunks == 0 {
		rec.TTFT = rec.E2E
	}
	if rec.OutputTokens == 0 {
		rec.OutputTokens = chunks
	}
	return rec, meta
}

// readHeaders takes what the router says about its choice.
func readHeaders(resp *http.Response, rec *metrics.Record, meta *reqMeta) {
	if resp == nil {
		return
	}
	h := resp.Header
	rec.Model = h.Get("X-RouteBalance-Model")
	rec.Instance = h.Get("X-RouteBalance-Instance")
	if v, err := strconv.ParseFloat(h.Get("X-RouteBalance-Decision-Us"), 64); err == nil {
		meta.decisionUs = v
	}
	if v, err := strconv.ParseFloat(h.Get("X-RouteBalance-Predicted-Cost-Usd"), 64); err == nil {
		meta.predictedCost = v
	}
}

func errText(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if len(msg) > 120 {
			msg = msg[:120]
		}
		return fmt.Sprintf("HTTP %d: %s", apiErr.StatusCode, msg)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
