package fleet

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

// TestScrapeBackoff: issue 16 item 3. An instance whose scrapes fail (here
// its stored upstream key is refused with 401) is scraped with exponential
// back-off and logged at a bounded rate, not every 250 ms forever; once it
// answers again it is scraped every round.
func TestScrapeBackoff(t *testing.T) {
	var hits atomic.Int32
	var ok atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !ok.Load() {
			http.Error(w, "invalid api key", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("vllm:num_requests_running 2\n"))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := New(Config{}, []routing.Instance{{ID: "bad-key", BaseURL: srv.URL, APIKey: "sk-wrong"}})
	clock := &stepClock{t: t0}
	s := NewScraper(f, srv.Client(), clock, log)
	ctx := context.Background()

	const rounds = 400 // 100 s at the default 250 ms interval
	for range rounds {
		s.ScrapeOnce(ctx)
		clock.add(f.Config().ScrapeInterval)
	}
	// Attempts at 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 61.5, 91.5 s.
	if n := hits.Load(); n < 6 || n > 12 {
		t.Errorf("%d scrapes of a failing instance in 100 s, want about 9 (exponential back-off to 30 s; %d without it)", n, rounds)
	}
	// First failure, then at most one line per minute.
	if n := strings.Count(logs.String(), "scrape failing"); n < 1 || n > 3 {
		t.Errorf("%d log lines about the failing scrape in 100 s, want 1–3:\n%s", n, logs.String())
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 3 {
		t.Errorf("%d log lines in all, want at most 3:\n%s", lines, logs.String())
	}

	ok.Store(true)
	clock.add(f.Config().MaxBackoff) // past the longest back-off
	s.ScrapeOnce(ctx)
	if snap := f.Snapshot(clock.Now(), nil)[0]; snap.Stale || snap.Running != 2 {
		t.Fatalf("after recovery: %+v, want a fresh scrape", snap)
	}
	if !strings.Contains(logs.String(), "scrape recovered") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
	before := hits.Load()
	for range 4 {
		clock.add(f.Config().ScrapeInterval)
		s.ScrapeOnce(ctx)
	}
	if got := hits.Load() - before; got != 4 {
		t.Errorf("%d scrapes in 4 rounds after recovery, want 4", got)
	}
}

// TestScrapeRemovedInstance: issue 16 item 3. An instance removed from the
// fleet (deleted, or dropped by a new cluster version) is not scraped from
// the next round on.
func TestScrapeRemovedInstance(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("vllm:num_requests_running 1\n"))
	}))
	defer srv.Close()
	keep := routing.Instance{ID: "keep", BaseURL: "http://127.0.0.1:1"}
	f := New(Config{}, []routing.Instance{keep, {ID: "gone", BaseURL: srv.URL}})
	s := NewScraper(f, srv.Client(), &stepClock{t: t0}, slog.New(slog.DiscardHandler))
	s.ScrapeOnce(context.Background())
	if hits.Load() != 1 {
		t.Fatalf("%d scrapes before removal, want 1", hits.Load())
	}
	f.Rebuild([]routing.Instance{keep})
	for range 5 {
		s.ScrapeOnce(context.Background())
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("removed instance scraped %d more times", n-1)
	}
}

// TestScrapeNoRedirect: issue 16 "Also". The scraper follows no redirect,
// so the instance's key never reaches another host:port.
func TestScrapeNoRedirect(t *testing.T) {
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		w.Write([]byte("vllm:num_requests_running 1\n"))
	}))
	defer other.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	f := New(Config{EjectAfter: 1}, []routing.Instance{{ID: "r", BaseURL: redir.URL, APIKey: "sk-secret"}})
	clock := &stepClock{t: t0}
	s := NewScraper(f, http.DefaultClient, clock, slog.New(slog.DiscardHandler))
	s.ScrapeOnce(context.Background())
	if snap := f.Snapshot(clock.Now(), nil)[0]; !snap.Stale {
		t.Errorf("a redirected scrape counted as a reading: %+v", snap)
	}
	m := f.Lookup("r")
	l := f.Admit(clock.Now(), m, LeaseSpec{Tokens: 1})
	f.Release(clock.Now(), l, routing.Outcome{Err: context.DeadlineExceeded, Upstream: true})
	s.ProbeOnce(context.Background())
	if n := leaked.Load(); n != 0 {
		t.Errorf("Authorization sent to the redirect target %d times", n)
	}
	if f.Healthy(m) {
		t.Error("a redirected /health re-admitted the instance")
	}
}
