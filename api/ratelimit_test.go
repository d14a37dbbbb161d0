package api

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// frozenClock is a settable clock: windows only move when the test says.
type frozenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frozenClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *frozenClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// limEnv is the management API and /v1 on one loopback server, backed by a
// real tenants.Service and store.
type limEnv struct {
	*testEnv
	url string
	tok string
	clk *frozenClock
}

func newLimEnv(t *testing.T, db dbtest.Engine) *limEnv {
	t.Helper()
	clk := &frozenClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, db, true, func(d *Deps) {
		d.Inference = InferenceDeps{Keys: d.Tenants, Router: newTestRouter(), Clock: clk}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.app.Listener(ln) }()
	t.Cleanup(func() { _ = e.app.ShutdownWithTimeout(5 * time.Second) })
	_, tok, _ := e.signup("limits@example.com")
	return &limEnv{testEnv: e, url: "http://" + ln.Addr().String(), tok: tok, clk: clk}
}

// cluster registers a cluster with one instance at upstream.
func (e *limEnv) cluster(name, upstream string) string {
	e.t.Helper()
	r := e.do("POST", "/api/v1/clusters", e.tok, map[string]any{"name": name})
	if r.status != 201 {
		e.t.Fatalf("cluster: %d %s", r.status, r.raw)
	}
	cid := r.str("id")
	r = e.do("POST", "/api/v1/clusters/"+cid+"/instances", e.tok, map[string]any{"base_url": upstream, "model": "qwen-7b", "gpu": "L4"})
	if r.status != 201 {
		e.t.Fatalf("instance: %d %s", r.status, r.raw)
	}
	return cid
}

// key creates an API key bound to cluster cid and returns its id and secret.
func (e *limEnv) key(name, cid string) (id, secret string) {
	e.t.Helper()
	r := e.do("POST", "/api/v1/keys", e.tok, map[string]any{"name": name, "cluster_id": cid})
	if r.status != 201 {
		e.t.Fatalf("key: %d %s", r.status, r.raw)
	}
	return r.str("id"), r.str("key")
}

func (e *limEnv) keyLimits(id string, lim map[string]any) {
	e.t.Helper()
	if r := e.do("PATCH", "/api/v1/keys/"+id, e.tok, map[string]any{"limits": lim}); r.status != 200 {
		e.t.Fatalf("patch key limits: %d %s", r.status, r.raw)
	}
}

func (e *limEnv) tenantLimits(lim map[string]any) {
	e.t.Helper()
	if r := e.do("PUT", "/api/v1/settings", e.tok, map[string]any{"preset": "balanced", "limits": lim}); r.status != 200 {
		e.t.Fatalf("put settings: %d %s", r.status, r.raw)
	}
}

// outcome is one inference answer.
type outcome struct {
	status int
	header http.Header
	env    envelope
	usage  struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
}

