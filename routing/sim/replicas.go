package sim

import (
	"context"
	"errors"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
)

// ReplicaRouter simulates N router replicas behind one load balancer over
// one fleet: every replica is its own Router (its own scheduler, fleet view,
// dead reckoning and online-learnt estimators), arrivals are spread over the
// replicas round-robin by arrival index (what a Kubernetes Service or an L7
// balancer does with many short connections), and a replica learns of the
// other replicas' work only through the shared scrape — every replica gets
// every engine reading, as every replica's scraper polls every instance's
// /metrics. Progress and Release of a job go to the replica that admitted it.
//
// With the event loop's zero decision cost every request is decided on
// arrival by its own replica (a batch of one), so the loop's single
// scheduler-busy time does not couple the replicas. With a measured decision
// cost the loop serialises the replicas' decisions, which overstates the
// scheduling delay of N > 1; the herding study uses DecisionCost 0.
type ReplicaRouter struct {
	replicas []Router
	owner    map[*Job]int
	parts    [][]*Job
}

var _ Router = (*ReplicaRouter)(nil)

// NewReplicaRouter builds n replicas with newReplica (called n times, each
// call a fresh Router).
func NewReplicaRouter(n int, newReplica func() (Router, error)) (*ReplicaRouter, error) {
	if n < 1 {
		return nil, errors.New("replicas: n must be >= 1")
	}
	r := &ReplicaRouter{owner: map[*Job]int{}, parts: make([][]*Job, n)}
	for range n {
		rr, err := newReplica()
		if err != nil {
			return nil, err
		}
		r.replicas = append(r.replicas, rr)
	}
	return r, nil
}

// Replicas is the number of replicas.
func (r *ReplicaRouter) Replicas() int { return len(r.replicas) }

// BatchLimit is the largest of the replicas' limits: the loop forms one
// batch, which Assign splits by replica.
func (r *ReplicaRouter) BatchLimit(now time.Time) int {
	n := 1
	for _, rr := range r.replicas {
		n = max(n, rr.BatchLimit(now))
	}
	return n
}

// replicaOf is the replica the load balancer sends job j to.
func (r *ReplicaRouter) replicaOf(j *Job) int { return j.Index % len(r.replicas) }

// Assign hands each job of the batch to its replica; each replica decides
// its part in one call.
func (r *ReplicaRouter) Assign(ctx context.Context, now time.Time, batch []*Job, done []*Job) []*Job {
	for k := range r.parts {
		r.parts[k] = r.parts[k][:0]
	}
	for _, j := range batch {
		k := r.replicaOf(j)
		r.owner[j] = k
		r.parts[k] = append(r.parts[k], j)
	}
	for k, part := range r.parts {
		if len(part) > 0 {
			done = r.replicas[k].Assign(ctx, now, part, done)
		}
	}
	return done
}

// Progress goes to the job's replica.
func (r *ReplicaRouter) Progress(now time.Time, j *Job, tokens int) {
	r.replicas[r.owner[j]].Progress(now, j, tokens)
}

// Release goes to the job's replica; queued jobs its freed slot admits (on
// that replica only) come back.
func (r *ReplicaRouter) Release(now time.Time, j *Job, o routing.Outcome, done []*Job) []*Job {
	k := r.owner[j]
	delete(r.owner, j)
	return r.replicas[k].Release(now, j, o, done)
}

// Scrape gives every replica the reading.
func (r *ReplicaRouter) Scrape(now time.Time, i int, s engine.State) {
	for _, rr := range r.replicas {
		rr.Scrape(now, i, s)
	}
}

// Close closes every replica that can be closed.
func (r *ReplicaRouter) Close() {
	for _, rr := range r.replicas {
		if c, ok := rr.(interface{ Close() }); ok {
			c.Close()
		}
	}
}
