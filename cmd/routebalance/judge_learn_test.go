package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/engine"
)

// judgeLearnRequests is N of TestEmulatedJudgeLearns: the requests sent.
const judgeLearnRequests = 30000

// judgeRound is how many requests TestEmulatedJudgeLearns sends before it
// lets the judge's queue drain.
const judgeRound = 160

// judgeGapShare is the share of the gap between the quality preset's
// served quality before the judge and the oracle's that it must close
// after the judge.
const judgeGapShare = 0.25

// TestEmulatedJudgeLearns is the proof that the judge learns: the four
// models of the demo set behind serve, no quality index, every prior 0.5;
// the 51B instance is the cluster's judge-kind instance (it scores an
// answer 5 when the demo set's hidden label of the answering model is 1,
// else 1, and reports the opposite 5 % of the time). With the judge at a
// sample rate of 0.2, judgeLearnRequests requests cycle through the demo
// set's prompts: three in four with the round-robin policy (traffic that
// reaches every model, as a tenant's varied presets would), one in four
// with the quality preset. Then, the judge off, each model's mean Q̂ over
// the whole demo set (every prompt sent to every model, Q̂ read from
// X-RouteBalance-Predicted-Quality) must be within 0.05 of its true mean,
// and the quality preset's served quality over the set (the true label of
// the model it chose, one request at a time) must close ≥ judgeGapShare
// of the gap from its value before the judge to the oracle's. The
// traffic goes in rounds the judge drains, so no sample is dropped and
// what is learned does not depend on the machine's speed.
func TestEmulatedJudgeLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 30,000 requests")
	}
	learnWithJudge(t, judgeLearnRequests, true)
}

// BenchmarkJudgeCostPerLabel runs the world of TestEmulatedJudgeLearns
// with 2,000 requests per iteration and reports what one learned label
// cost the tenant (the judge calls metered at the judge instance's
// prices: the rubric's prompt tokens and a few output tokens) and the
// labels learned.
func BenchmarkJudgeCostPerLabel(b *testing.B) {
	var usd, labels float64
	for i := 0; i < b.N; i++ {
		st := learnWithJudge(b, 2000, false)
		usd += st.PerLabel
		labels += float64(st.Judged)
	}
	b.ReportMetric(usd/float64(b.N), "usd/label")
	b.ReportMetric(labels/float64(b.N), "labels/op")
}

// judgeStats is what GET …/quality-judge reports of the judge's work.
type judgeStats struct {
	Judged, Sampled, Dropped, Failed uint64
	Calls                            uint64
	Labels                           map[string]int `json:"labels"`
	Spent                            float64        `json:"spent_usd"`
	PerLabel                         float64        `json:"cost_per_label_usd"`
}

