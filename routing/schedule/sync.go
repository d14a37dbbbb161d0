package schedule

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// Forget stops the cluster's scheduling goroutine, scraper and prober at
// once and drops its state (a deleted cluster). Requests still waiting for
// an instance fail with routing.ErrClosed; admitted requests finish and
// release normally. It reports whether the router had the cluster. A
// later request for the same id builds it afresh.
func (r *Router) Forget(clusterID string) bool {
	r.mu.Lock()
	run := r.clusters[clusterID]
	if run == nil {
		r.mu.Unlock()
		return false
	}
	delete(r.clusters, clusterID)
	notStarted := false
	for i, s := range r.starting {
		if s == run {
			r.starting = append(r.starting[:i], r.starting[i+1:]...)
			notStarted = true
			break
		}
	}
	r.mu.Unlock()
	run.mu.Lock()
	run.stopped = true
	cancel := run.cancel
	run.mu.Unlock()
	if cancel != nil {
		cancel() // the loop's deferred stop rejects what is pending
	}
	if notStarted {
		run.stop()
	}
	run.log.Debug("cluster forgotten")
	return true
}

// Apply hands the router a newer version of a cluster it schedules, to be
// applied at once rather than before the next request: removed instances
// stop being scraped and their queued requests are assigned again. An
// unknown cluster or a version not newer than the one held is ignored; it
// reports whether the version was taken.
func (r *Router) Apply(c *routing.Cluster) bool {
	r.mu.Lock()
	run := r.clusters[c.ID]
	r.mu.Unlock()
	if run == nil {
		return false
	}
	run.mu.Lock()
	if run.stopped || c.Version <= run.version {
		run.mu.Unlock()
		return false
	}
	run.version, run.latest = c.Version, cloneCluster(c)
	run.mu.Unlock()
	select {
	case run.wake <- struct{}{}:
	default:
	}
	return true
}

// tenantClusters returns the ids of the clusters of tenantID the router
// holds (every tenant's when tenantID is "").
func (r *Router) tenantClusters(tenantID string) map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for id, run := range r.clusters {
		if tenantID == "" || run.tenant == tenantID {
			out[run.tenant] = append(out[run.tenant], id)
		}
	}
	return out
}

// ClusterSource loads a tenant's current clusters with their instances
// and the tenant's configuration version, as the scheduler routes them. A
// tenant without clusters (or that no longer exists) yields none and no
// error. Called by Syncer from its own goroutine; must honour ctx.
// tenants.Service implements it.
type ClusterSource interface {
	RoutingClusters(ctx context.Context, tenantID string) ([]*routing.Cluster, error)
}

// SyncTenant brings the router's clusters of tenantID up to date with src:
// clusters that are gone are forgotten (their scrapers stop at once) and
// the others get their current version applied (deleted instances stop
// being scraped). Clusters the router does not hold are not created.
func (r *Router) SyncTenant(ctx context.Context, src ClusterSource, tenantID string) error {
	held := r.tenantClusters(tenantID)[tenantID]
	if len(held) == 0 {
		return nil
	}
	cs, err := src.RoutingClusters(ctx, tenantID)
	if err != nil {
		return err
	}
	current := make(map[string]*routing.Cluster, len(cs))
	for _, c := range cs {
		current[c.ID] = c
	}
	for _, id := range held {
		if c := current[id]; c != nil {
			r.Apply(c)
		} else {
			r.Forget(id)
		}
	}
	return nil
}

// Syncer applies tenants' configuration changes to a Router as they
// happen: TenantChanged (from this process's writes or another replica's
// notification) queues the tenant, and Run syncs each queued tenant once,
// coalescing bursts. Its methods are safe for concurrent use and never
// block the caller.
type Syncer struct {
	router *Router
	src    ClusterSource
	log    *slog.Logger
	// retry is the pause before a tenant whose sync failed is tried again.
	retry time.Duration

	mu    sync.Mutex
	dirty map[string]bool
	all   bool
	wake  chan struct{}
}

// NewSyncer returns a syncer of r from src; log may be nil.
func NewSyncer(r *Router, src ClusterSource, log *slog.Logger) *Syncer {
	if log == nil {
		log = slog.Default()
	}
	return &Syncer{router: r, src: src, log: log, retry: time.Second, dirty: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// TenantChanged queues tenantID for a sync.
func (s *Syncer) TenantChanged(tenantID string) {
	s.mu.Lock()
	s.dirty[tenantID] = true
	s.mu.Unlock()
	s.poke()
}

// AllChanged queues every tenant the router holds (after missed
// notifications, e.g. a reconnect).
func (s *Syncer) AllChanged() {
	s.mu.Lock()
	s.all = true
	s.mu.Unlock()
	s.poke()
}

func (s *Syncer) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run syncs queued tenants until ctx is done. A tenant whose sync fails
// (the database is briefly down) is queued again and retried after a
// pause.
func (s *Syncer) Run(ctx context.Context) error {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-retry:
			retry = nil
		}
		s.mu.Lock()
		dirty, all := s.dirty, s.all
		s.dirty, s.all = map[string]bool{}, false
		s.mu.Unlock()
		if all {
			for t := range s.router.tenantClusters("") {
				dirty[t] = true
			}
		}
		failed := false
		for t := range dirty {
			if err := s.router.SyncTenant(ctx, s.src, t); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.WarnContext(ctx, "cluster sync failed; retrying", slog.String("tenant_id", t), slog.Any("err", err))
				s.mu.Lock()
				s.dirty[t] = true
				s.mu.Unlock()
				failed = true
			}
		}
		if failed && retry == nil {
			retry = time.After(s.retry)
		}
	}
}
