package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints cells as an aligned table.
func WriteTable(w io.Writer, cells []Cell) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tpreset\tvariant\tλ\tmean_e2e_s\tp50\tp95\tp99\tttft_s\ttpot_ms\tquality\tcost_usd\t$/1k_tok\tthru\tgoodput\tdec_us\tdec_p99_us\tbatch\tfailed\t")
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.4f\t%.6f\t%.5f\t%.2f\t%.2f\t%.1f\t%.1f\t%.2f\t%d\t\n",
			c.Policy, dash(c.Preset), dash(c.Variant), c.Rate, c.MeanE2E, c.P50E2E, c.P95E2E, c.P99E2E, c.MeanTTFT, c.MeanTPOT*1e3,
			c.Quality, c.CostPerRequest, c.CostPer1kTokens, c.Throughput, c.Goodput, c.DecisionMeanUs, c.DecisionP99Us, c.MeanBatch, c.Failed)
	}
	return tw.Flush()
}

// WriteTiers writes, per cell, the predicted vs observed mean E2E of each
// served tier.
func WriteTiers(w io.Writer, cells []Cell) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tpreset\tλ\ttier\tshare\tpredicted_e2e_s\tobserved_e2e_s\tobserved/predicted\tttft_pred\tttft_obs\ttokens_pred\ttokens_obs\t")
	for _, c := range cells {
		names := make([]string, 0, len(c.Tiers))
		for t := range c.Tiers {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			x := c.Tiers[t]
			fmt.Fprintf(tw, "%s\t%s\t%g\t%s\t%.3f\t%.3f\t%.3f\t%.2f\t%.3f\t%.3f\t%.1f\t%.1f\t\n", c.Policy, dash(c.Preset), c.Rate, t, x.Share, x.Predicted, x.Observed, x.Ratio,
				x.PredictedTTFT, x.ObservedTTFT, x.PredictedTokens, x.ObservedTokens)
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// SummaryLine is the last line `routebalance simulate` prints, for the last
// cell.
func SummaryLine(c Cell) string {
	return fmt.Sprintf("summary: policy=%s rate=%g mean_e2e_s=%.4f quality=%.4f cost_usd=%.6f", c.Policy, c.Rate, c.MeanE2E, c.Quality, c.CostPerRequest)
}

// Report is results.json.
type Report struct {
	Command    string     `json:"command"`
	Cluster    string     `json:"cluster"`
	Data       string     `json:"data"`
	N          int        `json:"n"`
	Seed       uint64     `json:"seed"`
	Burstiness float64    `json:"burstiness"`
	Goodput    string     `json:"goodput_slo"`
	Cells      []Cell     `json:"cells"`
	Capacity   []Capacity `json:"capacity"`
}

// WriteFiles writes results.json and results.csv into dir.
func WriteFiles(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.csv"))
	if err != nil {
		return err
	}
	if err := WriteCSV(f, rep.Cells); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteCSV writes one row per cell; model shares come last as
// "model=share;…".
func WriteCSV(w io.Writer, cells []Cell) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "preset", "weights", "variant", "rate", "n", "completed", "failed",
		"mean_e2e_s", "p50_e2e_s", "p95_e2e_s", "p99_e2e_s", "mean_ttft_s", "mean_tpot_s", "quality",
		"cost_usd", "cost_per_1k_tokens_usd", "throughput_req_s", "goodput_req_s", "good_fraction",
		"decision_mean_us", "decision_p99_us", "decision_per_request_us", "mean_batch", "wall_s", "model_share"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	for _, c := range cells {
		models := make([]string, 0, len(c.ModelShare))
		for m := range c.ModelShare {
			models = append(models, m)
		}
		sort.Strings(models)
		var share []string
		for _, m := range models {
			share = append(share, m+"="+strconv.FormatFloat(c.ModelShare[m], 'f', 4, 64))
		}
		_ = cw.Write([]string{c.Policy, c.Preset, c.Weights, c.Variant, g(c.Rate), strconv.Itoa(c.N), strconv.Itoa(c.Completed), strconv.Itoa(c.Failed),
			g(c.MeanE2E), g(c.P50E2E), g(c.P95E2E), g(c.P99E2E), g(c.MeanTTFT), g(c.MeanTPOT), g(c.Quality),
			g(c.CostPerRequest), g(c.CostPer1kTokens), g(c.Throughput), g(c.Goodput), g(c.GoodFraction),
			g(c.DecisionMeanUs), g(c.DecisionP99Us), g(c.DecisionPerReqUs), g(c.MeanBatch), g(c.WallS), strings.Join(share, ";")})
	}
	cw.Flush()
	return cw.Error()
}

// WriteWindows prints, per cell of a rate-profile run, the share of its
// windows that met the targets, its quality, and for the autopilot the
// largest weight step and the sign changes of the quality weight.
func WriteWindows(w io.Writer, cells []Cell) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tpreset\tattainment\twindows_met\tquality\tmean_e2e_s\tp95_e2e_s\tworst_window_p95_s\tmax_step\tsign_changes\t")
	for _, c := range cells {
		if c.Attainment == nil {
			continue
		}
		met, n, worst := 0, 0, 0.0
		for _, x := range c.Windows {
			if x.N == 0 {
				continue
			}
			n++
			if x.TargetMet {
				met++
			}
			if x.P95E2E < 0 || worst < 0 {
				worst = -1
			} else if x.P95E2E > worst {
				worst = x.P95E2E
			}
		}
		step, signs := "-", "-"
		if c.Autopilot != nil {
			step, signs = strconv.FormatFloat(c.Autopilot.MaxStep, 'f', 3, 64), strconv.Itoa(c.Autopilot.SignChanges)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%d/%d\t%.4f\t%.3f\t%.3f\t%.3f\t%s\t%s\t\n", c.Policy, dash(c.Preset), *c.Attainment, met, n, c.Quality, c.MeanE2E, c.P95E2E, worst, step, signs)
	}
	return tw.Flush()
}
