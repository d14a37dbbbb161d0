package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
	"github.com/routebalance/routebalance/routing/latency"
)

// profileColumns is the header of a sweep CSV (the columns
// scripts/train_tpot.py reads are running, waiting, kv_usage,
// pending_decode_tokens, prompt_tokens, tpot_s, ttft_s).
var profileColumns = []string{"rate", "t_dispatch_s", "running", "waiting", "kv_usage", "prompt_tokens",
	"pending_decode_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "metrics_age_s", "error"}

// runProfile runs a QPS sweep against one instance, or (`profile eval`)
// scores latency models on a sweep's held-out rows.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "eval" {
		return runProfileEval(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "base URL of the instance (vLLM or the emulator), e.g. http://127.0.0.1:8000 (required)")
	model := fs.String("model", "", "served model name (required)")
	ratesFlag := fs.String("rates", "1,2,4,8,16", "request rates to sweep, requests per (emulated) second")
	duration := fs.Duration("duration", 60*time.Second, "arrival window per rate, in (emulated) time")
	out := fs.String("out", "", "sweep CSV to write (required)")
	promptsFile := fs.String("prompts", "", "JSON lines with a \"prompt\" field to draw prompts from (default: built-in synthetic prompts)")
	maxTokens := fs.Int("max-tokens", 0, "max_tokens per request (0: not sent)")
	scrape := fs.Duration("scrape", 50*time.Millisecond, "/metrics scrape interval (wall time)")
	timeScale := fs.Float64("time-scale", 1, "wall seconds per emulated second of the endpoint (the emulator's --time-scale); rates and times are converted")
	seed := fs.Uint64("seed", 1, "arrival and prompt seed")
	maxInflight := fs.Int("max-inflight", 1024, "cap on requests in flight (arrivals beyond it are dropped and counted)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *endpoint == "" || *model == "" || *out == "" || *duration <= 0 || !(*timeScale > 0) || *maxInflight < 1 {
		fmt.Fprintln(stderr, "profile: --endpoint, --model, --out are required; --duration and --time-scale must be > 0")
		return errUsage
	}
	rates, err := parseRates(*ratesFlag)
	if err != nil {
		fmt.Fprintf(stderr, "profile: %v\n", err)
		return errUsage
	}
	prompts, err := loadProfilePrompts(*promptsFile)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	if err := w.Write(profileColumns); err != nil {
		return err
	}
	p := &profiler{endpoint: strings.TrimRight(*endpoint, "/"), model: *model, maxTokens: *maxTokens,
		scale: *timeScale, http: &http.Client{Timeout: 10 * time.Minute}}
	base := strings.TrimSuffix(p.endpoint, "/v1")
	p.client = openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithMaxRetries(0), option.WithAPIKey("profile"),
		option.WithHTTPClient(p.http))
	p.metricsURL = base + "/metrics"
	if _, err := p.scrapeOnce(ctx); err != nil {
		return fmt.Errorf("profile: %s: %w", p.metricsURL, err)
	}
	rng := rand.New(rand.NewPCG(*seed, 0x5eed))
	total := 0
	for _, r := range rates {
		total += int(math.Ceil(r * duration.Seconds()))
	}
	bar := newProgress(stderr, "profile", total, *quiet)
	var all []sweepRow
	for _, rate := range rates {
		rows, dropped, err := p.sweep(ctx, rate, *duration, *scrape, *maxInflight, prompts, rng, bar)
		if err != nil {
			bar.finish()
			return err
		}
		all = append(all, rows...)
		if dropped > 0 {
			fmt.Fprintf(stderr, "\nprofile: rate %g: %d arrivals dropped at --max-inflight %d\n", rate, dropped, *maxInflight)
		}
	}
	bar.finish()
	var nOK int
	for _, r := range all {
		if err := w.Write(r.csv()); err != nil {
			return err
		}
		if r.err == "" {
			nOK++
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "profile: %d requests (%d ok) over rates %v, written to %s\n", len(all), nOK, rates, *out)
	return nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(v > 0) || v > 10000 {
			return nil, fmt.Errorf("--rates: %q is not a rate in (0, 10000]", part)
		}
		out = append(out, v)
	}
	return out, nil
}

