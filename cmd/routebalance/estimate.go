package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
)

// runEstimate predicts quality and length for every line of --data with a
// saved index and, when the lines carry labels, prints the evaluation.
func runEstimate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	indexDir := fs.String("index", "", "index directory written by 'routebalance index build' (required)")
	data := fs.String("data", "", "prompts, JSON lines {id,prompt,scores?} (required)")
	out := fs.String("out", "", "predictions file, one JSON line per input (required)")
	modelsFile := fs.String("models", "", "model prices (LLMRouter models.json, a cluster file, or {model:{input_price,output_price}}); default: models.json beside --data when present")
	batch := fs.Int("batch", 32, "prompts per estimator call")
	search := fs.String("search", "auto", "search structure: auto, exact, twostage, hnsw, or qdrant (the collection recorded by index build --qdrant-url)")
	k := fs.Int("k", 30, "neighbours")
	shrink := fs.Float64("shrink", 1, "pull q̂ towards each model's index-wide mean with this many pseudo-neighbours (negative: off)")
	simPower := fs.Float64("sim-power", 2, "similarity weight exponent")
	embURL := fs.String("embedder-url", "", "override the embedding server URL recorded in an openai index")
	estimator := fs.String("estimator", "auto", "quality estimator: auto (head when the index has one), head, knn or blend")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if *indexDir == "" || *data == "" || *out == "" || *batch < 1 {
		fmt.Fprintln(stderr, "estimate: --index, --data and --out are required (and --batch ≥ 1)")
		return errUsage
	}
	cfg := estimate.Config{K: *k, Index: *search, Shrink: *shrink, SimPower: *simPower, Estimator: *estimator}
	if *search == "qdrant" {
		man, err := estimate.ReadManifest(*indexDir)
		if err != nil {
			return err
		}
		if man.Qdrant == nil {
			return fmt.Errorf("estimate: index %s was not built with --qdrant-url", *indexDir)
		}
		cfg.Index = "exact"
		cfg.Qdrant = &estimate.QdrantConfig{URL: man.Qdrant.URL, Collection: man.Qdrant.Collection}
	}
	if *embURL != "" {
		man, err := estimate.ReadManifest(*indexDir)
		if err != nil {
			return err
		}
		o, err := estimate.NewOpenAI(estimate.OpenAIConfig{URL: *embURL, Model: man.Embedder.Model, Dim: man.Dim})
		if err != nil {
			return err
		}
		cfg.Embedder = o
	}
	knn, err := estimate.Open(*indexDir, cfg)
	if err != nil {
		return err
	}
	recs, err := readRecordsFile(*data)
	if err != nil {
		return err
	}
	prices, priceSrc, err := loadPrices(*modelsFile, *data)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)

	models := knn.Models()
	ests := make([]routing.PromptEstimate, *batch)
	prompts := make([]string, 0, *batch)
	var rows []estimate.EvalRow
	labelled := false
	start := time.Now()
	for i := 0; i < len(recs); i += *batch {
		chunk := recs[i:min(i+*batch, len(recs))]
		prompts = prompts[:0]
		for _, r := range chunk {
			prompts = append(prompts, r.Prompt)
		}
		if err := knn.Estimate(ctx, prompts, models, nil, ests[:len(chunk)]); err != nil {
			return err
		}
		for j, r := range chunk {
			e := &ests[j]
			line := predLine{ID: r.ID, Quality: map[string]float64{}, OutputTokens: map[string]float64{}}
			for m, name := range models {
				line.Quality[name] = round4(e.Quality[m])
				line.OutputTokens[name] = math.Round(e.Length[m])
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
			if len(r.Scores) > 0 {
				labelled = true
				rows = append(rows, estimate.EvalRow{Truth: r.Scores, Pred: line.Quality})
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "estimate: %d prompts × %d models in %s (%.1f µs/prompt), written to %s\n",
		len(recs), len(models), elapsed.Round(time.Millisecond), float64(elapsed.Microseconds())/float64(max(len(recs), 1)), *out)
	if !labelled {
		return nil
	}
	printReport(stdout, estimate.Evaluate(rows, prices), priceSrc)
	return nil
}

type predLine struct {
	ID           string             `json:"id"`
	Quality      map[string]float64 `json:"quality"`
	OutputTokens map[string]float64 `json:"output_tokens"`
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

func printReport(w io.Writer, rep estimate.Report, priceSrc string) {
	fmt.Fprintf(w, "\n%-34s %7s %6s %8s %6s\n", "model", "auc", "n01", "pearson", "n")
	for _, s := range rep.Models {
		fmt.Fprintf(w, "%-34s %7.4f %6d %8.4f %6d\n", s.Model, s.AUC, s.NBinary, s.Pearson, s.N)
	}
	fmt.Fprintf(w, "\nrouting outcome (price = mean of the chosen model's USD per 1M tokens, from %s)\n", priceSrc)
	fmt.Fprintf(w, "%-16s %8s %8s  %s\n", "rule", "quality", "price", "model")
	line := func(o estimate.Outcome) {
		fmt.Fprintf(w, "%-16s %8.4f %8.4f  %s\n", o.Rule, o.Quality, o.Price, o.Model)
	}
	line(rep.BestSingle)
	line(rep.Argmax)
	for _, o := range rep.Threshold {
		line(o)
	}
	line(rep.Oracle)
	fmt.Fprintf(w, "summary: auc=%.4f argmax_quality=%.4f best_single=%.4f oracle=%.4f\n",
		rep.MeanAUC, rep.Argmax.Quality, rep.BestSingle.Quality, rep.Oracle.Quality)
}

// loadPrices reads model prices from path or, when path is empty, from
// models.json beside the data file when it exists. It accepts LLMRouter's
// {"model_info":{m:{input_price,output_price}}}, a cluster file's
// {"tiers":[{model,price_in_per_mtok,price_out_per_mtok}]}, and a plain
// {m:{input_price,output_price}} map.
func loadPrices(path, dataPath string) (map[string]estimate.Price, string, error) {
	if path == "" {
		cand := filepath.Join(filepath.Dir(dataPath), "models.json")
		if _, err := os.Stat(cand); err != nil {
			return nil, "no models file (prices 0)", nil
		}
		path = cand
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var doc struct {
		ModelInfo map[string]estimate.Price `json:"model_info"`
		Tiers     []struct {
			Model string  `json:"model"`
			In    float64 `json:"price_in_per_mtok"`
			Out   float64 `json:"price_out_per_mtok"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, "", fmt.Errorf("models file %s: %w", path, err)
	}
	prices := map[string]estimate.Price{}
	switch {
	case len(doc.ModelInfo) > 0:
		prices = doc.ModelInfo
	case len(doc.Tiers) > 0:
		for _, t := range doc.Tiers {
			prices[t.Model] = estimate.Price{In: t.In, Out: t.Out}
		}
	default:
		if err := json.Unmarshal(b, &prices); err != nil || len(prices) == 0 {
			return nil, "", errors.Join(fmt.Errorf("models file %s: no prices found (want model_info, tiers or {model:{input_price,output_price}})", path), err)
		}
	}
	return prices, path, nil
}
