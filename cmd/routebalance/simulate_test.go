package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// TestSimulateRateProfileWithAutopilot: --rate-profile with --preset
// autopilot,balanced and --slo gives one cell per arm with 10 s windows
// judged against the targets, the autopilot's trace and its timeline.
func TestSimulateRateProfileWithAutopilot(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data.jsonl")
	var lines []string
	for k := range 30 {
		b, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("question %d: what is %d+%d?", k, k, k), "task": "gsm8k", "scores": map[string]float64{
			"llama-3.1-nemotron-51b-instruct": 1, "llama-3.3-nemotron-super-49b-v1": 1, "llama-3.1-8b-instruct": 0, "gemma-2-9b-it": 0}})
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(data, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	err := runSimulate(context.Background(), []string{"--data", data, "--preset", "autopilot,balanced", "--rate-profile", "2:20s,6:10s",
		"--slo", "p95_e2e_ms=4000", "--decision-cost", "0", "--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "windows of 10s over 2:20s,6:10s, targets p95_e2e_ms=4000") {
		t.Errorf("no windows table in\n%s", stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cells) != 2 {
		t.Fatalf("%d cells, want 2", len(rep.Cells))
	}
	for _, c := range rep.Cells {
		if len(c.Windows) != 3 || c.Attainment == nil || c.RateProfile != "2:20s,6:10s" || c.Windows[2].Rate != 6 {
			t.Errorf("%s: windows %+v attainment %v profile %q", c.Label(), c.Windows, c.Attainment, c.RateProfile)
		}
	}
	if ap := rep.Cells[0].Autopilot; ap == nil || len(ap.Steps) != 5 || ap.TargetP95E2EMs != 4000 || ap.MaxStep > 0.2+1e-9 {
		t.Errorf("autopilot trace %+v", ap)
	}
	if _, err := os.Stat(filepath.Join(out, "autopilot_timeline.png")); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{
		{"--preset", "autopilot"},                                      // no --slo
		{"--preset", "autopilot", "--slo", "x=1"},                      // bad target
		{"--rate-profile", "6:1m,oops"},                                // bad profile
		{"--slo", "p95_e2e_ms=100", "--autopilot-params", "steps=0.5"}, // step above max
		{"--slo", "p95_e2e_ms=100", "--autopilot-replay", "magic"},
	} {
		args := append([]string{"--data", data, "--n", "5", "--rates", "2", "--decision-cost", "0"}, bad...)
		if err := runSimulate(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("simulate %v: no error", bad)
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
		if _, err := buildArms(tc.policies, tc.presets, tc.weights, 0.5, 0.2, false, false, tc.sizes, nil); err == nil {
			t.Errorf("buildArms(%+v) = nil error, want one", tc)
		}
	}
	arms, err := buildArms("routebalance,threshold", "quality,cost", "", 0.7, 0.2, true, false, "1,8", nil)
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

func TestOracleArmsRepeatOnlyTheOracle(t *testing.T) {
	arms, err := buildArms("round-robin,oracle", "balanced,quality", "", 0.5, 0.2, false, false, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := oracleArms(arms, "both, length,task-length")
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, a := range got {
		labels = append(labels, a.Policy.Name+"/"+a.Preset+"["+a.Ablation.Oracle+"]")
	}
	want := []string{"round-robin/[]",
		"oracle/balanced[]", "oracle/balanced[length]", "oracle/balanced[task-length]",
		"oracle/quality[]", "oracle/quality[length]", "oracle/quality[task-length]"}
	if strings.Join(labels, " ") != strings.Join(want, " ") {
		t.Errorf("arms %v, want %v", labels, want)
	}
	for _, bad := range []string{"", ",", "lengths", "both,oracle"} {
		if _, err := oracleArms(arms, bad); err == nil {
			t.Errorf("oracleArms(%q) = nil error, want one", bad)
		}
	}
}