// loadProfilePrompts reads prompts, or makes synthetic ones of varied
// length when path is empty.
func loadProfilePrompts(path string) ([]string, error) {
	if path == "" {
		words := strings.Fields("the quick brown fox jumps over the lazy dog while a router balances load across many instances of language models")
		var out []string
		for i := 0; i < 64; i++ {
			var b strings.Builder
			n := 8 + (i*37)%600
			for j := 0; j < n; j++ {
				b.WriteString(words[(i+j)%len(words)])
				b.WriteByte(' ')
			}
			out = append(out, b.String())
		}
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []string
	for sc.Scan() {
		var l struct {
			Prompt string `json:"prompt"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Prompt != "" {
			out = append(out, l.Prompt)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	return out, sc.Err()
}

type profiler struct {
	endpoint, model, metricsURL string
	maxTokens                   int
	scale                       float64
	http                        *http.Client
	client                      openai.Client
}

// snapshot is one /metrics reading.
type snapshot struct {
	at                     time.Time
	running, waiting, kvUs float64
}

// sweepRow is one request of a sweep.
type sweepRow struct {
	rate                  float64
	dispatch              time.Time // wall
	tDispatch             float64   // emulated seconds since the rate began
	snap                  snapshot
	promptTokens          int
	outputTokens          int
	ttft, e2e             float64 // emulated seconds
	firstAt, doneAt       time.Time
	pendingDecode         float64
	err                   string
	promptTokensEstimated bool
	scale                 float64
}

func (r *sweepRow) tpot() float64 {
	if r.outputTokens <= 1 || r.err != "" {
		return 0
	}
	return (r.e2e - r.ttft) / float64(r.outputTokens-1)
}

func (r *sweepRow) csv() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 7, 64) }
	return []string{f(r.rate), f(r.tDispatch), f(r.snap.running), f(r.snap.waiting), f(r.snap.kvUs),
		strconv.Itoa(r.promptTokens), f(r.pendingDecode), strconv.Itoa(r.outputTokens),
		f(r.ttft), f(r.tpot()), f(r.e2e), f(r.dispatch.Sub(r.snap.at).Seconds() / r.scale), r.err}
}

// sweep sends Poisson arrivals at rate (per emulated second) for duration
// and waits for every request to finish.
func (p *profiler) sweep(ctx context.Context, rate float64, duration, scrapeEvery time.Duration, maxInflight int,
	prompts []string, rng *rand.Rand, bar *progress) ([]sweepRow, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		latest snapshot
		wg     sync.WaitGroup
	)
	// The scraper goroutine is owned by this sweep and stops with ctx.
	scrapeDone := make(chan struct{})
	go func() {
		defer close(scrapeDone)
		t := time.NewTicker(scrapeEvery)
		defer t.Stop()
		for {
			if s, err := p.scrapeOnce(ctx); err == nil {
				mu.Lock()
				latest = s
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	wallRate := rate / p.scale
	end := start.Add(time.Duration(float64(duration) * p.scale))
	var rows []*sweepRow
	inflight := make(chan struct{}, maxInflight)
	dropped, sent := 0, 0
	_ = sent
	next := start
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / wallRate * float64(time.Second)))
		if next.After(end) {
			break
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, 0, ctx.Err()
		case <-time.After(time.Until(next)):
		}
		select {
		case inflight <- struct{}{}:
		default:
			dropped++
			continue
		}
		prompt := prompts[rng.IntN(len(prompts))]
		mu.Lock()
		row := &sweepRow{rate: rate, dispatch: time.Now(), snap: latest, scale: p.scale}
		mu.Unlock()
		row.tDispatch = row.dispatch.Sub(start).Seconds() / p.scale
		rows = append(rows, row)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inflight }()
			p.request(ctx, prompt, row)
		}()
		sent++
		bar.add(1)
	}
	wg.Wait()
	cancel()
	<-scrapeDone
	out := make([]sweepRow, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	fillPending(out, p.scale)
	return out, dropped, nil
}

// request streams one chat completion and records its latencies.
func (p *profiler) request(ctx context.Context, prompt string, row *sweepRow) {
	params := openai.ChatCompletionNewParams{
		Model:         openai.ChatModel(p.model),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if p.maxTokens > 0 {
		params.MaxTokens = openai.Int(int64(p.maxTokens))
	}
	stream := p.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	chunks := 0
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			if row.firstAt.IsZero() {
				row.firstAt = time.Now()
			}
			chunks++
		}
		if c.Usage.CompletionTokens > 0 {
			row.outputTokens = int(c.Usage.CompletionTokens)
			row.promptTokens = int(c.Usage.PromptTokens)
		}
	}
	row.doneAt = time.Now()
	if err := stream.Err(); err != nil {
		row.err = strings.ReplaceAll(err.Error(), "\n", " ")
		return
	}
	if row.outputTokens == 0 {
		row.outputTokens = chunks
		row.promptTokens = len(strings.Fields(prompt)) * 4 / 3
		row.promptTokensEstimated = true
	}
	if row.firstAt.IsZero() {
		row.firstAt = row.doneAt
	}
	row.ttft = row.firstAt.Sub(row.dispatch).Seconds() / p.scale
	row.e2e = row.doneAt.Sub(row.dispatch).Seconds() / p.scale
}

// fillPending sets each row's pending decode tokens: the output tokens the
// requests in flight at its dispatch still had to generate, assuming each
// streams its tokens evenly between its first token and its end. This is
// the quantity the scheduler's dead reckoning tracks.
func fillPending(rows []sweepRow, scale float64) {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return rows[idx[a]].dispatch.Before(rows[idx[b]].dispatch) })
	for _, i := range idx {
		t := rows[i].dispatch
		var pending float64
		for _, j := range idx {
			o := &rows[j]
			if !o.dispatch.Before(t) {
				break
			}
			if o.err != "" || !o.doneAt.After(t) {
				continue
			}
			left := float64(o.outputTokens)
			if t.After(o.firstAt) && o.doneAt.After(o.firstAt) {
				frac := t.Sub(o.firstAt).Seconds() / o.doneAt.Sub(o.firstAt).Seconds()
				left *= 1 - frac
			}
			pending += left
		}
		rows[i].pendingDecode = math.Round(pending)
	}
}

// scrapeOnce reads the vLLM gauges from /metrics.
func (p *profiler) scrapeOnce(ctx context.Context) (snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL, nil)
	if err != nil {
		return snapshot{}, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return snapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return snapshot{}, fmt.Errorf("status %s", resp.Status)
	}
	m, err := fleet.ParseMetrics(resp.Body) // the scheduler's own reading of vLLM's gauges
	return snapshot{at: time.Now(), running: m.Running, waiting: m.Waiting, kvUs: m.KVUsage}, err
}

// runProfileEval fits the analytic model on a sweep's training rows and
// reports the MAPE of it (and of XGBoost models, when given) on the
// held-out rows: row i (0-based, successful rows only) is held out when
// i % every == every-1, the rule scripts/train_tpot.py --holdout-every uses.
func runProfileEval(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("profile eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "sweep CSV from routebalance profile (required)")
	every := fs.Int("holdout-every", 5, "hold out every N-th successful row")
	xgbDir := fs.String("xgb", "", "directory of <tier>.tpot.bin / <tier>.ttft.bin from scripts/train_tpot.py")
	tier := fs.String("tier", "profiled", "tier name of the XGBoost models in --xgb")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *data == "" || *every < 2 {
		fmt.Fprintln(stderr, "profile eval: --data is required and --holdout-every must be ≥ 2")
		return errUsage
	}
	rows, err := readSweep(*data)
	if err != nil {
		return err
	}
	var train, test []sweepPoint
	for i, r := range rows {
		if i%*every == *every-1 {
			test = append(test, r)
		} else {
			train = append(train, r)
		}
	}
	if len(train) == 0 || len(test) == 0 {
		return fmt.Errorf("profile eval: %d usable rows is too few", len(rows))
	}
	m, err := latency.New(latency.Config{Forget: 1})
	if err != nil {
		return err
	}
	const fitTier = "analytic"
	// Two passes over the training rows: the first moves the coefficients
	// from the prior, the second refines them (RLS with λ = 1 is batch least
	// squares plus the prior's regularisation).
	for pass := 0; pass < 2; pass++ {
		for _, r := range train {
			m.Observe(fitTier, r.load, r.tpot, r.ttft)
		}
	}
	fmt.Fprintf(stdout, "profile eval: %d train rows, %d held-out rows (every %d-th)\n", len(train), len(test), *every)
	report := func(name string, tpot, ttft func(routing.Load) float64) {
		var et, ef float64
		var nt, nf int
		for _, r := range test {
			if r.tpot > 0 {
				et += math.Abs(tpot(r.load)-r.tpot) / r.tpot
				nt++
			}
			if r.ttft > 0 {
				ef += math.Abs(ttft(r.load)-r.ttft) / r.ttft
				nf++
			}
		}
		fmt.Fprintf(stdout, "%-9s tpot_mape=%.4f (n=%d) ttft_mape=%.4f (n=%d)\n", name, et/float64(max(nt, 1)), nt, ef/float64(max(nf, 1)), nf)
	}
	at := m.Tier(fitTier)
	report("analytic", func(l routing.Load) float64 { v, _ := at.Analytic(l); return v },
		func(l routing.Load) float64 { _, v := at.Analytic(l); return v })
	c := at.Coefficients()
	fmt.Fprintf(stdout, "analytic coefficients over [1 running waiting kv pending/1k prompt/1k]: tpot=%.5g ttft=%.5g\n", c.TPOT, c.TTFT)
	if *xgbDir != "" {
		mx, _ := latency.New(latency.Config{MinTPOT: 1e-9, MinTTFT: 1e-9})
		tiers, err := mx.LoadXGBDir(*xgbDir)
		if err != nil {
			return err
		}
		if !contains(tiers, *tier) {
			return fmt.Errorf("profile eval: no model for tier %q in %s (found %v)", *tier, *xgbDir, tiers)
		}
		report("xgboost", func(l routing.Load) float64 { return mx.TPOT(*tier, l) },
			func(l routing.Load) float64 { return mx.TTFT(*tier, l) })
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

type sweepPoint struct {
	load       routing.Load
	tpot, ttft float64
}

// readSweep reads the successful rows of a sweep CSV.
func readSweep(path string) ([]sweepPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(bufio.NewReader(f)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("%s: no rows", path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, need := range []string{"running", "waiting", "kv_usage", "pending_decode_tokens", "prompt_tokens", "tpot_s", "ttft_s", "error"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: missing column %q", path, need)
		}
	}
	var out []sweepPoint
	for n, r := range recs[1:] {
		if len(r) != len(recs[0]) {
			return nil, fmt.Errorf("%s line %d: %d fields, header has %d", path, n+2, len(r), len(recs[0]))
		}
		if r[col["error"]] != "" {
			continue
		}
		get := func(name string) float64 {
			v, _ := strconv.ParseFloat(r[col[name]], 64)
			return v
		}
		out = append(out, sweepPoint{
			load: routing.Load{Running: get("running"), Waiting: get("waiting"), KVUsage: get("kv_usage"),
				PendingDecodeTokens: get("pending_decode_tokens"), PromptTokens: get("prompt_tokens")},
			tpot: get("tpot_s"), ttft: get("ttft_s"),
		})
	}
	return out, nil
}
