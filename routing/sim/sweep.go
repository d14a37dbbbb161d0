package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// Ablation switches parts of the scheduler off (issue 6, claim 5).
type Ablation struct {
	NoLPT      bool `json:"no_lpt,omitempty"`
	NoAdaptive bool `json:"no_adaptive,omitempty"`
	// BatchSize > 0 fixes the batch limit.
	BatchSize int `json:"batch_size,omitempty"`
	// Oracle splits the oracle policy's knowledge (simulation only, for
	// the decomposition of the oracle's gain): OracleLength gives it the
	// true output lengths with the estimator's quality, OracleQuality the
	// true quality with the estimator's lengths; "" (OracleBoth) both.
	// OracleTaskLength gives it, with the estimator's quality, each
	// model's mean length on the prompt's true task (the world's
	// median·verbosity·e^{σ²/2}), without the per-prompt draw: the most a
	// prompt-intrinsic length estimate can know of a world whose draw is a
	// hash.
	Oracle string `json:"oracle,omitempty"`
}

// What the oracle policy is told (Ablation.Oracle).
const (
	OracleBoth       = ""
	OracleLength     = "length"
	OracleQuality    = "quality"
	OracleTaskLength = "task-length"
)

// String names the ablation for tables ("" for none).
func (a Ablation) String() string {
	s := ""
	add := func(p string) {
		if s != "" {
			s += "+"
		}
		s += p
	}
	if a.NoLPT {
		add("no-lpt")
	}
	if a.NoAdaptive {
		add("no-adaptive")
	}
	if a.BatchSize > 0 {
		add(fmt.Sprintf("batch-%d", a.BatchSize))
	}
	if a.Oracle != OracleBoth {
		add("oracle-" + a.Oracle)
	}
	return s
}

// Arm is one scheduler setting of a sweep: a policy, the weights on every
// request, and the ablation switches.
type Arm struct {
	Policy   routing.PolicyConfig
	Preset   string
	Weights  routing.Weights
	Ablation Ablation
	// Autopilot, when set, lets the controller set the weights (Weights
	// is then where it starts); it needs a *CoreRouter.
	Autopilot *AutopilotConfig
}

// ProfileRun is what Sweep needs for runs with a rate profile: the
// windows' width and the targets they are judged against.
type ProfileRun struct {
	Window  time.Duration
	Targets autopilot.Targets
}

// NewRouterFunc builds a fresh Router for one cell of an arm, so no state
// (fleet, online-learnt lengths) leaks from one cell into the next.
type NewRouterFunc func(arm Arm) (Router, error)

// Sweep runs every arm at every rate. cfg.Rate is replaced by each rate.
// progress (may be nil) sees each cell as it finishes.
//
// With cfg.Profile set, rates are ignored: each arm runs once over the
// profile (Cell.Rate its mean) and its cell carries the windows of pr.
func Sweep(ctx context.Context, cfg Config, w *World, items []workload.Item, arms []Arm, rates []float64, newRouter NewRouterFunc, progress func(Cell)) ([]Cell, error) {
	return SweepProfile(ctx, cfg, ProfileRun{Window: 10 * time.Second}, w, items, arms, rates, newRouter, progress)
}

