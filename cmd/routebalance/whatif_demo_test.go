package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWhatIfMatchesObservedDemoTraffic sends Poisson traffic with the demo
// tenant's key through the router to the emulated cluster, waits until the
// ledger holds all of it, then asks the what-if preview for the weights
// that traffic was routed with: it must replay the observed traffic
// (source "observed", its arrival rate) and predict a mean E2E within
// ±30 % of the observed mean for the same requests (issue 15 item 1).
func TestWhatIfMatchesObservedDemoTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and 13 emulated instances")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--time-scale", "0.25"}, &out, &errOut)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C") {
		select {
		case err := <-done:
			t.Fatalf("demo exited: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not up; stdout: %s stderr: %s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := out.String()
	key := regexp.MustCompile(`API key:\s+(\S+)`).FindStringSubmatch(s)
	base := regexp.MustCompile(`Dashboard:\s+(http://\S+)/`).FindStringSubmatch(s)
	login := regexp.MustCompile(`log in as (\S+) / (\S+)`).FindStringSubmatch(s)
	if key == nil || base == nil || login == nil {
		t.Fatalf("no key, URL or login in:\n%s", s)
	}
	call := func(method, path, auth string, body any, dst any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base[1]+path, rd)
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if dst != nil && res.StatusCode < 300 {
			if err := json.Unmarshal(raw, dst); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, raw)
			}
		}
		if res.StatusCode >= 300 {
			t.Logf("%s %s: %d %s", method, path, res.StatusCode, raw)
		}
		return res.StatusCode
	}

	// 200 Poisson arrivals at 12 req/s (the demo cluster is far from saturated), a mix of prompts, some streamed.
	const n = 200
	rng := rand.New(rand.NewPCG(7, 15))
	prompts := []string{
		"A train travels 120 km in 2 hours. How far does it travel in 5 hours?",
		"Write a Python function that reverses a linked list.",
		"Which planet is known as the red planet?",
		"Explain the difference between TCP and UDP.",
		"Summarise the causes of the French revolution.",
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(rng.ExpFloat64() / 12 * float64(time.Second)))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := map[string]any{"model": "auto", "stream": i%3 == 0, "messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("%s (%d)", prompts[i%len(prompts)], i)}}}
			b, _ := json.Marshal(body)
			req, _ := http.NewRequestWithContext(ctx, "POST", base[1]+"/v1/chat/completions", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+key[1])
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			if err != nil || res.StatusCode != 200 {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of %d requests failed", failed, n)
	}

	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if st := call("POST", "/api/v1/login", "", map[string]string{"email": login[1], "password": login[2]}, &tok); st != 200 {
		t.Fatal("login failed")
	}
	// The meter writes in batches: wait until the ledger has every request.
	for end := time.Now().Add(30 * time.Second); ; {
		var u struct {
			Total struct {
				Requests int `json:"requests"`
			} `json:"total"`
		}
		call("GET", "/api/v1/usage", tok.AccessToken, nil, &u)
		if u.Total.Requests >= n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("ledger holds %d of %d requests", u.Total.Requests, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var cl struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	call("GET", "/api/v1/clusters", tok.AccessToken, nil, &cl)
	var st struct {
		Weights map[string]float64 `json:"weights"`
	}
	call("GET", "/api/v1/settings", tok.AccessToken, nil, &st)
	var wi struct {
		Source    string  `json:"source"`
		Requests  int     `json:"requests"`
		RateRPS   float64 `json:"rate_rps"`
		Predicted struct {
			MeanE2EMs  float64 `json:"mean_e2e_ms"`
			P95E2EMs   float64 `json:"p95_e2e_ms"`
			MeanTTFTMs float64 `json:"mean_ttft_ms"`
		} `json:"predicted"`
		Observed *struct {
			Requests   int     `json:"requests"`
			RateRPS    float64 `json:"rate_rps"`
			MeanE2EMs  float64 `json:"mean_e2e_ms"`
			P95E2EMs   float64 `json:"p95_e2e_ms"`
			MeanTTFTMs float64 `json:"mean_ttft_ms"`
		} `json:"observed"`
	}
	if code := call("POST", "/api/v1/clusters/"+cl.Data[0].ID+"/whatif", tok.AccessToken, map[string]any{"weights": st.Weights, "max_requests": 300}, &wi); code != 200 {
		t.Fatalf("whatif: %d", code)
	}
	if wi.Source != "observed" || wi.Observed == nil {
		t.Fatalf("source %q, observed %+v: want the observed traffic replayed", wi.Source, wi.Observed)
	}
	if wi.Observed.Requests != n || math.Abs(wi.RateRPS-wi.Observed.RateRPS) > 1e-9 || wi.Observed.RateRPS < 5 || wi.Observed.RateRPS > 20 {
		t.Errorf("observed %d requests at %.1f req/s, replayed at %.1f: want %d at about 12", wi.Observed.Requests, wi.Observed.RateRPS, wi.RateRPS, n)
	}
	var state map[string]any
	call("GET", "/api/v1/clusters/"+cl.Data[0].ID+"/state", tok.AccessToken, nil, &state)
	if rows, ok := state["state"].([]any); ok {
		for _, r := range rows {
			m := r.(map[string]any)
			t.Logf("state %v %v tpot_ms=%v served=%v est=%v", m["model"], m["gpu"], m["tpot_ms"], m["served"], m["estimate_source"])
		}
	}
	var u struct {
		Rows []struct {
			Group     string  `json:"group"`
			Requests  int     `json:"requests"`
			MeanE2EMs float64 `json:"mean_latency_ms"`
			Out       int     `json:"output_tokens"`
		} `json:"rows"`
	}
	call("GET", "/api/v1/usage?group_by=model", tok.AccessToken, nil, &u)
	for _, r := range u.Rows {
		t.Logf("observed model %s: %d requests, mean E2E %.1f ms, %d output tokens", r.Group, r.Requests, r.MeanE2EMs, r.Out)
	}
	ratio := wi.Predicted.MeanE2EMs / wi.Observed.MeanE2EMs
	t.Logf("observed mean E2E %.1f ms (p95 %.1f, TTFT %.1f) at %.1f req/s; predicted %.1f ms (p95 %.1f, TTFT %.1f): ratio %.2f",
		wi.Observed.MeanE2EMs, wi.Observed.P95E2EMs, wi.Observed.MeanTTFTMs, wi.Observed.RateRPS, wi.Predicted.MeanE2EMs, wi.Predicted.P95E2EMs, wi.Predicted.MeanTTFTMs, ratio)
	if ratio < 0.7 || ratio > 1.3 {
		t.Errorf("predicted mean E2E %.1f ms is not within ±30 %% of the observed %.1f ms (ratio %.2f)", wi.Predicted.MeanE2EMs, wi.Observed.MeanE2EMs, ratio)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop after cancel")
	}
}
