package sim

import (
	"context"
	"math"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/fleet"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// CoreRouter drives the real scheduler (schedule.Core) for the simulator:
// every batch goes through Core.Assign, every token through Core.Progress,
// every completion through Core.Release, and engine gauges reach its fleet
// as the live scraper's readings would. It adds no decision logic of its
// own.
type CoreRouter struct {
	core    *schedule.Core
	index   map[string]int // instance ID → index
	members []*fleet.Member
	out     []*Job // jobs notified during the current call
	labels  *oracleLabels
	// cfg and deps are what the Core was built with (the autopilot's
	// replays reuse them read-only).
	cfg  schedule.Config
	deps schedule.Deps
}

var _ Router = (*CoreRouter)(nil)

// NewCoreRouter builds a fresh Core for the world's cluster with the arm's
// policy. deps.NoScrape is forced (the loop feeds gauges itself) and
// deps.Labels, when nil, is set to the world's true labels for the oracle.
func NewCoreRouter(cfg schedule.Config, deps schedule.Deps, w *World, arm Arm) (*CoreRouter, error) {
	cfg.Batch.NoLPT = cfg.Batch.NoLPT || arm.Ablation.NoLPT
	cfg.Batch.NoAdaptive = cfg.Batch.NoAdaptive || arm.Ablation.NoAdaptive
	if arm.Ablation.BatchSize > 0 {
		cfg.Batch.Fixed = arm.Ablation.BatchSize
	}
	deps.NoScrape = true
	r := &CoreRouter{index: map[string]int{}}
	if deps.Labels == nil {
		r.labels = &oracleLabels{w: w, items: map[*routing.Request]*workload.Item{}, mode: arm.Ablation.Oracle}
		deps.Labels = r.labels
	}
	cl := w.Cluster
	cl.Policy = arm.Policy
	cl.Instances = append([]routing.Instance(nil), w.Cluster.Instances...)
	core, err := schedule.NewCore(cfg, deps, &cl)
	if err != nil {
		return nil, err
	}
	r.core, r.cfg, r.deps = core, cfg, deps
	for i, in := range cl.Instances {
		r.index[in.ID] = i
		r.members = append(r.members, core.Fleet().Lookup(in.ID))
	}
	return r, nil
}

// SeedServed copies a live instance's served count into the replay's
// fleet (unknown ids are ignored), so it explores like the live router.
func (r *CoreRouter) SeedServed(id string, n int) {
	if i, ok := r.index[id]; ok {
		r.core.Fleet().SeedServed(r.members[i], n)
	}
}

// BatchLimit is the Core's batch-formation rule.
func (r *CoreRouter) BatchLimit(now time.Time) int { return r.core.BatchLimit(now) }

// Assign decides the batch with one Core.Assign call.
func (r *CoreRouter) Assign(ctx context.Context, now time.Time, batch []*Job, done []*Job) []*Job {
	tickets := make([]*schedule.Ticket, len(batch))
	for k, j := range batch {
		t := &schedule.Ticket{Req: &j.Req, Notify: r.notifier(j)}
		j.Handle = t
		tickets[k] = t
		if r.labels != nil {
			r.labels.items[&j.Req] = j.Item
		}
	}
	r.out = done
	r.core.Assign(ctx, now, tickets)
	done, r.out = r.out, nil
	if r.labels != nil {
		for _, j := range batch {
			delete(r.labels.items, &j.Req)
		}
	}
	return done
}

func (r *CoreRouter) notifier(j *Job) func(*schedule.Ticket) {
	return func(t *schedule.Ticket) {
		j.Err = t.Err
		j.Decision = t.Decision
		if t.Err == nil {
			j.Instance = r.index[t.Decision.Instance.ID]
		}
		r.out = append(r.out, j)
	}
}

// Progress forwards streamed tokens to the Core.
func (r *CoreRouter) Progress(now time.Time, j *Job, tokens int) {
	r.core.Progress(now, j.Handle.(*schedule.Ticket), tokens)
}

// Release ends the job's lease; queued jobs it admits come back.
func (r *CoreRouter) Release(now time.Time, j *Job, o routing.Outcome, done []*Job) []*Job {
	r.out = done
	r.core.Release(now, j.Handle.(*schedule.Ticket), o)
	done, r.out = r.out, nil
	return done
}

// Scrape reports an engine's gauges as a /metrics reading.
func (r *CoreRouter) Scrape(now time.Time, i int, s engine.State) {
	if m := r.members[i]; m != nil {
		r.core.Fleet().ReportScrape(now, m, fleet.Scrape{Running: float64(s.Running), Waiting: float64(s.Waiting), KVUsage: s.KVUsage}, nil)
	}
}

// Close rejects anything still queued.
func (r *CoreRouter) Close() { r.core.Close() }

// oracleLabels gives the oracle policy the truth: the data's quality labels
// and the world's output lengths, or only one of them (mode, an
// Ablation.Oracle value) over the estimator's own estimate of the other.
type oracleLabels struct {
	w     *World
	items map[*routing.Request]*workload.Item
	mode  string
}

// TrueLabels fills out with the labels of req's prompt. In the split modes
// out holds the estimator's estimate on entry and only the told half is
// overwritten (the memo stays, so online length learning goes on).
func (o *oracleLabels) TrueLabels(req *routing.Request, models []string, out *routing.PromptEstimate) bool {
	it := o.items[req]
	if it == nil || len(it.Scores) == 0 {
		return false
	}
	for _, name := range models {
		if _, ok := it.Scores[name]; !ok {
			return false
		}
	}
	quality, length := o.mode == OracleBoth || o.mode == OracleQuality, o.mode == OracleBoth || o.mode == OracleLength
	if quality && length {
		out.Reset(len(models))
	} else if len(out.Quality) != len(models) || len(out.Length) != len(models) || len(out.Hist) != len(models) || len(out.Source) != len(models) {
		return false // no estimate to keep half of
	}
	for m, name := range models {
		if quality {
			out.Quality[m] = it.Scores[name]
			out.Source[m] = routing.SourceOracle
		}
		if o.mode == OracleTaskLength {
			if mean, median, ok := o.w.TaskLength(it.Task, name); ok {
				out.Length[m] = mean
				out.Hist[m] = logNormalHist(median, o.w.File.OutputLengths.Sigma)
			}
			continue
		}
		if !length {
			continue
		}
		if n, ok := o.w.TrueLength(it.Prompt, it.Task, name); ok {
			out.Length[m] = float64(n)
			out.Hist[m] = routing.LengthHist{}
			out.Hist[m].Add(float64(n), 1)
		}
	}
	return true
}

// logNormalHist is a log-normal length distribution (median, σ) as 16
// equal-weight quantile points.
func logNormalHist(median, sigma float64) routing.LengthHist {
	var h routing.LengthHist
	const k = 16
	for i := range k {
		z := math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/k-1)
		h.Add(median*math.Exp(sigma*z), 1.0/k)
	}
	return h
}
