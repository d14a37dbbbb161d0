package fleet

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// stepClock is a clock the test moves.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *stepClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// vllmServer serves captured /metrics text and a /health whose status the
// test controls.
func vllmServer(t *testing.T, metricsFile string, healthy *atomic.Bool) *httptest.Server {
	t.Helper()
	body, err := os.ReadFile("testdata/" + metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-up" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestScraperAndProber(t *testing.T) {
	var healthy atomic.Bool
	srv := vllmServer(t, "vllm-v1.metrics", &healthy)
	f := New(Config{EjectAfter: 1}, []routing.Instance{
		{ID: "up", BaseURL: srv.URL + "/v1", APIKey: "sk-up"},
		{ID: "gone", BaseURL: "http://127.0.0.1:1", APIKey: "sk-up"}, // nothing listens on port 1
	})
	clock := &stepClock{t: t0}
	s := NewScraper(f, srv.Client(), clock, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	s.ScrapeOnce(ctx)
	snaps := f.Snapshot(t0, nil)
	if up := snaps[0]; up.Stale || up.Running != 12 || up.Waiting != 3 || up.KVUsage != 0.4375 {
		t.Errorf("scraped instance: %+v, want fresh 12/3/0.4375", up)
	}
	if gone := snaps[1]; !gone.Stale {
		t.Errorf("unreachable instance not stale: %+v", gone)
	}

	// Eject "up" by a failed request; probes bring it back only when
	// /health answers 200.
	m := f.Lookup("up")
	l := f.Admit(t0, m, LeaseSpec{Tokens: 1})
	f.Release(t0, l, routing.Outcome{Err: context.DeadlineExceeded, Upstream: true})
	if f.Healthy(m) {
		t.Fatal("not ejected")
	}
	s.ProbeOnce(ctx)
	if f.Healthy(m) {
		t.Fatal("re-admitted while /health fails")
	}
	healthy.Store(true)
	clock.add(time.Minute) // past the failed probe's back-off
	s.ProbeOnce(ctx)
	if !f.Healthy(m) {
		t.Fatal("not re-admitted after /health answered 200")
	}
}

// TestScraperRun: the scraper goroutine stops when its context ends.
func TestScraperRun(t *testing.T) {
	var healthy atomic.Bool
	srv := vllmServer(t, "vllm-v0.metrics", &healthy)
	f := New(Config{ScrapeInterval: 5 * time.Millisecond}, []routing.Instance{{ID: "a", BaseURL: srv.URL, APIKey: "sk-up"}})
	s := NewScraper(f, srv.Client(), fixedClock{t0}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	deadline := time.Now().Add(testwait.Bound)
	for f.Snapshot(t0, nil)[0].Stale {
		if time.Now().After(deadline) {
			t.Fatalf("no scrape within %v", testwait.Bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := f.Snapshot(t0, nil)[0].Running; got != 4 {
		t.Errorf("running = %v, want 4", got)
	}
}
