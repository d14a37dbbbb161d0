package quality

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
)

// world is a labelled workload with two kinds of prompt: "big" answers
// both well, "small" only the poems.
func world(n int, seed uint64) []estimate.Record {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]estimate.Record, n)
	for i := range out {
		var p string
		var qBig, qSmall float64
		if i%2 == 0 {
			p = fmt.Sprintf("solve the equation %d x + %d = %d and show the algebra", rng.IntN(90)+2, rng.IntN(50), rng.IntN(900))
			qBig, qSmall = 0.9, 0.15
		} else {
			p = fmt.Sprintf("write a short poem about the %s %s in autumn", []string{"quiet", "red", "old", "small"}[rng.IntN(4)], []string{"river", "forest", "harbour", "garden"}[rng.IntN(4)])
			qBig, qSmall = 0.85, 0.8
		}
		out[i] = estimate.Record{ID: fmt.Sprintf("r%d", i), Prompt: p, Scores: map[string]float64{
			"big": bern(rng, qBig), "small": bern(rng, qSmall)}}
	}
	return out
}

func bern(rng *rand.Rand, p float64) float64 {
	if rng.Float64() < p {
		return 1
	}
	return 0
}

func jsonl(recs []estimate.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, `{"id":%q,"prompt":%q,"scores":{"big":%v,"small":%v}}`+"\n", r.ID, r.Prompt, r.Scores["big"], r.Scores["small"])
	}
	return b.String()
}

func startStore(t *testing.T, cfg Config, deps Deps) *Store {
	t.Helper()
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func waitReady(t *testing.T, s *Store, cluster string) Status {
	t.Helper()
	testwait.Until(t, "quality index of "+cluster+" built", func() bool {
		st := s.Status(cluster).State
		return st == StateReady || st == StateFailed
	})
	st := s.Status(cluster)
	if st.State != StateReady {
		t.Fatalf("build of %s: %+v", cluster, st)
	}
	return st
}

func estimateOne(t *testing.T, e interface {
	Estimate(context.Context, []string, []string, []float64, []routing.PromptEstimate) error
}, prompt string, models []string) routing.PromptEstimate {
	t.Helper()
	out := make([]routing.PromptEstimate, 1)
	if err := e.Estimate(context.Background(), []string{prompt}, models, []float64{0.5, 0.5, 0.5, 0.5}[:len(models)], out); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestUploadBuildsAClusterIndex(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := startStore(t, Config{}, Deps{Now: func() time.Time { return now }})
	recs := world(400, 1)
	p, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small"}, strings.NewReader(jsonl(recs)))
	if err != nil || p.ErrorCount != 0 || len(p.Records) != 400 {
		t.Fatalf("upload: %d records, %d errors, err %v", len(p.Records), p.ErrorCount, err)
	}
	st := waitReady(t, s, "c1")
	if st.Records != 400 || st.Indexed+st.HeldOut != 400 || st.HeldOut < 20 || st.Models["big"] != 400 || st.Estimator != "head" {
		t.Errorf("status = %+v, want 400 records split into index + ≥ 20 held out, 400 labels of big, the head", st)
	}
	if st.UploadedAt == nil || !st.UploadedAt.Equal(now) || st.BuiltAt == nil {
		t.Errorf("uploaded %v built %v, want %v and set", st.UploadedAt, st.BuiltAt, now)
	}
	// "small" is right on poems and wrong on equations: the held-back
	// slice must see that the index separates them.
	if st.ValidationAUC == nil || st.ModelAUC["small"] < 0.7 {
		t.Errorf("validation AUC = %v, per model %v; want small ≥ 0.7", st.ValidationAUC, st.ModelAUC)
	}

	ce := s.ForCluster("c1")
	math := estimateOne(t, ce, "solve the equation 7 x + 3 = 59 and show the algebra", []string{"big", "small", "other"})
	poem := estimateOne(t, ce, "write a short poem about the old harbour in autumn", []string{"big", "small", "other"})
	if math.Source[0] != routing.SourceCluster || math.Source[1] != routing.SourceCluster || math.Source[2] != routing.SourcePrior {
		t.Errorf("sources = %v, want cluster, cluster, prior", math.Source)
	}
	if !(math.Quality[1] < 0.4 && poem.Quality[1] > 0.6) {
		t.Errorf("Q̂(small) math %.3f poem %.3f, want < 0.4 and > 0.6", math.Quality[1], poem.Quality[1])
	}
	// Another cluster knows nothing.
	if o := estimateOne(t, s.ForCluster("c2"), "write a short poem", []string{"big"}); o.Source[0] != routing.SourcePrior || o.Quality[0] != 0.5 {
		t.Errorf("other cluster: %v %v, want the prior", o.Quality, o.Source)
	}

	if err := s.Delete(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if st := s.Status("c1"); st.State != StateNone {
		t.Errorf("after delete: %+v, want none", st)
	}
	if o := estimateOne(t, ce, "write a short poem about the old harbour in autumn", []string{"small"}); o.Source[0] != routing.SourcePrior {
		t.Errorf("after delete the bound estimator uses %v, want the prior", o.Source)
	}
	if err := s.Delete(context.Background(), "c1"); err != ErrNotFound {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
}

func TestUploadWithBadLinesKeepsTheData(t *testing.T) {
	s := startStore(t, Config{}, Deps{})
	if _, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small"}, strings.NewReader(jsonl(world(30, 2)))); err != nil {
		t.Fatal(err)
	}
	before := waitReady(t, s, "c1")
	p, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small"}, strings.NewReader(jsonl(world(5, 3))+"oops\n"))
	if err != nil || p.ErrorCount != 1 || p.Errors[0].Line != 6 {
		t.Fatalf("bad upload: %+v, %v; want one error on line 6", p.Errors, err)
	}
	if after := s.Status("c1"); after.Records != before.Records || after.State != StateReady {
		t.Errorf("after a rejected upload: %+v, want the 30-record index kept", after)
	}
}

// fixed is an operator-wide estimator that knows "big" and "other".
type fixed struct{ calls int }

func (f *fixed) Estimate(_ context.Context, prompts, models []string, priors []float64, out []routing.PromptEstimate) error {
	f.calls++
	for j := range prompts {
		out[j].Reset(len(models))
		for m, name := range models {
			out[j].Quality[m], out[j].Source[m], out[j].Length[m] = priors[m], routing.SourcePrior, 100
			if name == "big" || name == "other" {
				out[j].Quality[m], out[j].Source[m] = 0.11, routing.SourceIndex
			}
		}
		out[j].Memo = 7
	}
	return nil
}

func TestClusterIndexInFrontOfTheOperatorIndex(t *testing.T) {
	g := &fixed{}
	s := startStore(t, Config{}, Deps{Global: g})
	recs := world(60, 4)
	for i := range recs {
		delete(recs[i].Scores, "big") // the cluster labels small only
	}
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, `{"id":%q,"prompt":%q,"scores":{"small":%v}}`+"\n", r.ID, r.Prompt, r.Scores["small"])
	}
	if _, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small", "other", "new"}, strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, "c1")
	o := estimateOne(t, s.ForCluster("c1"), "write a short poem about the red river in autumn", []string{"big", "small", "other", "new"})
	want := []routing.EstimateSource{routing.SourceIndex, routing.SourceCluster, routing.SourceIndex, routing.SourcePrior}
	for m := range want {
		if o.Source[m] != want[m] {
			t.Fatalf("sources = %v, want %v", o.Source, want)
		}
	}
	if o.Quality[0] != 0.11 || o.Quality[1] == 0.11 || o.Quality[3] != 0.5 || o.Length[1] != 100 || o.Memo != 7 {
		t.Errorf("estimate = %+v, want the operator index for big/other and lengths, the cluster for small, the prior for new", o)
	}
}

func TestFeedbackTeachesTheClusterOnly(t *testing.T) {
	s := startStore(t, Config{}, Deps{})
	models := []string{"big", "small"}
	for i := 0; i < 20; i++ {
		s.ObserveClusterQuality("c1", fmt.Sprintf("translate sentence %d into French", i), "small", 1)
		s.ObserveClusterQuality("c1", fmt.Sprintf("translate sentence %d into French", i), "big", 0)
	}
	o := estimateOne(t, s.ForCluster("c1"), "translate sentence 99 into French", models)
	if o.Source[0] != routing.SourceCluster || o.Quality[1] < 0.8 || o.Quality[0] > 0.2 {
		t.Errorf("after feedback: %v %v, want small ≥ 0.8, big ≤ 0.2 from the cluster", o.Quality, o.Source)
	}
	if st := s.Status("c1"); st.OnlineLabels["small"] != 20 || st.State != StateReady {
		t.Errorf("status %+v, want 20 online labels of small", st)
	}
	if o := estimateOne(t, s.ForCluster("c2"), "translate sentence 99 into French", models); o.Source[0] != routing.SourcePrior {
		t.Errorf("another cluster learned from c1's feedback: %v", o.Source)
	}
	// An upload rebuilds the index and re-teaches it the feedback.
	if _, err := s.Upload(context.Background(), "t1", "c1", models, strings.NewReader(jsonl(world(40, 5)))); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, "c1")
	if o := estimateOne(t, s.ForCluster("c1"), "translate sentence 99 into French", models); o.Quality[1] < 0.6 {
		t.Errorf("after a rebuild Q̂(small) on translations = %.3f, want the feedback kept (≥ 0.6)", o.Quality[1])
	}
}

