package api

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/tenants"
)

// feedbackRecords is a small labelled set for a real KNN: n prompts over
// a fixed vocabulary, each scored on models m0..m(models-1).
func feedbackRecords(n, models int) []estimate.Record {
	rng := rand.New(rand.NewSource(1))
	vocab := make([]string, 500)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%x", rng.Int63()%1e6)
	}
	recs := make([]estimate.Record, n)
	for i := range recs {
		words := make([]string, 10+rng.Intn(40))
		for j := range words {
			words[j] = vocab[rng.Intn(len(vocab))]
		}
		sc := map[string]float64{}
		for m := 0; m < models; m++ {
			sc[fmt.Sprintf("m%d", m)] = float64(rng.Intn(2))
		}
		recs[i] = estimate.Record{ID: fmt.Sprint(i), Prompt: strings.Join(words, " "), Scores: sc}
	}
	return recs
}

func buildKNN(tb testing.TB, recs []estimate.Record, memo int) *estimate.KNN {
	tb.Helper()
	emb, err := estimate.NewBuiltin(estimate.DefaultBuiltinConfig())
	if err != nil {
		tb.Fatal(err)
	}
	k, err := estimate.Build(context.Background(), recs, estimate.Config{Estimator: "knn", MemoCapacity: memo}, estimate.BuildOptions{Embedder: emb})
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// TestFeedbackReusesTheDecisionsEmbedding: /v1/feedback hands the
// estimator the memo of the request's decision (Decision.EstimateMemo,
// kept with the request for feedback), so the real KNN learns from the
// score without embedding or searching the prompt again while the memo is
// held (its last MemoCapacity estimates); an older request's memo has
// expired and the prompt is embedded again (a miss), still learned.
func TestFeedbackReusesTheDecisionsEmbedding(t *testing.T) {
	knn := buildKNN(t, feedbackRecords(200, 2), 3)
	r, err := schedule.NewRouter(schedule.Config{}, schedule.Deps{Estimator: knn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	up := vllmtest.New(t, vllmtest.Config{Model: "m0", Tokens: 3})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m0")}, router: r, observer: knn})

	ask := func(i int) string {
		t.Helper()
		resp, body := e.post(t, "/v1/chat/completions", testKey, fmt.Sprintf(`{"model":"auto","messages":[{"role":"user","content":"question number %d about sorting"}]}`, i), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("chat %d: %d %s", i, resp.StatusCode, body)
		}
		return resp.Header.Get(HeaderRequestID)
	}
	feedback := func(id string) {
		t.Helper()
		if resp, body := e.post(t, "/v1/feedback", testKey, fmt.Sprintf(`{"request_id":%q,"score":0.9}`, id), nil); resp.StatusCode != 200 {
			t.Fatalf("feedback: %d %s", resp.StatusCode, body)
		}
	}
	old := ask(0)
	recent := ""
	for i := 1; i <= 4; i++ { // 4 more estimates: the first request's memo (capacity 3) is gone
		recent = ask(i)
	}
	settled := func() (uint64, uint64) {
		// completions learn their length through the memo on release;
		// wait for the five of them before counting feedback
		var h, m uint64
		for try := 0; try < 200; try++ {
			if h, m = knn.MemoHits(); h+m >= 5 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return h, m
	}
	h0, m0 := settled()
	feedback(recent)
	if h, m := knn.MemoHits(); h != h0+1 || m != m0 {
		t.Errorf("feedback on a recent request: memo hits %d→%d, misses %d→%d; want one more hit, no miss", h0, h, m0, m)
	}
	feedback(old)
	if h, m := knn.MemoHits(); h != h0+1 || m != m0+1 {
		t.Errorf("feedback on an expired memo: hits %d→%d, misses %d→%d; want one more miss", h0, h, m0, m)
	}
}

// BenchmarkFeedbackLearning is the estimator's cost of one /v1/feedback
// score over an index of 5,608 prompts (the size of train.jsonl), with
// the decision's memo (the request still within the last MemoCapacity
// estimates) and without it (an older request: embed and search again).
func BenchmarkFeedbackLearning(b *testing.B) {
	recs := feedbackRecords(5608, 9)
	knn := buildKNN(b, recs, 0)
	prompts := make([]string, 64)
	for i := range prompts {
		prompts[i] = recs[(i*131)%len(recs)].Prompt + " (asked again)"
	}
	ests := make([]routing.PromptEstimate, len(prompts))
	if err := knn.Estimate(context.Background(), prompts, knn.Models(), nil, ests); err != nil {
		b.Fatal(err)
	}
	b.Run("memo", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			j := i % len(prompts)
			knn.ObserveQualityMemo(ests[j].Memo, prompts[j], "m1", 0.5)
		}
	})
	b.Run("prompt", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			j := i % len(prompts)
			knn.ObserveQuality(prompts[j], "m1", 0.5)
		}
	})
}
