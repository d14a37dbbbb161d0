package main

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/internal/qdranttest"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// TestServeQdrantClusterIndex runs serve --qdrant-url against the
// in-process Qdrant: an upload's rows land in the collection under the
// cluster's payload, completions route on estimates searched there;
// Qdrant stopped, every completion still succeeds on the in-process
// index and the breaker metric opens; Qdrant back, it closes.
func TestServeQdrantClusterIndex(t *testing.T) {
	fake := qdranttest.Start(t)
	big := vllmtest.New(t, vllmtest.Config{Model: "big"})
	small := vllmtest.New(t, vllmtest.Config{Model: "small"})
	base, stop := startServe(t, t.TempDir(), "--allow-private-endpoints", "--qdrant-url", fake.URL(),
		"--qdrant-timeout", "20s", "--qdrant-cooldown", "100ms", "--metrics-token", "scrape")
	defer stop() //nolint:errcheck
	tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"qd@example.com","password":"correct-horse-42","name":"Q"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
	for m, up := range map[string]*vllmtest.Server{"big": big, "small": small} {
		postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, `{"base_url":"`+up.URL+`","model":"`+m+`","gpu":"l4"}`)
	}
	key := postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)

	// 150 records: below the head's threshold, so the cluster index is a
	// KNN whose neighbours are searched.
	qd := base + "/api/v1/clusters/" + cid + "/quality-data"
	if res, body := doReq(t, "POST", qd, tok, mathPoemUpload(150)); res.StatusCode != 202 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	testwait.Until(t, "cluster index stored in Qdrant", func() bool {
		_, body := doReq(t, "GET", qd, tok, "")
		return strings.Contains(body, `"qdrant":"stored"`)
	})
	n := 0
	for _, p := range fake.Points("routebalance_quality") {
		if p.GetPayload()["cluster_id"].GetStringValue() == cid && p.GetPayload()["tenant_id"].GetStringValue() != "" {
			n++
		}
	}
	if n != 150 {
		t.Errorf("points of the cluster in Qdrant = %d, want 150", n)
	}

	complete := func() string {
		res, body := doReq(t, "POST", base+"/v1/chat/completions", key, `{"model":"auto","messages":[{"role":"user","content":"a poem about the sea number 7"}]}`)
		if res.StatusCode != 200 {
			t.Fatalf("completion: %d %s", res.StatusCode, body)
		}
		return res.Header.Get("X-RouteBalance-Quality-Source") + " " + res.Header.Get("X-RouteBalance-Model")
	}
	queries := func() int { fake.Mu.Lock(); defer fake.Mu.Unlock(); return fake.QueryBatches }
	before := queries()
	if got := complete(); got != "cluster small" {
		t.Errorf("completion: source and model %q, want cluster small", got)
	}
	if queries() == before {
		t.Error("the completion's estimate did not search Qdrant")
	}
	if m := scrape(t, base); m["routebalance_qdrant_breaker_state"] != 0 || m["routebalance_qdrant_searches_total"] < 1 {
		t.Errorf("metrics with Qdrant up: %v", m)
	}

	fake.Stop()
	for i := 0; i < 5; i++ {
		if got := complete(); got != "cluster small" {
			t.Errorf("completion %d with Qdrant down: %q, want cluster small", i, got)
		}
	}
	// Three failures open the breaker (searches already in flight then
	// fail too); each cool-down (100 ms, which a loaded machine may pass
	// between two completions) lets one probe through, whose failure opens
	// it again. So however completions and cool-downs interleave, errors ≥
	// 3 + (opens − 1).
	if m := scrape(t, base); m["routebalance_qdrant_breaker_state"] != 1 || m["routebalance_qdrant_breaker_opens_total"] < 1 ||
		m[`routebalance_qdrant_fallbacks_total{reason="error"}`] < m["routebalance_qdrant_breaker_opens_total"]+2 {
		t.Errorf("metrics with Qdrant down: %v; want the breaker open, and ≥ 3 error fallbacks to open it plus one failed probe per re-open", m)
	}

	fake.Restart()
	testwait.Until(t, "the breaker closes with Qdrant back", func() bool {
		complete()
		return scrape(t, base)["routebalance_qdrant_breaker_state"] == 0
	})
}

// mathPoemUpload is an upload of n records in the index build format:
// "big" is right on the equations, "small" on the poems.
func mathPoemUpload(n int) string {
	var lines strings.Builder
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&lines, `{"id":"r%d","prompt":"solve %d x + 1 = %d for x","scores":{"big":1,"small":0}}`+"\n", i, i, 3*i)
		} else {
			fmt.Fprintf(&lines, `{"id":"r%d","prompt":"a poem about the sea number %d","scores":{"big":0,"small":1}}`+"\n", i, i)
		}
	}
	return lines.String()
}

var qdrantSeries = regexp.MustCompile(`(?m)^(routebalance_qdrant_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$`)

// scrape reads the routebalance_qdrant_* series from /metrics.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	res, body := doReq(t, http.MethodGet, base+"/metrics", "scrape", "")
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
	out := map[string]float64{}
	for _, m := range qdrantSeries.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	return out
}