func TestClusterEstimateAllocatesNothing(t *testing.T) {
	s := startStore(t, Config{}, Deps{Global: &fixed{}})
	if _, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small"}, strings.NewReader(jsonl(world(60, 6)))); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, "c1")
	ce := s.ForCluster("c1")
	prompts := []string{"write a short poem about the red river", "solve the equation 3 x = 9", "hello", "why is the sky blue"}
	models := []string{"big", "small", "other"}
	priors := []float64{0.5, 0.5, 0.5}
	out := make([]routing.PromptEstimate, len(prompts))
	ctx := context.Background()
	_ = ce.Estimate(ctx, prompts, models, priors, out)
	if n := testing.AllocsPerRun(50, func() { _ = ce.Estimate(ctx, prompts, models, priors, out) }); n != 0 {
		t.Errorf("ClusterEstimator.Estimate allocates %v times per batch, want 0", n)
	}
}

func TestHistoryRecordsMeanEstimates(t *testing.T) {
	s := startStore(t, Config{HistoryEvery: 10 * time.Millisecond, HistoryPoints: 3}, Deps{})
	if _, err := s.Upload(context.Background(), "t1", "c1", []string{"big", "small"}, strings.NewReader(jsonl(world(400, 7)))); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, "c1")
	testwait.Until(t, "3 history points", func() bool { return len(s.Status("c1").History) == 3 })
	for _, p := range s.Status("c1").History {
		// The world: big 0.9 / 0.85, small 0.15 / 0.8 on alternate prompts.
		if p.At.IsZero() || !(p.MeanQ["big"] > 0.75 && p.MeanQ["small"] > 0.3 && p.MeanQ["small"] < 0.65) {
			t.Errorf("history point %+v, want big ≈ 0.87, small ≈ 0.47", p)
		}
	}
	if err := s.Delete(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if h := s.Status("c1").History; len(h) != 0 {
		t.Errorf("history after delete: %v", h)
	}
}
