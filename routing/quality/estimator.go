package quality

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/routebalance/routebalance/routing"
)

// ForCluster returns the estimator of one cluster's requests: for each
// prompt and model, the cluster's own index when it knows the model
// (routing.SourceCluster), else the operator-wide estimator
// (routing.SourceIndex), else the instance's prior (routing.SourcePrior).
// Output lengths and the memo come from the operator-wide estimator when
// there is one (it learns lengths from every served request), else from
// the cluster's index. The scheduler binds it once per cluster version
// (schedule.ClusterBinder); calls for one cluster do not overlap, and a
// call allocates nothing once its scratch is sized.
func (s *Store) ForCluster(clusterID string) *ClusterEstimator {
	return &ClusterEstimator{s: s, id: strings.Clone(clusterID)}
}

// ClusterEstimator is a Store's estimator of one cluster (ForCluster).
type ClusterEstimator struct {
	s  *Store
	id string

	mu      sync.Mutex
	scratch []routing.PromptEstimate
}

// Estimate fills out[j] for prompts[j] over models; see ForCluster.
func (c *ClusterEstimator) Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	idx := c.s.Index(c.id)
	g := c.s.global
	switch {
	case idx == nil && g == nil:
		fillPriors(prompts, models, priors, c.s.cfg.DefaultOutputTokens, out)
		return nil
	case idx == nil:
		return g.Estimate(ctx, prompts, models, priors, out)
	case g == nil:
		if err := idx.Estimate(ctx, prompts, models, priors, out); err != nil {
			return err
		}
		for j := range out {
			relabel(&out[j])
		}
		return nil
	}
	if err := g.Estimate(ctx, prompts, models, priors, out); err != nil {
		// The cluster's own index can still answer.
		c.s.log.WarnContext(ctx, "operator-wide estimator failed; cluster index only", slog.String("cluster", c.id), slog.Any("err", err))
		if err := idx.Estimate(ctx, prompts, models, priors, out); err != nil {
			return err
		}
		for j := range out {
			relabel(&out[j])
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cap(c.scratch) < len(out) {
		c.scratch = append(c.scratch[:cap(c.scratch)], make([]routing.PromptEstimate, len(out)-cap(c.scratch))...)
	}
	sc := c.scratch[:len(out)]
	if err := idx.Estimate(ctx, prompts, models, priors, sc); err != nil {
		c.s.log.WarnContext(ctx, "cluster quality index failed; operator-wide estimates", slog.String("cluster", c.id), slog.Any("err", err))
		return nil
	}
	for j := range out {
		for m := range out[j].Quality {
			if m < len(sc[j].Source) && sc[j].Source[m] == routing.SourceIndex {
				out[j].Quality[m], out[j].Source[m] = sc[j].Quality[m], routing.SourceCluster
			}
		}
	}
	return nil
}

// ObserveLengthMemo passes a served request's output length to the
// estimator whose memo the decision carries (the operator-wide one), or
// to the cluster's index by prompt when there is none.
func (c *ClusterEstimator) ObserveLengthMemo(memo uint64, prompt, model string, tokens int) {
	if g := c.s.global; g != nil {
		switch lo := g.(type) {
		case interface {
			ObserveLengthMemo(memo uint64, prompt, model string, tokens int)
		}:
			lo.ObserveLengthMemo(memo, prompt, model, tokens)
		case interface {
			ObserveLength(prompt, model string, tokens int)
		}:
			lo.ObserveLength(prompt, model, tokens)
		}
		return
	}
	if idx := c.s.Index(c.id); idx != nil {
		idx.ObserveLength(prompt, model, tokens)
	}
}

// relabel marks the cluster index's own estimates as the cluster's.
func relabel(e *routing.PromptEstimate) {
	for m, src := range e.Source {
		if src == routing.SourceIndex {
			e.Source[m] = routing.SourceCluster
		}
	}
}

// fillPriors is the estimate of a cluster with no knowledge at all.
func fillPriors(prompts, models []string, priors []float64, tokens float64, out []routing.PromptEstimate) {
	for j := range prompts {
		e := &out[j]
		e.Reset(len(models))
		for m := range models {
			q := 0.5
			if m < len(priors) {
				q = priors[m]
			}
			e.Quality[m], e.Source[m] = q, routing.SourcePrior
			e.Length[m] = tokens
		}
	}
}
