package schedule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

// fakeSource is a ClusterSource over a mutable list.
type fakeSource struct {
	mu       sync.Mutex
	clusters []*routing.Cluster
}

func (s *fakeSource) set(cs ...*routing.Cluster) { s.mu.Lock(); s.clusters = cs; s.mu.Unlock() }

func (s *fakeSource) RoutingClusters(_ context.Context, tenantID string) ([]*routing.Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*routing.Cluster
	for _, c := range s.clusters {
		if c.TenantID == tenantID {
			out = append(out, c)
		}
	}
	return out, nil
}

// TestSyncStopsScrapingDeleted: issue 16 item 3. After a change the
// syncer applies at once, with no request to carry the new version: a
// deleted instance stops being scraped, and a deleted cluster's state and
// scrapers go. A request that resolved the old version before the change
// does not bring the deleted instance back.
func TestSyncStopsScrapingDeleted(t *testing.T) {
	var hitsA, hitsB atomic.Int32
	vllm := func(n *atomic.Int32) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.Write([]byte("vllm:num_requests_running 0\n"))
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := vllm(&hitsA), vllm(&hitsB)
	c1 := &routing.Cluster{ID: "c1", TenantID: "t1", Version: 1, Instances: []routing.Instance{
		{ID: "a", BaseURL: a.URL, Model: "m", GPU: "a10"}, {ID: "b", BaseURL: b.URL, Model: "m", GPU: "a10"},
	}}
	cfg := Config{}.WithDefaults()
	cfg.Fleet = fleet.Config{ScrapeInterval: 2 * time.Millisecond}
	r, err := NewRouter(cfg, Deps{HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx) //nolint:errcheck // returns nil
	src := &fakeSource{}
	src.set(c1)
	sy := NewSyncer(r, src, nil)
	go sy.Run(ctx) //nolint:errcheck // returns nil

	as, err := r.Route(ctx, c1, &routing.Request{ID: "r1", PromptTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	as.Release(routing.Outcome{})
	waitUntil(t, "both instances scraped", func() bool { return hitsA.Load() > 0 && hitsB.Load() > 0 })

	// Instance b is deleted: version 2 without it.
	c2 := &routing.Cluster{ID: "c1", TenantID: "t1", Version: 2, Instances: c1.Instances[:1]}
	src.set(c2)
	sy.TenantChanged("t1")
	waitUntil(t, "b dropped from the state", func() bool { return len(r.State("c1")) == 1 })
	// A request carrying the stale version 1 must not restore b.
	as, err = r.Route(ctx, c1, &routing.Request{ID: "r2", PromptTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	as.Release(routing.Outcome{})
	settle(t, &hitsB, "deleted instance b")
	if n := len(r.State("c1")); n != 1 {
		t.Errorf("a stale request brought the deleted instance back: %d instances", n)
	}

	// The cluster is deleted.
	src.set()
	sy.TenantChanged("t1")
	waitUntil(t, "cluster forgotten", func() bool { return r.State("c1") == nil })
	settle(t, &hitsA, "instance a of the deleted cluster")
}

// settle checks that n stops growing: a scrape already in flight when the
// change was applied may still land, so it first waits (up to 30 s) for
// two readings a quiet window apart to agree — a scraper still running
// every 2 ms never agrees — and then requires no growth over one more
// window. The window is 250 ms (125 scrape intervals): an in-flight scrape
// that a loaded machine delays past 50 ms no longer reads as a scraper
// still running.
func settle(t *testing.T, n *atomic.Int32, what string) {
	t.Helper()
	const window = 250 * time.Millisecond
	deadline := time.Now().Add(testwait.Bound)
	prev := n.Load()
	for {
		time.Sleep(window)
		cur := n.Load()
		if cur == prev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still being scraped after its deletion (%d more in the last %v)", what, cur-prev, window)
		}
		prev = cur
	}
	time.Sleep(window)
	if after := n.Load(); after != prev {
		t.Errorf("%s scraped %d more times after its deletion", what, after-prev)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, cond)
}

// TestForgetRejectsWaiting: a forgotten cluster's waiting requests fail
// with ErrClosed and a later request builds the cluster afresh.
func TestForgetRejectsWaiting(t *testing.T) {
	r, _ := startRouter(t, Config{}, Deps{})
	c := testCluster("round-robin", 1)
	c.Instances[0].MaxConcurrency = 1
	hold := route(t, r, c, &routing.Request{ID: "hold", PromptTokens: 1})
	errc := make(chan error, 1)
	go func() {
		_, err := r.Route(context.Background(), c, &routing.Request{ID: "wait", PromptTokens: 1})
		errc <- err
	}()
	waitUntil(t, "second request queued", func() bool { st := r.State("c1"); return len(st) == 1 && st[0].Queue == 1 })
	if !r.Forget("c1") {
		t.Fatal("Forget: cluster not held")
	}
	select {
	case err := <-errc:
		if err != routing.ErrClosed {
			t.Errorf("waiting request: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting request not released by Forget")
	}
	hold.Release(routing.Outcome{})
	if r.Forget("c1") {
		t.Error("Forget twice reported the cluster held")
	}
	route(t, r, c, &routing.Request{ID: "again", PromptTokens: 1}).Release(routing.Outcome{})
}