func (e *limEnv) complete(t *testing.T, secret string, stream bool) outcome {
	body := `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"auto","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return e.completeBody(t, secret, body)
}

func (e *limEnv) completeBody(t *testing.T, secret, body string) outcome {
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return outcome{}
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return outcome{}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	o := outcome{status: res.StatusCode, header: res.Header}
	if res.StatusCode == 200 && !strings.Contains(body, `"stream":true`) {
		var v struct {
			Usage *json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(raw, &v) == nil && v.Usage != nil {
			_ = json.Unmarshal(*v.Usage, &o.usage)
		}
	}
	if res.StatusCode != 200 {
		if err := json.Unmarshal(raw, &o.env); err != nil {
			t.Errorf("status %d body %q: %v", res.StatusCode, raw, err)
		}
	}
	return o
}

// burst fires n requests at once and returns their outcomes.
func (e *limEnv) burst(t *testing.T, secret string, n int) []outcome {
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = e.complete(t, secret, i%3 == 0)
		}()
	}
	wg.Wait()
	return out
}

func count(os []outcome, status int) int {
	n := 0
	for _, o := range os {
		if o.status == status {
			n++
		}
	}
	return n
}

func rateHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"Retry-After", hdrLimitRequests, hdrRemainingRequests, hdrResetRequests, hdrLimitTokens, hdrRemainingTokens, hdrResetTokens} {
		if v := h.Get(k); v != "" {
			out[k] = v
		}
	}
	return out
}

func TestRateLimitsEndToEnd(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		up := vllmtest.New(t, vllmtest.Config{Model: "qwen-7b", Tokens: 4})
		e := newLimEnv(t, db)
		cid := e.cluster("main", up.URL)
		k1, s1 := e.key("one", cid)
		_, s2 := e.key("two", cid)

		// No limits: no headers, requests pass.
		if o := e.complete(t, s1, false); o.status != 200 || len(rateHeaders(o.header)) != 0 {
			t.Fatalf("unlimited: %d %v", o.status, rateHeaders(o.header))
		}

		// Key one: 5 requests per minute; 12 at once → exactly 5 pass.
		e.keyLimits(k1, map[string]any{"rpm": 5})
		out := e.burst(t, s1, 12)
		if ok, limited := count(out, 200), count(out, 429); ok != 5 || limited != 7 {
			t.Fatalf("burst of 12 at rpm 5: %d ok, %d limited (%v)", ok, limited, out)
		}
		for _, o := range out {
			if o.status == 200 {
				if o.header.Get(hdrLimitRequests) != "5" || o.header.Get(hdrRemainingRequests) == "" {
					t.Errorf("ok answer headers %v", rateHeaders(o.header))
				}
				continue
			}
			want := map[string]string{"Retry-After": "12", hdrLimitRequests: "5", hdrRemainingRequests: "0", hdrResetRequests: "1m0s"}
			if diff := cmp.Diff(want, rateHeaders(o.header)); diff != "" {
				t.Errorf("429 headers (-want +got):\n%s", diff)
			}
			if o.env.Error.Type != "rate_limit_error" || o.env.Error.Code == nil || *o.env.Error.Code != "rate_limit_exceeded" ||
				!strings.Contains(o.env.Error.Message, "key's limit of 5 requests per minute") {
				t.Errorf("429 envelope %+v", o.env.Error)
			}
		}

		// Key two is not affected by key one's limit.
		if o := e.complete(t, s2, false); o.status != 200 {
			t.Errorf("key two: %d %+v", o.status, o.env.Error)
		}

		// The window rolls on the injected clock: 12 s buys one request.
		e.clk.add(12 * time.Second)
		if out := e.burst(t, s1, 4); count(out, 200) != 1 {
			t.Errorf("after 12s: %d ok, want 1", count(out, 200))
		}

		// A raised limit applies to the very next request (usage is kept:
		// 5 used of 8).
		e.keyLimits(k1, map[string]any{"rpm": 8})
		if out := e.burst(t, s1, 6); count(out, 200) != 3 {
			t.Errorf("after raising to 8: %d ok, want 3", count(out, 200))
		}

		// Tenant limit: 3 per minute across all keys; key two gets 3, then
		// the tenant's limit answers.
		e.tenantLimits(map[string]any{"rpm": 3, "tpm": 0, "max_concurrency": 0})
		out = e.burst(t, s2, 7)
		if count(out, 200) != 3 || count(out, 429) != 4 {
			t.Fatalf("tenant rpm 3: %d ok, %d limited", count(out, 200), count(out, 429))
		}
		for _, o := range out {
			if o.status == 429 && !strings.Contains(o.env.Error.Message, "tenant's limit of 3 requests per minute") {
				t.Errorf("tenant 429 message %q", o.env.Error.Message)
			}
		}
		if r := e.do("GET", "/api/v1/settings", e.tok, nil); r.status != 200 || !strings.Contains(r.raw, `"limits":{"rpm":3,"tpm":0,"max_concurrency":0}`) {
			t.Errorf("settings: %d %s", r.status, r.raw)
		}
		// A PUT without limits keeps them.
		if r := e.do("PUT", "/api/v1/settings", e.tok, map[string]any{"preset": "latency"}); r.status != 200 || !strings.Contains(r.raw, `"rpm":3`) {
			t.Errorf("put without limits: %d %s", r.status, r.raw)
		}
		e.tenantLimits(map[string]any{})

		// Tokens per minute: prompt estimate + max_tokens at admission,
		// corrected to the usage the instance reports.
		e.clk.add(time.Hour)
		e.keyLimits(k1, map[string]any{"rpm": 0, "tpm": 100})
		o := e.complete(t, s1, false)
		if o.status != 200 || o.header.Get(hdrLimitTokens) != "100" {
			t.Fatalf("tpm request: %d %v", o.status, rateHeaders(o.header))
		}
		rem1 := atoi(t, o.header.Get(hdrRemainingTokens))
		estimate := 100 - rem1 // prompt estimate + max_tokens 4
		actual := o.usage.PromptTokens + o.usage.CompletionTokens
		if estimate <= 4 || actual == 0 || actual == estimate {
			t.Fatalf("estimate %d, actual %d: the test needs them to differ", estimate, actual)
		}
		o = e.complete(t, s1, false)
		// the first request's charge was corrected to its real usage
		// before the second (same estimate) was admitted
		if rem2 := atoi(t, o.header.Get(hdrRemainingTokens)); o.status != 200 || rem2 != 100-actual-estimate {
			t.Errorf("after correction remaining %d, want 100-%d-%d (status %d)", rem2, actual, estimate, o.status)
		}
		// a request that cannot fit the limit at all is refused as too large
		big := `{"model":"auto","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`
		if o := e.completeBody(t, s1, big); o.status != 429 || !strings.Contains(o.env.Error.Message, "too large") {
			t.Errorf("oversized request: %d %+v", o.status, o.env.Error)
		}
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func TestRateLimitValidation(t *testing.T) {
	e := newLimEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)})
	kid, _ := e.key("one", "")
	cases := []struct {
		name  string
		body  string
		param string
	}{
		{"negative rpm", `{"limits":{"rpm":-1}}`, "limits.rpm"},
		{"negative tpm", `{"limits":{"tpm":-5}}`, "limits.tpm"},
		{"negative concurrency", `{"limits":{"max_concurrency":-2}}`, "limits.max_concurrency"},
		{"fraction", `{"limits":{"rpm":1.5}}`, "limits.rpm"},
		{"string", `{"limits":{"tpm":"lots"}}`, "limits.tpm"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"PATCH /api/v1/keys/" + kid, "PUT /api/v1/settings"} {
				method, p, _ := strings.Cut(path, " ")
				body := tc.body
				if method == "PUT" {
					body = `{"preset":"balanced",` + body[1:]
				}
				r := e.do(method, p, e.tok, body)
				typ, msg := r.envelope(t)
				param, _ := r.body["error"].(map[string]any)["param"].(string)
				if r.status != 400 || typ != "invalid_request_error" || param != tc.param || !strings.Contains(msg, tc.param) {
					t.Errorf("%s %s: %d %s", path, body, r.status, r.raw)
				}
			}
		})
	}
	if r := e.do("GET", "/api/v1/keys", e.tok, nil); !strings.Contains(r.raw, `"limits":{"rpm":0,"tpm":0,"max_concurrency":0}`) {
		t.Errorf("rejected limits were stored: %s", r.raw)
	}
}

