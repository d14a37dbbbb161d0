package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/loadgen"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// benchReport is what --out receives.
type benchReport struct {
	Router   *loadgen.Result   `json:"router"`
	Direct   *loadgen.Result   `json:"direct,omitempty"`
	Overhead *loadgen.Overhead `json:"overhead,omitempty"`
}

// runBench is `routebalance bench`: a vLLM `bench serve`-style load run
// against an OpenAI-compatible URL, optionally repeated directly against one
// emulated instance (--compare-url) to measure what the router adds.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := loadgen.DefaultConfig()
	url := fs.String("url", "", "base URL of the router (or any OpenAI-compatible server); a comma list spreads requests round-robin over several router replicas")
	key := fs.String("api-key", os.Getenv("OPENAI_API_KEY"), "API key (default $OPENAI_API_KEY)")
	data := fs.String("data", "", "JSONL prompts {id,prompt,scores?}")
	rate := fs.String("rate", "inf", "request rate λ in req/s (inf = all at once)")
	fs.IntVar(&cfg.N, "n", cfg.N, "number of requests")
	fs.Float64Var(&cfg.Burstiness, "burstiness", 1, "gamma shape of the inter-arrival gaps (1 = Poisson)")
	fs.BoolVar(&cfg.Stream, "stream", false, "stream responses (measures TTFT and ITL)")
	fs.IntVar(&cfg.MaxConcurrency, "max-concurrency", 0, "cap on requests in flight (0 = none)")
	goodput := fs.String("goodput", "", "goodput SLOs, e.g. ttft:500,tpot:50,e2el:5000 (ms)")
	out := fs.String("out", "", "write the results as JSON here")
	compare := fs.String("compare-url", "", "also run the same load directly against this emulated instance and report the router's added latency")
	fs.DurationVar(&cfg.DurationLimit, "duration-limit", 0, "stop sending new requests after this long (0 = none)")
	fs.StringVar(&cfg.Model, "model", "auto", "model to request from --url")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 0, "max_tokens per request (0 = not sent)")
	seed := fs.Uint64("seed", 1, "seed of the prompt sample and arrivals")
	preset := fs.String("preset", "", "send X-RouteBalance-Preset")
	weights := fs.String("weights", "", "send X-RouteBalance-Weights (quality=…,cost=…,latency=…)")
	fs.IntVar(&cfg.RouterPID, "router-pid", 0, "pid of the router process, to measure its CPU per request from /proc")
	clusterFile := fs.String("cluster", "", "cluster file whose prices give each request's cost (else the router's predicted-cost header)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *data == "" {
		fmt.Fprintln(stderr, "bench: --url and --data are required")
		fs.Usage()
		return errUsage
	}
	cfg.URL, cfg.APIKey, cfg.Seed = *url, *key, *seed
	r, err := parseRate(*rate)
	if err != nil {
		return err
	}
	cfg.Rate = r
	if *goodput != "" {
		if cfg.Goodput, err = metrics.ParseSLO(*goodput); err != nil {
			return err
		}
	}
	cfg.Headers = map[string]string{}
	if *preset != "" {
		cfg.Headers["X-RouteBalance-Preset"] = *preset
	}
	if *weights != "" {
		cfg.Headers["X-RouteBalance-Weights"] = *weights
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *clusterFile != "" {
		f, err := engine.LoadCluster(*clusterFile)
		if err != nil {
			return err
		}
		cfg.Prices = map[string]loadgen.Price{}
		for _, t := range f.Tiers {
			cfg.Prices[t.Model] = loadgen.Price{InPerMTok: t.PriceInPerMTok, OutPerMTok: t.PriceOutPerMTok}
		}
	}
	items, err := workload.ReadFile(*data)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	rep := benchReport{}
	fmt.Fprintf(stderr, "bench: %d requests at %s req/s to %s\n", cfg.N, *rate, cfg.URL)
	if rep.Router, err = loadgen.Run(ctx, cfg, items, log); err != nil {
		return err
	}
	printBench(stdout, cfg.URL, rep.Router)
	if *compare != "" {
		dcfg := cfg
		dcfg.URL, dcfg.Headers, dcfg.RouterPID = *compare, nil, 0
		if dcfg.Model, err = firstModel(ctx, *compare, *key); err != nil {
			return fmt.Errorf("compare-url: %w", err)
		}
		fmt.Fprintf(stderr, "bench: same load directly to %s (model %s)\n", dcfg.URL, dcfg.Model)
		if rep.Direct, err = loadgen.Run(ctx, dcfg, items, log); err != nil {
			return err
		}
		printBench(stdout, "direct "+dcfg.URL, rep.Direct)
		o := loadgen.Compare(rep.Router, rep.Direct)
		rep.Overhead = &o
		printOverhead(stdout, &o)
	}
	if *out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func parseRate(s string) (float64, error) {
	if s == "inf" || s == "" {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r <= 0 {
		return 0, fmt.Errorf("rate must be a positive number or inf, got %q", s)
	}
	return r, nil
}

// firstModel asks an OpenAI-compatible server which model it serves.
func firstModel(ctx context.Context, base, key string) (string, error) {
	u := strings.TrimRight(base, "/")
	if !strings.HasSuffix(u, "/v1") {
		u += "/v1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/models", nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(body.Data) == 0 {
		return "", fmt.Errorf("GET /v1/models: no models")
	}
	return body.Data[0].ID, nil
}

func printBench(w io.Writer, title string, r *loadgen.Result) {
	s := &r.Summary
	line := func(k string, v any) { fmt.Fprintf(w, "%-38s %v\n", k, v) }
	fmt.Fprintf(w, "============ Serving Benchmark Result: %s ============\n", title)
	line("Successful requests:", s.Completed)
	line("Failed requests:", s.Failed)
	line("Benchmark duration (s):", f2(s.DurationS))
	line("Total input tokens:", s.TotalInputTokens)
	line("Total generated tokens:", s.TotalOutputTokens)
	line("Request throughput (req/s):", f2(s.RequestThroughput))
	if r.Goodput != "" {
		line("Request goodput (req/s) ["+r.Goodput+"]:", f2(s.Goodput))
	}
	line("Output token throughput (tok/s):", f2(s.OutputThroughput))
	line("Total token throughput (tok/s):", f2(s.TotalTokThroughput))
	for _, m := range []struct {
		name string
		st   metrics.Stats
	}{{"TTFT", s.TTFTms}, {"TPOT", s.TPOTms}, {"ITL", s.ITLms}, {"E2EL", s.E2Ems}} {
		if m.st.N == 0 {
			continue
		}
		fmt.Fprintf(w, "---- %s (ms) mean %s  median %s  p99 %s\n", m.name, f2(m.st.Mean), f2(m.st.Median), f2(m.st.P99))
	}
	if s.QualityN > 0 {
		line("Mean quality (labels of served model):", fmt.Sprintf("%.4f (n=%d)", s.MeanQuality, s.QualityN))
	}
	if r.CostSource != "none" {
		line("Cost per request (USD, "+r.CostSource+"):", fmt.Sprintf("%.6f", s.CostPerRequestUSD))
	}
	if r.DecisionUs.N > 0 {
		line("Router decision (us) mean / p99:", f2(r.DecisionUs.Mean)+" / "+f2(r.DecisionUs.P99))
	}
	if len(r.Served) > 0 {
		line("Served models:", r.Served)
	}
	for msg, n := range r.Errors {
		line("Error ×"+strconv.Itoa(n)+":", msg)
	}
	line("Load generator CPU per request (ms):", f3(r.ClientCPUPerReqMs))
	if r.RouterCPUPerReqMs > 0 {
		line("Router CPU per request (ms):", f3(r.RouterCPUPerReqMs))
	}
}

func printOverhead(w io.Writer, o *loadgen.Overhead) {
	fmt.Fprintln(w, "============ Router overhead (router − direct) ============")
	fmt.Fprintf(w, "%-38s %s / %s / %s\n", "Added TTFT mean / p50 / p99 (ms):", f3(o.TTFTMeanMs), f3(o.TTFTP50Ms), f3(o.TTFTP99Ms))
	fmt.Fprintf(w, "%-38s %s / %s / %s\n", "Added E2EL mean / p50 / p99 (ms):", f3(o.E2EMeanMs), f3(o.E2EP50Ms), f3(o.E2EP99Ms))
	fmt.Fprintf(w, "%-38s %s vs %s\n", "Throughput router vs direct (req/s):", f2(o.RouterReqPerS), f2(o.DirectReqPerS))
	if o.RouterCPUPerReqMs > 0 {
		fmt.Fprintf(w, "%-38s %s\n", "Router CPU per request (ms):", f3(o.RouterCPUPerReqMs))
	}
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
