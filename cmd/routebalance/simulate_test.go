package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/routing/sim"
)

func TestSimulateCommandWritesResults(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data.jsonl")
	var lines []string
	for _, p := range []string{"What is 2+2?", "Name a prime number.", "Write a haiku about rain."} {
		b, _ := json.Marshal(map[string]any{"prompt": p, "task": "gsm8k", "scores": map[string]float64{
			"llama-3.1-nemotron-51b-instruct": 1, "llama-3.3-nemotron-super-49b-v1": 1, "llama-3.1-8b-instruct": 0, "gemma-2-9b-it": 0}})
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(data, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	err := runSimulate(context.Background(), []string{"--data", data, "--policy", "shortest-queue,routebalance",
		"--preset", "quality,cost", "--rates", "4,8", "--n", "40", "--decision-cost", "0", "--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	text := strings.TrimSpace(stdout.String())
	last := text[strings.LastIndexByte(text, '\n')+1:]
	if !strings.HasPrefix(last, "summary: policy=routebalance rate=8 mean_e2e_s=") || !strings.Contains(last, " quality=") || !strings.Contains(last, " cost_usd=") {
		t.Errorf("last line %q is not the summary of the last cell", last)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// shortest-queue once, routebalance once per preset; two rates each.
	if len(rep.Cells) != 6 {
		t.Fatalf("%d cells, want 6", len(rep.Cells))
	}
	for _, c := range rep.Cells {
		if c.Completed != 40 || c.Failed != 0 {
			t.Errorf("%s λ=%v: completed %d failed %d, want 40/0", c.Label(), c.Rate, c.Completed, c.Failed)
		}
	}
	for _, f := range []string{"results.csv", "latency_vs_rate.png", "latency_vs_rate.svg", "frontier_cost_l8.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
}

func TestBuildArmsRejectsBadInput(t *testing.T) {
	for _, tc := range []struct{ policies, presets, weights, sizes string }{
		{"nope", "", "", ""},
		{"routebalance", "fancy", "", ""},
		{"routebalance", "quality", "q=1", ""},
		{"routebalance", "", "", "0"},
	} {
		if _, err := buildArms(tc.policies, tc.presets, tc.weights, 0.5, 0.2, false, false, tc.sizes); err == nil {
			t.Errorf("buildArms(%+v) = nil error, want one", tc)
		}
	}
	arms, err := buildArms("routebalance,threshold", "quality,cost", "", 0.7, 0.2, true, false, "1,8")
	if err != nil {
		t.Fatal(err)
	}
	// (2 presets + 1 threshold arm) × 2 batch sizes.
	if len(arms) != 6 {
		t.Fatalf("%d arms, want 6", len(arms))
	}
	for _, a := range arms {
		if !a.Ablation.NoLPT || (a.Ablation.BatchSize != 1 && a.Ablation.BatchSize != 8) {
			t.Errorf("arm %+v lacks the ablation switches", a)
		}
		if a.Policy.Name == "threshold" && a.Policy.Threshold != 0.7 {
			t.Errorf("threshold arm t = %v, want 0.7", a.Policy.Threshold)
		}
	}
}