func TestConcurrencyCapHeldThroughStreams(t *testing.T) {
	hold := make(chan struct{})
	up := vllmtest.New(t, vllmtest.Config{Model: "qwen-7b", Tokens: 4, Hold: hold})
	e := newLimEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)})
	cid := e.cluster("held", up.URL)
	kid, secret := e.key("capped", cid)
	e.keyLimits(kid, map[string]any{"max_concurrency": 2})

	// Two requests (one streamed) reach the upstream and wait there.
	held := make(chan outcome, 2)
	for i := range 2 {
		go func() { held <- e.complete(t, secret, i == 0) }()
	}
	for range 2 {
		select {
		case <-up.Arrived():
		case <-time.After(10 * time.Second):
			t.Fatal("held requests did not reach the upstream")
		}
	}
	// Every other request now finds both slots taken.
	out := e.burst(t, secret, 6)
	if count(out, 429) != 6 {
		t.Fatalf("with 2 held at cap 2: %d of 6 limited", count(out, 429))
	}
	for _, o := range out {
		if !strings.Contains(o.env.Error.Message, "key's concurrency limit of 2") || o.header.Get("Retry-After") != "1" {
			t.Errorf("concurrency 429: %+v %v", o.env.Error, rateHeaders(o.header))
		}
	}
	close(hold)
	for range 2 {
		if o := <-held; o.status != 200 {
			t.Errorf("held request: %d %+v", o.status, o.env.Error)
		}
	}
	// Both slots came back (the stream's when its body ended): requests
	// pass again, many times over, and two at once fit.
	for i := range 3 {
		if out := e.burst(t, secret, 2); count(out, 200) != 2 {
			t.Fatalf("round %d after release: %d of 2 ok (%+v)", i, count(out, 200), out)
		}
	}
	// Refused requests (a bad body after admission is impossible: parsing
	// comes first) and upstream errors release too: an unknown model.
	for range 3 {
		o := e.completeBody(t, secret, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`)
		if o.status != 404 {
			t.Fatalf("unknown model: %d", o.status)
		}
	}
	if out := e.burst(t, secret, 2); count(out, 200) != 2 {
		t.Errorf("after error paths: %d of 2 ok", count(out, 200))
	}
}
