package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/routebalance/routebalance/infra/clusters"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/plots"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// runSimulate is `routebalance simulate`: a discrete-event sweep of policies
// × weights × rates over a cluster file, driven by the real scheduler.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cluster := fs.String("cluster", "", "cluster file (default: the project's calibrated infra/clusters/reference-13.json, embedded)")
	index := fs.String("index", "", "quality/length index directory built by `routebalance index build`")
	data := fs.String("data", "", "JSONL prompts {id,prompt,task?,scores?} to replay")
	policies := fs.String("policy", "routebalance", "policy, or a comma list: routebalance, round-robin, shortest-queue, quality-only, threshold, chimera, oracle")
	presets := fs.String("preset", "", "preset for the routebalance/oracle policies, or a comma list (quality, latency, cost, balanced, autopilot); default balanced")
	weights := fs.String("weights", "", "custom weights q=…,c=…,l=… instead of --preset")
	threshold := fs.Float64("threshold", 0.5, "quality threshold t of the threshold policy")
	slack := fs.Float64("slack", 0.2, "delay slack τ of the chimera policy")
	rates := fs.String("rates", "6,8,10,12,18,24,30", "comma list of request rates λ (req/s)")
	rateProfile := fs.String("rate-profile", "", "piecewise-constant λ over time instead of --rates, e.g. 6:60s,30:60s,6:60s (arrivals until it ends; --n is ignored); cells then carry 10 s windows")
	slo := fs.String("slo", "", "targets of the autopilot preset and of every cell's windows: p95_e2e_ms=…,p95_ttft_ms=…,max_cost_usd_per_request=…")
	apParams := fs.String("autopilot-params", "", "autopilot constants over the defaults: margin=…,band=…,dwell=…,persist=…,rise=…,confirm=…,min_gain=…,steps=a/b/c,max_step=…,min_window=… (routing/autopilot/README.md)")
	apInterval := fs.Duration("autopilot-interval", 5*time.Second, "autopilot control interval (virtual time)")
	apFeedback := fs.Duration("autopilot-feedback", 20*time.Second, "autopilot feedback window (observed p95 over the last …)")
	apHorizon := fs.Duration("autopilot-horizon", 10*time.Second, "recent traffic each autopilot replay repeats")
	apReplay := fs.String("autopilot-replay", "derived", "engines of the autopilot's replays: derived (from the live latency model, as a live router must) or world (the simulated world's own)")
	apNoPredict := fs.Bool("autopilot-no-predict", false, "autopilot on feedback only (no model-predictive replays)")
	window := fs.Duration("window", 10*time.Second, "width of the windows of a --rate-profile run")
	n := fs.Int("n", 3000, "requests per cell")
	burst := fs.Float64("burstiness", 1, "gamma shape of the inter-arrival gaps (1 = Poisson)")
	seed := fs.Uint64("seed", 1, "seed of the prompt sample and the arrivals")
	out := fs.String("out", "", "directory for results.json, results.csv and the plots")
	noLPT := fs.Bool("no-lpt", false, "ablation: assign each batch in arrival order")
	noAdaptive := fs.Bool("no-adaptive", false, "ablation: batch limit fixed at its maximum")
	batchSizes := fs.String("batch-size", "", "ablation: fixed batch limit K, or a comma list (one variant per K)")
	goodput := fs.String("goodput", sim.DefaultGoodput().String(), "goodput SLOs (ms), vLLM style")
	decisionCost := fs.String("decision-cost", "measured", "virtual time a decision occupies the scheduler: measured (wall-clock compute of the real call) or a duration like 0 or 5ms")
	plotRate := fs.Float64("plot-rate", 24, "λ of the frontier plots (nearest swept rate)")
	maxTokens := fs.Int("max-tokens", 0, "max_tokens on every request (0 = none)")
	verbose := fs.Bool("v", false, "log scheduler warnings")
	latencyPrior := fs.String("latency-prior", "world", "start of each tier's latency model: world (the tier's profiled light-load figures) or default (generic prior, learnt online)")
	binding := fs.String("binding", "", "when a queued request is bound to its instance: early (default) or late (routing/schedule README, Admission queue)")
	bias := fs.String("bias", "", "per-tier online correction of T̂: off (default) or on (routing/schedule README, Predictions)")
	score := fs.String("score", "light", "score normalisation of the routebalance/oracle policies: light (default), relative, range or paper (DESIGN §3.1)")
	oracle := fs.String("oracle", "both", "what the oracle policy is told, or a comma list (one arm each): both (true quality and lengths), length (true lengths, estimated quality), quality (true quality, estimated lengths), task-length (each model's mean length on the true task, estimated quality)")
	bound := fs.Bool("bound", false, "also print the fluid lower bound of the mean E2E at every rate (routing/sim.FluidBound)")
	tiers := fs.Bool("tiers", false, "also print predicted vs observed mean E2E per served tier for every cell")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the sweep to this file")
	scrape := fs.Duration("scrape-interval", 250*time.Millisecond, "how often engine gauges reach the scheduler(s), as the live scraper's /metrics readings (0 = never)")
	replicas := fs.Int("replicas", 1, "router replicas over the one fleet, each with its own scheduler and seeing the others only through the scrape (routing/sim/replicas.go); use with --decision-cost 0")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		fmt.Fprintln(stderr, "simulate: --data is required")
		fs.Usage()
		return errUsage
	}
	var f *engine.ClusterFile
	var err error
	if *cluster == "" {
		f, err = engine.ParseCluster(clusters.Reference13())
	} else {
		f, err = engine.LoadCluster(*cluster)
	}
	if err != nil {
		return err
	}
	world := sim.NewWorld(f)
	items, err := workload.ReadFile(*data)
	if err != nil {
		return err
	}
	cfg := sim.DefaultConfig()
	cfg.N, cfg.Burstiness, cfg.Seed, cfg.MaxTokens = *n, *burst, *seed, *maxTokens
	if *scrape < 0 {
		return fmt.Errorf("scrape-interval must be >= 0, got %v", *scrape)
	}
	cfg.ScrapeInterval = *scrape
	if cfg.Goodput, err = metrics.ParseSLO(*goodput); err != nil {
		return err
	}
	if *decisionCost != "measured" {
		if cfg.DecisionCost, err = time.ParseDuration(*decisionCost); err != nil || cfg.DecisionCost < 0 {
			return fmt.Errorf("decision-cost: want measured or a duration >= 0, got %q", *decisionCost)
		}
	}
	rateList, err := parseFloats(*rates)
	if err != nil {
		return fmt.Errorf("rates: %w", err)
	}
	var pr sim.ProfileRun
	pr.Window = *window
	if *rateProfile != "" {
		if cfg.Profile, err = workload.ParseProfile(*rateProfile); err != nil {
			return err
		}
		if *window <= 0 {
			return fmt.Errorf("window must be > 0, got %v", *window)
		}
	}
	var ap *sim.AutopilotConfig
	if *slo != "" {
		if pr.Targets, err = autopilot.ParseTargets(*slo); err != nil {
			return fmt.Errorf("slo: %w", err)
		}
		params, err := autopilot.ParseParams(*apParams)
		if err != nil {
			return fmt.Errorf("autopilot-params: %w", err)
		}
		ap = &sim.AutopilotConfig{Targets: pr.Targets, Params: params, Interval: *apInterval, Horizon: *apHorizon, Window: *apFeedback, NoPredict: *apNoPredict, ReplayWorld: *apReplay}
		if err := ap.WithDefaults().Validate(); err != nil {
			return err
		}
	}
	arms, err := buildArms(*policies, *presets, *weights, *threshold, *slack, *noLPT, *noAdaptive, *batchSizes, ap)
	if err != nil {
		return err
	}
	if arms, err = oracleArms(arms, *oracle); err != nil {
		return err
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	newDeps, err := simDeps(*index, *latencyPrior, world, log)
	if err != nil {
		return err
	}
	newRouter := func(arm sim.Arm) (sim.Router, error) {
		one := func() (sim.Router, error) {
			deps, err := newDeps()
			if err != nil {
				return nil, err
			}
			scfg := schedule.DefaultConfig()
			scfg.Score = *score
			if *bias != "" {
				scfg.Bias = *bias
			}
			if *binding != "" {
				scfg.Binding = *binding
			}
			return sim.NewCoreRouter(scfg, deps, world, arm)
		}
		if *replicas > 1 {
			return sim.NewReplicaRouter(*replicas, one)
		}
		return one()
	}

	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if len(cfg.Profile) > 0 {
		fmt.Fprintf(stderr, "simulate: %d arm(s) over the rate profile %s on %s (%d instances)\n", len(arms), cfg.Profile, f.Name, len(world.Cluster.Instances))
	} else {
		fmt.Fprintf(stderr, "simulate: %d arm(s) × %d rate(s) × %d requests on %s (%d instances)\n", len(arms), len(rateList), cfg.N, f.Name, len(world.Cluster.Instances))
	}
	start := time.Now()
	cells, err := sim.SweepProfile(ctx, cfg, pr, world, items, arms, rateList, newRouter, func(c sim.Cell) {
		fmt.Fprintf(stderr, "  %-40s λ=%-5g mean_e2e=%.3fs quality=%.4f cost=$%.6f (%.2fs)\n", c.Label(), c.Rate, c.MeanE2E, c.Quality, c.CostPerRequest, c.WallS)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "simulate: %d cells in %.2fs\n", len(cells), time.Since(start).Seconds())
	if err := sim.WriteTable(stdout, cells); err != nil {
		return err
	}
	if *tiers {
		fmt.Fprintln(stdout, "\npredicted vs observed E2E per tier:")
		if err := sim.WriteTiers(stdout, cells); err != nil {
			return err
		}
	}
	if len(cfg.Profile) > 0 {
		fmt.Fprintf(stdout, "\nwindows of %v over %s, targets %s:\n", pr.Window, cfg.Profile, dashIfEmpty(pr.Targets.String()))
		if err := sim.WriteWindows(stdout, cells); err != nil {
			return err
		}
	}
	caps := sim.Capacities(cells, 2)
	fmt.Fprintln(stdout, "\ncapacity (highest λ with mean E2E ≤ 2 × its light-load mean):")
	for _, c := range caps {
		fmt.Fprintf(stdout, "  %-40s light %.3fs  swept %g  interpolated %s req/s\n", c.Label, c.LightE2E, c.Swept, fmtCap(c))
	}
	if *bound && len(rateList) > 0 {
		fmt.Fprintln(stdout, "\nfluid lower bound of mean E2E (routing/sim.FluidBound: no router without per-request length knowledge beats it):")
		first := sim.FluidBound(f, world.Seed, items, rateList[0])
		for _, r := range rateList {
			b := sim.FluidBound(f, world.Seed, items, r)
			fmt.Fprintf(stdout, "  λ=%-5g E2E ≥ %.3fs  (decode %.3fs, ×%.2f of λ=%g)  shares %s\n", r, b.E2E, b.Decode, b.E2E/first.E2E, rateList[0], fmtShares(f, b.Shares))
		}
	}
	if *out != "" {
		rep := &sim.Report{Command: "routebalance simulate " + strings.Join(args, " "), Cluster: f.Name, Data: *data,
			N: cfg.N, Seed: cfg.Seed, Burstiness: cfg.Burstiness, Goodput: cfg.Goodput.String(), Cells: cells, Capacity: caps}
		if err := sim.WriteFiles(*out, rep); err != nil {
			return err
		}
		names, err := plots.Write(*out, cells, *plotRate)
		if err != nil {
			return err
		}
		for _, c := range cells {
			if c.Autopilot == nil || len(c.Windows) == 0 {
				continue
			}
			name := "autopilot_timeline"
			if c.Policy != schedule.PolicyRouteBalance {
				name += "_" + c.Policy
			}
			if err := plots.Timeline(*out, name, c, cells); err != nil {
				return err
			}
			names = append(names, name)
		}
		fmt.Fprintf(stderr, "simulate: wrote results.json, results.csv and %d plots (png+svg) to %s\n", len(names), *out)
	}
	fmt.Fprintln(stdout, sim.SummaryLine(cells[len(cells)-1]))
	return nil
}

// oracleArms repeats every oracle arm once per mode of the comma list
// modes (both, length, quality; see sim.Ablation.Oracle), in list order;
// other arms are kept as they are.
func oracleArms(arms []sim.Arm, modes string) ([]sim.Arm, error) {
	var ms []string
	for _, m := range strings.Split(modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case "both":
			ms = append(ms, sim.OracleBoth)
		case sim.OracleLength, sim.OracleQuality, sim.OracleTaskLength:
			ms = append(ms, m)
		case "":
		default:
			return nil, fmt.Errorf("oracle: want both, length, quality or task-length, got %q", m)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("oracle: empty list")
	}
	var out []sim.Arm
	for _, a := range arms {
		if a.Policy.Name != schedule.PolicyOracle {
			out = append(out, a)
			continue
		}
		for _, m := range ms {
			a.Ablation.Oracle = m
			out = append(out, a)
		}
	}
	return out, nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func fmtCap(c sim.Capacity) string {
	if c.AllUnder {
		return "≥ " + strconv.FormatFloat(c.Swept, 'g', -1, 64)
	}
	return strconv.FormatFloat(c.Interpolated, 'f', 1, 64)
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("want positive numbers, got %q", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

// buildArms expands the policy, preset and ablation lists into arms:
// routebalance and oracle get one arm per preset (or the custom weights);
// every other policy one arm; each arm once per fixed batch size when a
// list is given.
func buildArms(policies, presets, weights string, threshold, slack float64, noLPT, noAdaptive bool, batchSizes string, ap *sim.AutopilotConfig) ([]sim.Arm, error) {
	type wp struct {
		name string
		w    routing.Weights
		ap   *sim.AutopilotConfig
	}
	var ws []wp
	switch {
	case weights != "" && presets != "":
		return nil, fmt.Errorf("give --preset or --weights, not both")
	case weights != "":
		w, err := routing.ParseWeights(weights)
		if err != nil {
			return nil, err
		}
		ws = append(ws, wp{name: routing.PresetCustom, w: w})
	default:
		if presets == "" {
			presets = routing.PresetBalanced
		}
		for _, p := range strings.Split(presets, ",") {
			p = strings.TrimSpace(p)
			if p == autopilot.PresetAutopilot {
				if ap == nil {
					return nil, fmt.Errorf("preset autopilot needs --slo targets, e.g. --slo p95_e2e_ms=3000")
				}
				ws = append(ws, wp{name: p, w: ap.WithDefaults().Start, ap: ap})
				continue
			}
			w, err := routing.PresetWeights(p)
			if err != nil {
				return nil, err
			}
			ws = append(ws, wp{name: p, w: w})
		}
	}
	var sizes []int
	for _, s := range strings.Split(batchSizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("batch-size: want positive integers, got %q", s)
		}
		sizes = append(sizes, k)
	}
	if len(sizes) == 0 {
		sizes = []int{0}
	}
	var arms []sim.Arm
	for _, p := range strings.Split(policies, ",") {
		p = strings.TrimSpace(p)
		pc := routing.PolicyConfig{Name: p}
		switch p {
		case schedule.PolicyThreshold:
			pc.Threshold = threshold
		case schedule.PolicyChimera:
			pc.Slack = slack
		}
		perPreset := p == schedule.PolicyRouteBalance || p == schedule.PolicyOracle
		for _, k := range sizes {
			abl := sim.Ablation{NoLPT: noLPT, NoAdaptive: noAdaptive, BatchSize: k}
			if perPreset {
				for _, x := range ws {
					arms = append(arms, sim.Arm{Policy: pc, Preset: x.name, Weights: x.w, Ablation: abl, Autopilot: x.ap})
				}
				continue
			}
			// Baselines ignore the weights; they carry the first preset's.
			arms = append(arms, sim.Arm{Policy: pc, Weights: ws[0].w, Ablation: abl})
		}
	}
	reg := schedule.NewRegistry()
	for _, a := range arms {
		if _, err := reg.New(a.Policy); err != nil {
			return nil, err
		}
	}
	return arms, nil
}

// fmtShares lists the non-zero request shares per tier.
func fmtShares(f *engine.ClusterFile, shares []float64) string {
	var b strings.Builder
	for i, s := range shares {
		if s <= 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s@%s=%.2f", f.Tiers[i].Model, f.Tiers[i].GPU, s)
	}
	return b.String()
}
