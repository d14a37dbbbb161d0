package schedule

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// goroutineID is the number runtime.Stack prints for the calling
// goroutine ("goroutine 42 [running]:").
func goroutineID() string {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	return string(b[:bytes.IndexByte(b, ' ')])
}

// whereEstimator records the goroutine each batch is estimated on.
type whereEstimator struct {
	mu    sync.Mutex
	where []string
}

func (w *whereEstimator) Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	w.mu.Lock()
	w.where = append(w.where, goroutineID())
	w.mu.Unlock()
	return priorEstimator{tokens: 100}.Estimate(ctx, prompts, models, priors, out)
}

func (w *whereEstimator) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.where[len(w.where)-1]
}

// TestLoneRequestIsDecidedOnItsOwnGoroutine: once the cluster's goroutine
// runs, a request that finds no batch being computed is decided on the
// goroutine that called Route (no hand-off to the cluster's goroutine and
// back), with the same decision as before.
func TestLoneRequestIsDecidedOnItsOwnGoroutine(t *testing.T) {
	est := &whereEstimator{}
	r, _ := startRouter(t, Config{}, Deps{Estimator: est})
	c := testCluster(PolicyRouteBalance, 3)
	ctx := context.Background()
	a, err := r.Route(ctx, c, &routing.Request{ID: "warm"}) // starts the cluster's goroutine
	if err != nil {
		t.Fatal(err)
	}
	a.Release(routing.Outcome{OutputTokens: 10})
	for i := range 5 {
		a, err := r.Route(ctx, c, &routing.Request{ID: "lone"})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := est.last(), goroutineID(); got != want {
			t.Errorf("request %d was estimated on goroutine %s, want the caller's %s", i, got, want)
		}
		if a.BatchSize != 1 || a.Instance.ID == "" {
			t.Errorf("request %d: batch size %d, instance %q; want a batch of one on some instance", i, a.BatchSize, a.Instance.ID)
		}
		a.Release(routing.Outcome{OutputTokens: 10})
	}
}

// TestConcurrentRequestsAreAllDecided: with requests deciding batches on
// their own goroutines and on the cluster's, none is left waiting (a
// request that queues while another goroutine finishes a batch is handed
// on), and no batch is computed twice at once.
func TestConcurrentRequestsAreAllDecided(t *testing.T) {
	est := &whereEstimator{}
	r, _ := startRouter(t, Config{}, Deps{Estimator: est})
	c := testCluster(PolicyRouteBalance, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				a, err := r.Route(ctx, c, &routing.Request{ID: "r"})
				if err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
				a.Release(routing.Outcome{OutputTokens: 5})
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 800 {
		t.Errorf("%d of 800 requests were decided", ok.Load())
	}
}
