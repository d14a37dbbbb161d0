package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// getAuth is get with a bearer token.
func getAuth(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestServeMetricsListener: issue 16 item 2. By default /metrics is on a
// loopback listener of its own and not on the main (public) one; with
// --metrics-token the main listener serves it to that bearer token only.
func TestServeMetricsListener(t *testing.T) {
	const series = "routebalance_billing_meter_recorded_total"
	t.Run("default", func(t *testing.T) {
		c, err := parseServeFlags(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if host, _, err := net.SplitHostPort(c.metricsAddr); err != nil || !net.ParseIP(host).IsLoopback() || c.metricsToken != "" {
			t.Errorf("default --metrics-addr %q, token %q: want a loopback address and no token", c.metricsAddr, c.metricsToken)
		}
		url, stop := startServe(t, t.TempDir())
		defer stop() //nolint:errcheck
		if code, body := get(t, url+"/metrics"); strings.Contains(body, series) {
			t.Fatalf("the public listener serves /metrics without authentication: %d %.200s", code, body)
		}
	})
	t.Run("--metrics-token", func(t *testing.T) {
		url, stop := startServe(t, t.TempDir(), "--metrics-token", "s3cret-scrape-token")
		defer stop() //nolint:errcheck
		if code, _ := get(t, url+"/metrics"); code != 401 {
			t.Errorf("/metrics without the token: %d, want 401", code)
		}
		if code, _ := getAuth(t, url+"/metrics", "wrong"); code != 401 {
			t.Errorf("/metrics with a wrong token: %d, want 401", code)
		}
		if code, body := getAuth(t, url+"/metrics", "s3cret-scrape-token"); code != 200 || !strings.Contains(body, series) || !strings.Contains(body, "go_goroutines") {
			t.Fatalf("/metrics with the token: %d %.300s", code, body)
		}
	})
	t.Run("--metrics-addr", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // ask the OS for a free port
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		url, stop := startServe(t, t.TempDir(), "--metrics-addr", addr)
		defer stop() //nolint:errcheck
		if code, body := get(t, "http://"+addr+"/metrics"); code != 200 || !strings.Contains(body, series) {
			t.Fatalf("metrics listener: %d %.300s", code, body)
		}
		if _, body := get(t, url+"/metrics"); strings.Contains(body, series) {
			t.Fatal("the main listener still serves the metrics")
		}
	})
}

func TestServePprofListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // ask the OS for a free port
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url, stop := startServe(t, t.TempDir(), "--pprof-addr", addr)
	defer stop() //nolint:errcheck
	if code, body := get(t, "http://"+addr+"/debug/pprof/"); code != 200 || !strings.Contains(body, "allocs") || !strings.Contains(body, "goroutine") {
		t.Fatalf("pprof index: %d %.300s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("pprof goroutine profile: %d %.300s", code, body)
	}
	if _, body := get(t, url+"/debug/pprof/goroutine?debug=1"); strings.Contains(body, "goroutine profile") {
		t.Fatal("the main listener serves pprof")
	}
}
