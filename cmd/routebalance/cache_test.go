package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// TestResponseCacheServe: with --response-cache memory, a deterministic
// request (temperature 0) is answered upstream once and from the cache
// after (X-RouteBalance-Cache: miss, then hit, the same body), metered as
// "cached" at no cost; another tenant sending the same body gets its own
// miss (never shared across tenants); sampling and streamed requests are
// not cached.
func TestResponseCacheServe(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 4})
	dir := t.TempDir()
	base, stop := startServe(t, dir, "--allow-private-endpoints", "--response-cache", "memory")
	keyOf := func(email string) string {
		tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"`+email+`","password":"correct-horse-42","name":"C"}`)["access_token"].(string)
		cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
		postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, `{"base_url":"`+up.URL+`","model":"m","gpu":"l4","price_in_per_mtok":1,"price_out_per_mtok":1}`)
		return postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)
	}
	a, b := keyOf("a@example.com"), keyOf("b@example.com")
	send := func(key, body string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, res.StatusCode, raw)
		}
		return res.Header.Get("X-RouteBalance-Cache"), string(raw)
	}
	det := `{"model":"auto","temperature":0,"messages":[{"role":"user","content":"what is 2+2"}]}`
	h1, b1 := send(a, det)
	h2, b2 := send(a, det)
	h3, _ := send(b, det)
	if h1 != "miss" || h2 != "hit" || b2 != b1 || h3 != "miss" {
		t.Errorf("cache headers %q, %q, other tenant %q (bodies equal: %v); want miss, hit, miss", h1, h2, h3, b1 == b2)
	}
	if h, _ := send(a, strings.Replace(det, `"temperature":0`, `"temperature":0.7`, 1)); h != "" {
		t.Errorf("sampling request: X-RouteBalance-Cache %q, want none", h)
	}
	if h, _ := send(a, strings.Replace(det, `"temperature":0`, `"temperature":0,"stream":true`, 1)); h != "" {
		t.Errorf("streamed request: X-RouteBalance-Cache %q, want none", h)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	db, err := sqlstore.OpenSQLite(filepath.Join(dir, "routebalance.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, cached int
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(status = 'cached'), 0) FROM billing_usage`).Scan(&rows, &cached); err != nil {
		t.Fatal(err)
	}
	if rows != 5 || cached != 1 {
		t.Errorf("ledger: %d rows, %d cached; want 5 rows, 1 cached", rows, cached)
	}
	// Every money column of the cached row is zero (whatever the columns
	// are called: cost_usd, billed_usd or their integer successors).
	r, err := db.Query(`SELECT * FROM billing_usage WHERE status = 'cached'`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	names, _ := r.Columns()
	if !r.Next() {
		t.Fatal("no cached row")
	}
	vals := make([]any, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := r.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	money := 0
	for i, n := range names {
		if !strings.Contains(n, "cost") && !strings.Contains(n, "billed") {
			continue
		}
		money++
		switch v := vals[i].(type) {
		case int64:
			if v != 0 {
				t.Errorf("cached row %s = %v, want 0", n, v)
			}
		case float64:
			if v != 0 {
				t.Errorf("cached row %s = %v, want 0", n, v)
			}
		}
	}
	if money == 0 {
		t.Errorf("no money column found in %v", names)
	}
}