// SweepProfile is Sweep with the windows' width and targets of profile
// runs.
func SweepProfile(ctx context.Context, cfg Config, pr ProfileRun, w *World, items []workload.Item, arms []Arm, rates []float64, newRouter NewRouterFunc, progress func(Cell)) ([]Cell, error) {
	var cells []Cell
	if len(cfg.Profile) > 0 {
		rates = []float64{cfg.Profile.Mean()}
	}
	for _, arm := range arms {
		for _, rate := range rates {
			r, err := newRouter(arm)
			if err != nil {
				return cells, fmt.Errorf("%s: %w", arm.Policy.Name, err)
			}
			c := cfg
			c.Rate = rate
			var drv *driver
			if arm.Autopilot != nil {
				cr, ok := r.(*CoreRouter)
				if !ok {
					return cells, fmt.Errorf("%s: the autopilot needs the single scheduler (no --replicas)", arm.Policy.Name)
				}
				ac := arm.Autopilot.WithDefaults()
				if err := ac.Validate(); err != nil {
					return cells, err
				}
				drv = newDriver(ac, cr, w, arm)
				c.Control = drv.control()
				arm.Weights = ac.Start
			}
			res, err := Run(ctx, c, w, items, arm.Weights, r)
			if closer, ok := r.(interface{ Close() }); ok {
				closer.Close()
			}
			if err != nil {
				return cells, fmt.Errorf("%s at λ=%v: %w", arm.Policy.Name, rate, err)
			}
			cell := Summarize(res, cfg.Goodput)
			cell.Policy, cell.Preset, cell.Weights = arm.Policy.Name, arm.Preset, arm.Weights.String()
			cell.Rate, cell.Variant = rate, arm.Ablation.String()
			if len(cfg.Profile) > 0 {
				cell.RateProfile = cfg.Profile.String()
				cell.Windows = Windows(res, cfg.Profile, pr.Window, pr.Targets)
				a := Attainment(cell.Windows)
				cell.Attainment = &a
			}
			if drv != nil {
				tr := drv.trace
				cell.Autopilot = &tr
			}
			cells = append(cells, cell)
			if progress != nil {
				progress(cell)
			}
		}
	}
	return cells, nil
}

// Label names a cell's arm: policy, preset (or weights) and variant.
func (c *Cell) Label() string {
	s := c.Policy
	if c.Preset != "" {
		s += "/" + c.Preset
	}
	if c.Variant != "" {
		s += " [" + c.Variant + "]"
	}
	return s
}

// Capacity is the highest rate an arm sustains: the largest λ whose mean
// end-to-end latency stays below Factor × the latency at the lowest swept
// rate (the light load).
type Capacity struct {
	Label string `json:"label"`
	// LightE2E is the mean E2E at the lowest rate.
	LightE2E float64 `json:"light_e2e_s"`
	// Swept is the highest swept rate under the bound (0 if none).
	Swept float64 `json:"swept_req_s"`
	// Interpolated is where the mean E2E crosses the bound, by linear
	// interpolation between the last rate under it and the first over it;
	// when every swept rate stays under, it is the highest swept rate and
	// AllUnder is set (the true capacity lies beyond the sweep).
	Interpolated float64 `json:"interpolated_req_s"`
	AllUnder     bool    `json:"all_under"`
}

// Capacities computes Capacity per arm label with the bound factor (the
// issue uses 2).
func Capacities(cells []Cell, factor float64) []Capacity {
	by := map[string][]Cell{}
	var order []string
	for _, c := range cells {
		l := c.Label()
		if _, ok := by[l]; !ok {
			order = append(order, l)
		}
		by[l] = append(by[l], c)
	}
	var out []Capacity
	for _, l := range order {
		cs := by[l]
		sort.Slice(cs, func(a, b int) bool { return cs[a].Rate < cs[b].Rate })
		bound := factor * cs[0].MeanE2E
		c := Capacity{Label: l, LightE2E: cs[0].MeanE2E, AllUnder: true}
		for k, x := range cs {
			if x.MeanE2E <= bound && x.Failed == 0 {
				c.Swept = x.Rate
				continue
			}
			c.AllUnder = false
			if k > 0 {
				p := cs[k-1]
				f := (bound - p.MeanE2E) / (x.MeanE2E - p.MeanE2E)
				c.Interpolated = p.Rate + f*(x.Rate-p.Rate)
			} else {
				c.Interpolated = 0
			}
			break
		}
		if c.AllUnder {
			c.Interpolated = c.Swept
		}
		out = append(out, c)
	}
	return out
}

// DefaultGoodput is the SLO the simulator's goodput uses unless told
// otherwise: first token within 2 s, whole answer within 10 s.
func DefaultGoodput() metrics.SLO {
	s, _ := metrics.ParseSLO("ttft:2000,e2el:10000")
	return s
}