// learnWithJudge builds the world, sends requests with the judge on and,
// with check, measures and asserts what was learned.
func learnWithJudge(t testing.TB, requests int, check bool) judgeStats {
	items, err := demoset.Items()
	if err != nil {
		t.Fatal(err)
	}
	labels := vllmemu.LabelTable{}
	for _, it := range items {
		labels[it.Prompt] = it.Scores
	}
	file := engine.ReferenceCluster()
	judgeModel := demoset.Models()[0]
	judgeAt := -1
	for i := range file.Tiers {
		file.Tiers[i].Instances = 1
		if file.Tiers[i].Model == judgeModel {
			judgeAt = i // one instance per tier: instance i is tier i's
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emu, err := vllmemu.StartCluster(ctx, vllmemu.Config{File: file, ZeroLatency: true, Seed: 1, Judges: map[int]*vllmemu.Judge{judgeAt: {Labels: labels, Flip: 0.05}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })

	base, stop := startServe(t, t.TempDir(), "--allow-private-endpoints")
	t.Cleanup(func() { stop() }) //nolint:errcheck
	tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"j@example.com","password":"correct-horse-42","name":"J"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
	for _, in := range emu.Instances {
		tier := in.Spec().Tier
		postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, fmt.Sprintf(`{"base_url":%q,"model":%q,"gpu":%q,"price_in_per_mtok":%v,"price_out_per_mtok":%v,"max_concurrency":%d}`,
			in.URL, tier.Model, tier.GPU, tier.PriceInPerMTok, tier.PriceOutPerMTok, tier.MaxNumSeqs))
	}
	key := postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	type outcome struct {
		i       int
		quality bool
		model   string
		qhat    float64
		label   float64
	}
	// ask sends one demo prompt: to model ("auto" or one model), with the
	// quality preset or the round-robin policy.
	// Each request has its own X-Request-Id, phase:index: the judge samples
	// by a hash of the id, so the same requests are sampled in every run
	// (with random ids the ~20 % judged, and so what was learned, changed
	// from run to run).
	ask := func(id string, it demoset.Item, model string, quality bool) (outcome, error) {
		opts := []option.RequestOption{option.WithHeader("X-RouteBalance-Policy", "round-robin")}
		if quality {
			opts = []option.RequestOption{option.WithHeader("X-RouteBalance-Preset", "quality")}
		}
		opts = append(opts, option.WithHeader("X-Request-Id", id))
		var resp *http.Response
		opts = append(opts, option.WithResponseInto(&resp))
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(it.Prompt)}, MaxTokens: openai.Int(16),
		}, opts...)
		if err != nil {
			return outcome{}, err
		}
		m := resp.Header.Get("X-RouteBalance-Model")
		q, _ := strconv.ParseFloat(resp.Header.Get("X-RouteBalance-Predicted-Quality"), 64)
		return outcome{quality: quality, model: m, qhat: q, label: it.Scores[m]}, nil
	}
	// run sends n requests from workers goroutines: request i is job(i),
	// with the id phase:i.
	run := func(phase string, n, workers int, job func(i int) (demoset.Item, string, bool)) []outcome {
		results := make([]outcome, n)
		var wg sync.WaitGroup
		next := make(chan int)
		var failed sync.Once
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					it, model, quality := job(i)
					r, err := ask(phase+":"+strconv.Itoa(i), it, model, quality)
					if err != nil {
						failed.Do(func() { t.Errorf("request %d: %v", i, err) })
						continue
					}
					r.i = i
					results[i] = r
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		return results
	}
	// servedQuality is the quality preset's served quality over the whole
	// demo set: the mean true label of the models it chose. One request at
	// a time, so every decision sees an idle fleet and the choice depends
	// on the Q̂ alone, not on how a loaded machine interleaves requests.
	servedQuality := func(phase string) float64 {
		var sum float64
		chosen := map[string]int{}
		for _, r := range run(phase, len(items), 1, func(i int) (demoset.Item, string, bool) { return items[i], "auto", true }) {
			sum += r.label
			chosen[r.model]++
		}
		t.Logf("quality preset chose %v", chosen)
		return sum / float64(len(items))
	}
	// Before the judge: the quality preset on priors alone.
	first := servedQuality("before")
	if t.Failed() {
		return judgeStats{}
	}
	if res, body := doReq(t, "PUT", base+"/api/v1/clusters/"+cid+"/quality-judge", tok,
		fmt.Sprintf(`{"enabled":true,"model":%q,"sample_rate":0.2,"monthly_budget_usd":100}`, judgeModel)); res.StatusCode != 200 {
		t.Fatalf("enable the judge: %d %s", res.StatusCode, body)
	}

	// Traffic: the demo prompts in turn, three in four round-robin, one
	// in four with the quality preset, in rounds of judgeRound requests;
	// after each round the judge's queue drains. A round samples ≈ 32
	// answers (rate 0.2), half the judge's queue of 64, so no sample is
	// dropped however slowly the judge runs on a loaded machine: what is
	// learned does not depend on the machine's speed.
	var st struct {
		Stats judgeStats `json:"stats"`
	}
	drained := func() {
		testwait.Until(t, "judge queue drained", func() bool {
			_, body := doReq(t, "GET", base+"/api/v1/clusters/"+cid+"/quality-judge", tok, "")
			json.Unmarshal([]byte(body), &st) //nolint:errcheck
			return st.Stats.Judged+st.Stats.Dropped+st.Stats.Failed >= st.Stats.Sampled
		})
	}
	for from := 0; from < requests && !t.Failed(); from += judgeRound {
		run("train-"+strconv.Itoa(from), min(judgeRound, requests-from), 4, func(i int) (demoset.Item, string, bool) {
			i += from
			return items[i%len(items)], "auto", i%4 == 3
		})
		drained()
	}
	if t.Failed() {
		return judgeStats{}
	}
	t.Logf("judge: %d sampled, %d judged, %d dropped, %d failed, labels %v, spent $%.6f, $%.8f per label",
		st.Stats.Sampled, st.Stats.Judged, st.Stats.Dropped, st.Stats.Failed, st.Stats.Labels, st.Stats.Spent, st.Stats.PerLabel)

	// The latency model's view of each instance: with zero-latency
	// engines every timing is the machine's, and the quality preset still
	// weighs latency and cost at 0.1 each (logged to tell a choice made
	// by them from one made by Q̂).
	if _, body := doReq(t, "GET", base+"/api/v1/clusters/"+cid+"/state", tok, ""); body != "" {
		var state struct {
			State []struct {
				Model  string  `json:"model"`
				TPOTMs float64 `json:"tpot_ms"`
				Served int     `json:"served"`
			} `json:"state"`
		}
		json.Unmarshal([]byte(body), &state) //nolint:errcheck // logged only
		for _, r := range state.State {
			t.Logf("state %-34s tpot_ms %.3f served %d", r.Model, r.TPOTMs, r.Served)
		}
	}
	if !check {
		return st.Stats
	}
	if st.Stats.Dropped+st.Stats.Failed > 0 {
		t.Errorf("judge dropped %d and failed %d samples; the rounds are paced so that none is", st.Stats.Dropped, st.Stats.Failed)
	}
	// Judge calls are metered to the tenant as their own usage group.
	var usage struct {
		Rows []struct {
			Group    string  `json:"group"`
			Requests int64   `json:"requests"`
			CostUSD  float64 `json:"cost_usd"`
		} `json:"rows"`
	}
	testwait.Until(t, "judge usage metered", func() bool {
		_, body := doReq(t, "GET", base+"/api/v1/usage?group_by=key", tok, "")
		json.Unmarshal([]byte(body), &usage) //nolint:errcheck
		for _, r := range usage.Rows {
			if r.Group == "judge" {
				return r.Requests == int64(st.Stats.Calls) && math.Abs(r.CostUSD-st.Stats.Spent) < 1e-6
			}
		}
		return false
	})
	// Measure with the judge off (nothing more is learned): every demo
	// prompt sent to every model (Q̂ of that model is the decision's
	// X-RouteBalance-Predicted-Quality), and the quality preset over the
	// whole set.
	if res, body := doReq(t, "PUT", base+"/api/v1/clusters/"+cid+"/quality-judge", tok,
		fmt.Sprintf(`{"enabled":false,"model":%q,"sample_rate":0.2,"monthly_budget_usd":100}`, judgeModel)); res.StatusCode != 200 {
		t.Fatalf("disable the judge: %d %s", res.StatusCode, body)
	}
	models := demoset.Models()
	sort.Strings(models)
	sweep := run("sweep", len(items)*len(models), 4, func(i int) (demoset.Item, string, bool) {
		return items[i/len(models)], models[i%len(models)], false
	})
	sum, truth := map[string]float64{}, map[string]float64{}
	for _, r := range sweep {
		sum[r.model] += r.qhat
		truth[r.model] += r.label
	}
	for _, m := range models {
		mean, want := sum[m]/float64(len(items)), truth[m]/float64(len(items))
		t.Logf("%-34s mean Q̂ %.3f  true mean %.3f  (over the %d demo prompts)", m, mean, want, len(items))
		if math.Abs(mean-want) > 0.05 {
			t.Errorf("%s: mean Q̂ %.3f, true mean %.3f: off by more than 0.05 after %d requests", m, mean, want, requests)
		}
	}
	// The quality preset's served quality before and after, against the
	// oracle (best label per prompt) and the best single model.
	var oracle float64
	best := map[string]float64{}
	for _, it := range items {
		o := 0.0
		for m, q := range it.Scores {
			o = math.Max(o, q)
			best[m] += q / float64(len(items))
		}
		oracle += o / float64(len(items))
	}
	var bestSingle float64
	for _, v := range best {
		bestSingle = math.Max(bestSingle, v)
	}
	last := servedQuality("after")
	// What the judge taught must move the preset toward the oracle (the
	// best label per prompt): close at least judgeGapShare of the gap
	// from its served quality before the judge (measured one request at a
	// time, so it does not hang on how concurrent requests broke the tie
	// between equal priors). Whether it also beats the best single model
	// is logged: the scheduler's cost and latency terms decide that too.
	share := (last - first) / (oracle - first)
	t.Logf("quality preset over the %d demo prompts: served quality %.3f before the judge, %.3f after %d requests with it (%.0f %% of the gap to the oracle's %.3f closed); best single model %.3f",
		len(items), first, last, requests, 100*share, oracle, bestSingle)
	if !(share >= judgeGapShare) || !(last <= oracle) {
		t.Errorf("the quality preset's served quality went from %.3f to %.3f: %.0f %% of the gap to the oracle's %.3f, want ≥ %.0f %%",
			first, last, 100*share, oracle, 100*judgeGapShare)
	}
	return st.Stats
}
