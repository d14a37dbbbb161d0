// Package dispatchtest has the test helpers of the inference path's
// journey, shared by the tests of routing/dispatch and api.
package dispatchtest

import (
	"context"
	"sync"
	"testing"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/dispatch"
)

// Router wraps a dispatch.Router and counts what passes: requests (copied
// as routed), grants, releases and their outcomes. routing.Assignment
// forwards only the first Release, so released == granted after settling
// means every assignment was released once and none leaked. Safe for
// concurrent use.
type Router struct {
	// Inner is the router that decides (the real schedule.Router or a
	// test's own).
	Inner dispatch.Router
	// InFlight, when set, reports the inner router's own in-flight
	// counters per instance; Settled waits for them to return to zero.
	InFlight func() map[string]int
	// OnToken, when set, is called with every streamed-token count
	// before the inner assignment's Progress (a test may panic in it).
	OnToken func(n int)

	mu       sync.Mutex
	granted  int
	released int
	outcomes []routing.Outcome
	requests []routing.Request
}

var _ dispatch.Router = (*Router)(nil)

// Route records req, routes it on Inner and wraps the assignment so its
// release and progress are counted.
func (r *Router) Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error) {
	r.mu.Lock()
	cp := *req
	cp.Exclude = append([]string(nil), req.Exclude...)
	r.requests = append(r.requests, cp)
	onToken := r.OnToken
	r.mu.Unlock()
	a, err := r.Inner.Route(ctx, c, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.granted++
	r.mu.Unlock()
	return routing.NewAssignment(a.Decision, func(o routing.Outcome) {
		r.mu.Lock()
		r.released++
		r.outcomes = append(r.outcomes, o)
		r.mu.Unlock()
		a.Release(o)
	}, func(n int) {
		if onToken != nil {
			onToken(n)
		}
		a.Progress(n)
	}), nil
}

// Counts returns the grants, releases and outcomes so far.
func (r *Router) Counts() (granted, released int, outcomes []routing.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.granted, r.released, append([]routing.Outcome(nil), r.outcomes...)
}

// Requests returns the requests routed so far, in order.
func (r *Router) Requests() []routing.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]routing.Request(nil), r.requests...)
}

// LastRequest returns the last request routed.
func (r *Router) LastRequest() routing.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[len(r.requests)-1]
}

// Settled waits until every granted assignment was released and, with
// InFlight, until the inner router counts nothing in flight, and returns
// the counts.
func (r *Router) Settled(t testing.TB) (granted, released int, outcomes []routing.Outcome) {
	t.Helper()
	testwait.Until(t, "every assignment to be released", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.released >= r.granted
	})
	if r.InFlight != nil {
		testwait.Until(t, "the router's in-flight counters to return to zero", func() bool {
			for _, n := range r.InFlight() {
				if n != 0 {
					return false
				}
			}
			return true
		})
	}
	return r.Counts()
}
