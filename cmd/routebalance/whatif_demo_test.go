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
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWhatIfMatchesObservedDemoTraffic sends Poisson traffic with the demo
// tenant's key through the router to the emulated cluster — first a
// warm-up until no instance is being explored, then the n requests
// measured — waits until the ledger holds all of it, then asks the
// what-if preview for the weights that traffic was routed with: it must
// replay the observed traffic (source "observed", its arrival rate) and
// predict a mean E2E within ±30 % of the observed mean for the same
// requests (issue 15 item 1).
func TestWhatIfMatchesObservedDemoTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and 13 emulated instances")
	}
	// One replay of 200 requests takes tens of milliseconds on an idle
	// machine and more than the 800 ms default budget on a loaded one
	// (503 whatif_timeout, which is what the service should answer
	// then): this test checks the prediction, so it gives the replay
	// room. The budget stays bounded.
	t.Setenv("ROUTEBALANCE_WHATIF_TIMEOUT", "2m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, done := startDemo(ctx, t, "0.25", 2*time.Minute)
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

	// Poisson arrivals at 12 req/s (the demo cluster is far from
	// saturated), a mix of prompts, some streamed; send returns once all
	// n are answered. Each arrival is slept to at its time on the
	// schedule, not for its gap after the one before: on a loaded machine
	// every sleep overruns, and chained sleeps drifted the rate from 12
	// down to about 5 req/s.
	rng := rand.New(rand.NewPCG(7, 15))
	prompts := []string{
		"A train travels 120 km in 2 hours. How far does it travel in 5 hours?",
		"Write a Python function that reverses a linked list.",
		"Which planet is known as the red planet?",
		"Explain the difference between TCP and UDP.",
		"Summarise the causes of the French revolution.",
	}
	var sent atomic.Int64
	send := func(n int) (failed int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		next := time.Now()
		for k := 0; k < n; k++ {
			next = next.Add(time.Duration(rng.ExpFloat64() / 12 * float64(time.Second)))
			time.Sleep(time.Until(next))
			i := int(sent.Add(1))
			wg.Add(1)
			go func() {
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
			}()
		}
		wg.Wait()
		return failed
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if st := call("POST", "/api/v1/login", "", map[string]string{"email": login[1], "password": login[2]}, &tok); st != 200 {
		t.Fatal("login failed")
	}
	var cl struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	call("GET", "/api/v1/clusters", tok.AccessToken, nil, &cl)
	if len(cl.Data) == 0 {
		t.Fatal("the demo tenant has no cluster")
	}
	// exploring counts the instances the live router still explores: a
	// new instance takes its first fleet.Config.ExploreRequests (3)
	// requests whatever its score, so it is measured before it competes.
	// The router knows the cluster from its first request on: until then
	// (fewer than the 13 rows) every instance counts as exploring.
	exploring := func() int {
		var state map[string]any
		call("GET", "/api/v1/clusters/"+cl.Data[0].ID+"/state", tok.AccessToken, nil, &state)
		rows, _ := state["state"].([]any)
		n := max(13-len(rows), 0)
		for _, r := range rows {
			if e, _ := r.(map[string]any)["exploring"].(bool); e {
				n++
			}
		}
		return n
	}
	// Warm-up: the same traffic until no instance is exploring. The
	// preview replays recorded requests from the live state, explored
	// instances included, so it never explores; measured over a window
	// that held the exploration, the observed side had ≈ 15 requests (3
	// on each of the 5 instances of the two big models, the slowest, and
	// slower still on a loaded machine) that no replay sends. That, not
	// the prediction, is what made the ratio fall under 0.7 on a loaded
	// machine. The window compared is the n requests after the warm-up.
	warm := 0
	for warm < 400 && exploring() > 0 {
		if failed := send(20); failed > 0 {
			t.Fatalf("warm-up: %d of 20 requests failed", failed)
		}
		warm += 20
	}
	if k := exploring(); k > 0 {
		t.Fatalf("%d instances still exploring after %d warm-up requests", k, warm)
	}
	t.Logf("warm-up: %d requests until no instance explores", warm)

	const n = 200
	if failed := send(n); failed > 0 {
		t.Fatalf("%d of %d requests failed", failed, n)
	}

	// The meter writes in batches: wait until the ledger has every request
	// (the bound is a hang guard).
	for end := time.Now().Add(2 * time.Minute); ; {
		var u struct {
			Total struct {
				Requests int `json:"requests"`
			} `json:"total"`
		}
		call("GET", "/api/v1/usage", tok.AccessToken, nil, &u)
		if u.Total.Requests >= warm+n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("ledger holds %d of %d requests", u.Total.Requests, warm+n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var st struct {
		Weights map[string]float64 `json:"weights"`
	}
	call("GET", "/api/v1/settings", tok.AccessToken, nil, &st)
	type whatIf struct {
		Source    string  `json:"source"`
		Requests  int     `json:"requests"`
		RateRPS   float64 `json:"rate_rps"`
		Predicted struct {
			MeanE2EMs  float64            `json:"mean_e2e_ms"`
			P95E2EMs   float64            `json:"p95_e2e_ms"`
			MeanTTFTMs float64            `json:"mean_ttft_ms"`
			ModelShare map[string]float64 `json:"model_share"`
		} `json:"predicted"`
		Observed *struct {
			Requests   int     `json:"requests"`
			RateRPS    float64 `json:"rate_rps"`
			MeanE2EMs  float64 `json:"mean_e2e_ms"`
			P95E2EMs   float64 `json:"p95_e2e_ms"`
			MeanTTFTMs float64 `json:"mean_ttft_ms"`
		} `json:"observed"`
		Live *struct {
			Instances     int     `json:"instances"`
			InFlight      int     `json:"in_flight"`
			Waiting       int     `json:"waiting"`
			PendingTokens float64 `json:"pending_tokens"`
		} `json:"live"`
	}
	// preview asks for the weights the traffic was routed with and checks
	// the answer replays the newest want recorded requests at their rate
	// and predicts their mean E2E within ±30 %.
	preview := func(what string, want int) whatIf {
		t.Helper()
		var wi whatIf
		if code := call("POST", "/api/v1/clusters/"+cl.Data[0].ID+"/whatif", tok.AccessToken, map[string]any{"weights": st.Weights, "max_requests": want}, &wi); code != 200 {
			t.Fatalf("%s: whatif: %d", what, code)
		}
		if wi.Source != "observed" || wi.Observed == nil {
			t.Fatalf("%s: source %q, observed %+v: want the observed traffic replayed", what, wi.Source, wi.Observed)
		}
		if wi.Observed.Requests != want || math.Abs(wi.RateRPS-wi.Observed.RateRPS) > 1e-9 || wi.Observed.RateRPS < 5 || wi.Observed.RateRPS > 20 {
			t.Errorf("%s: observed %d requests at %.1f req/s, replayed at %.1f: want %d at about 12", what, wi.Observed.Requests, wi.Observed.RateRPS, wi.RateRPS, want)
		}
		ratio := wi.Predicted.MeanE2EMs / wi.Observed.MeanE2EMs
		t.Logf("%s: observed mean E2E %.1f ms (p95 %.1f, TTFT %.1f) at %.1f req/s; predicted %.1f ms (p95 %.1f, TTFT %.1f): ratio %.2f; live %+v; predicted share %v",
			what, wi.Observed.MeanE2EMs, wi.Observed.P95E2EMs, wi.Observed.MeanTTFTMs, wi.Observed.RateRPS, wi.Predicted.MeanE2EMs, wi.Predicted.P95E2EMs, wi.Predicted.MeanTTFTMs, ratio, wi.Live, wi.Predicted.ModelShare)
		if ratio < 0.7 || ratio > 1.3 {
			t.Errorf("%s: predicted mean E2E %.1f ms is not within ±30 %% of the observed %.1f ms (ratio %.2f)", what, wi.Predicted.MeanE2EMs, wi.Observed.MeanE2EMs, ratio)
		}
		return wi
	}
	logState := func() (inFlight int) {
		var state map[string]any
		call("GET", "/api/v1/clusters/"+cl.Data[0].ID+"/state", tok.AccessToken, nil, &state)
		rows, _ := state["state"].([]any)
		for _, r := range rows {
			m := r.(map[string]any)
			f, _ := m["in_flight"].(float64)
			inFlight += int(f)
			t.Logf("state %v %v tpot_ms=%v served=%v in_flight=%v est=%v", m["model"], m["gpu"], m["tpot_ms"], m["served"], m["in_flight"], m["estimate_source"])
		}
		return inFlight
	}

	// 1. All traffic answered and metered: the replay starts from the
	// live state of the 13 instances (idle, or nearly: a scrape can still
	// show a request that has just finished).
	wi := preview("after the traffic", n)
	if wi.Live == nil || wi.Live.Instances != 13 {
		t.Errorf("after the traffic: live %+v, want the state of 13 instances", wi.Live)
	}
	logState()
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

	// 2. More traffic at the same rate, and the preview asked while it is
	// in flight: the replay starts from the live state (requests on the
	// engines now) and still predicts the recorded ones.
	more := make(chan int, 1)
	go func() { more <- send(100) }()
	for end := time.Now().Add(time.Minute); ; {
		if sent.Load() >= int64(warm+n+30) && logState() > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no request in flight during the second traffic phase")
		}
		time.Sleep(100 * time.Millisecond)
	}
	wi = preview("with requests in flight", n)
	if wi.Live == nil || wi.Live.InFlight == 0 {
		t.Errorf("with requests in flight: live %+v, want the in-flight requests", wi.Live)
	}
	if failed := <-more; failed > 0 {
		t.Errorf("%d of 100 more requests failed", failed)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop after cancel")
	}
}
