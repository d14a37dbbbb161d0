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

func TestServeMetricsListener(t *testing.T) {
	const series = "routebalance_billing_meter_recorded_total"
	t.Run("main listener", func(t *testing.T) {
		url, stop := startServe(t, t.TempDir())
		defer stop() //nolint:errcheck
		if code, body := get(t, url+"/metrics"); code != 200 || !strings.Contains(body, series) || !strings.Contains(body, "go_goroutines") {
			t.Fatalf("/metrics: %d %.300s", code, body)
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
