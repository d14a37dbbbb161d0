package api

// Defects found by the black-box probe of a built binary, each pinned by a
// test over a real loopback listener (the service as a client sees it).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// serveLoopback serves e's app on a loopback port until the test ends and
// returns its base URL.
func serveLoopback(t *testing.T, e *testEnv) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.app.Listener(ln) }()
	t.Cleanup(func() { _ = e.app.ShutdownWithTimeout(5 * time.Second) })
	return "http://" + ln.Addr().String()
}

// httpDo sends one request over the network and decodes a JSON answer.
func httpDo(t *testing.T, method, url, token string, body any) resp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	return httpSend(t, method, url, token, rd)
}

// httpSend sends rd (JSON, or nil for no body) over the network and
// decodes a JSON answer.
func httpSend(t *testing.T, method, url, token string, rd io.Reader) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if len(raw) > 0 {
		json.Unmarshal(raw, &r.body) //nolint:errcheck // non-JSON answers are checked via raw
	}
	return r
}

// ledgerEnv serves an api with the engine's billing store on loopback.
func ledgerEnv(t *testing.T, db dbtest.Engine) (*testEnv, string, ledgerStore) {
	st := ledgerFor(db)
	e := newEnv(t, db, true, func(d *Deps) { d.Usage, d.Requests = st, st })
	return e, serveLoopback(t, e), st
}

// TestProbeCSVCellsAreNotFormulas: a key named "=HYPERLINK(…)" (or a model,
// request id … starting with + - @) came out of usage.csv and requests.csv
// as a live spreadsheet formula. Text cells must be defused.
func TestProbeCSVCellsAreNotFormulas(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e, base, st := ledgerEnv(t, db)
		tid, tok := signupTok(e, "csv-probe@example.com")
		evil := `=HYPERLINK("http://evil.example","x")`
		r := httpDo(t, "POST", base+"/api/v1/keys", tok, map[string]any{"name": evil})
		if r.status != 201 {
			t.Fatalf("key: %d %s", r.status, r.raw)
		}
		at := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
		ev := billing.UsageEvent{RequestID: "@SUM(1+1)", TenantID: tid, KeyID: r.str("id"), Model: "+cmd|calc", InstanceID: "-inst",
			Policy: "routebalance", PromptTokens: 3, OutputTokens: 4, Status: "ok", HTTPStatus: 200, StartedAt: at, FinishedAt: at,
			Preset: "balanced"}
		if _, err := st.Insert(context.Background(), []billing.UsageEvent{ev}); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/api/v1/usage.csv?group_by=key", "/api/v1/usage.csv?group_by=model",
			"/api/v1/usage.csv?group_by=instance", "/api/v1/requests.csv"} {
			r := httpDo(t, "GET", base+path, tok, nil)
			recs, err := csv.NewReader(strings.NewReader(r.raw)).ReadAll()
			if r.status != 200 || err != nil || len(recs) < 2 {
				t.Fatalf("%s: %d %v %s", path, r.status, err, r.raw)
			}
			found := false
			for _, rec := range recs {
				for _, cell := range rec {
					if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
						t.Errorf("%s: cell %q would run as a formula", path, cell)
					}
					found = found || cell == "'"+evil || cell == "'+cmd|calc" || cell == "'-inst"
				}
			}
			if !found {
				t.Errorf("%s: the defused value is missing: %q", path, recs)
			}
		}
	})
}

// TestProbeAPIResponsesAreNotCached: login, refresh and key creation answer
// bearer tokens and API keys; every /api/v1 answer must say no-store (and
// nosniff) so no browser or proxy cache keeps them.
func TestProbeAPIResponsesAreNotCached(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	base := serveLoopback(t, e)
	r := httpDo(t, "POST", base+"/api/v1/signup", "", map[string]any{"email": "cache@example.com", "password": "correct-horse-42", "name": "C"})
	tok, refresh := r.str("access_token"), r.str("refresh_token")
	checks := []resp{r,
		httpDo(t, "POST", base+"/api/v1/login", "", map[string]any{"email": "cache@example.com", "password": "correct-horse-42"}),
		httpDo(t, "POST", base+"/api/v1/refresh", "", map[string]any{"refresh_token": refresh}),
		httpDo(t, "POST", base+"/api/v1/keys", tok, map[string]any{"name": "k"}),
		httpDo(t, "GET", base+"/api/v1/keys", tok, nil),
		httpDo(t, "GET", base+"/api/v1/nope", tok, nil),
		httpDo(t, "POST", base+"/api/v1/login", "", map[string]any{"email": "cache@example.com", "password": "wrong-password-1"}),
	}
	for i, r := range checks {
		if r.status == 0 || r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("answer %d (%d): Cache-Control %q, X-Content-Type-Options %q", i, r.status,
				r.header.Get("Cache-Control"), r.header.Get("X-Content-Type-Options"))
		}
	}
}

// TestProbeMetricsPathIsNotTheDashboard: without --metrics-token the main
// listener has no /metrics, and a scrape got the dashboard's HTML with 200
// (which a Prometheus scrape reports as a parse error, not a missing
// target). It must be a 404 in the error envelope.
func TestProbeMetricsPathIsNotTheDashboard(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	base := serveLoopback(t, e)
	for _, p := range []string{"/metrics", "/metrics/"} {
		r := httpDo(t, "GET", base+p, "", nil)
		if r.status != http.StatusNotFound || strings.Contains(r.raw, "<html") {
			t.Errorf("GET %s: %d %s %.80s", p, r.status, r.header.Get("Content-Type"), r.raw)
			continue
		}
		r.envelope(t)
	}
	if r := httpDo(t, "GET", base+"/clusters", "", nil); r.status != 200 || !strings.Contains(r.raw, "<html") {
		t.Errorf("a dashboard deep link: %d %.80s", r.status, r.raw)
	}
}

// TestProbeUnknownModelListsTheRightKind: the 404 model_not_found of
// /v1/embeddings listed the chat models as "available" (and "auto" while
// saying auto does not exist, on a cluster without embedding instances);
// chat listed embedding models it can never route to. Each endpoint lists
// what it can serve.
func TestProbeUnknownModelListsTheRightKind(t *testing.T) {
	emb := inst("e1", "http://127.0.0.1:1", "emb-m")
	emb.Kind = routing.KindEmbedding
	e := newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("c1", "http://127.0.0.1:1", "chat-m"), emb}})
	for _, tc := range []struct{ path, body, want, not string }{
		{"/v1/embeddings", `{"model":"chat-m","input":"hi"}`, "available: emb-m, auto", "chat-m,"},
		{"/v1/chat/completions", `{"model":"emb-m","messages":[{"role":"user","content":"hi"}]}`, "available: chat-m, auto", "emb-m,"},
		// tokenize passes to any instance of the named model, and refuses auto
		{"/tokenize", `{"model":"nope","prompt":"hi"}`, "available: chat-m, emb-m", "auto"},
	} {
		res, raw := e.post(t, tc.path, testKey, tc.body, nil)
		env := decodeEnvelope(t, raw)
		if res.StatusCode != http.StatusNotFound || !strings.Contains(env.Error.Message, tc.want) || strings.Contains(env.Error.Message, tc.not) {
			t.Errorf("%s %s: %d %q, want 404 saying %q", tc.path, tc.body, res.StatusCode, env.Error.Message, tc.want)
		}
	}

	e = newInfEnv(t, envOpts{realRouter: true, instances: []tenants.Instance{inst("c1", "http://127.0.0.1:1", "chat-m")}})
	res, raw := e.post(t, "/v1/embeddings", testKey, `{"model":"auto","input":"hi"}`, nil)
	env := decodeEnvelope(t, raw)
	if res.StatusCode != http.StatusNotFound || env.Error.Code == nil || *env.Error.Code != errCodeModelNotFound ||
		!strings.Contains(env.Error.Message, "no embedding instance") || strings.Contains(env.Error.Message, "available") {
		t.Errorf("embeddings auto without embedding instances: %d %s", res.StatusCode, raw)
	}
}

// TestProbeModelsWithoutACluster: a key whose tenant has no cluster, or
// several and none chosen, listed "auto" (created 0) on /v1/models while
// every request with it is refused 400 no_cluster. The list says the same.
func TestProbeModelsWithoutACluster(t *testing.T) {
	e := newLimEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)})
	r := e.do("POST", "/api/v1/keys", e.tok, map[string]any{"name": "loose"})
	kid, secret := r.str("id"), r.str("key")
	client := openai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	noCluster := func(what string, err error) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "no_cluster" {
			t.Errorf("%s: %v, want 400 no_cluster", what, err)
		}
	}
	_, err := client.Models.List(context.Background())
	noCluster("no cluster: list", err)
	a := e.cluster("a", "http://127.0.0.1:1")
	e.cluster("b", "http://127.0.0.1:1")
	_, err = client.Models.List(context.Background())
	noCluster("two clusters: list", err)
	_, err = client.Models.Get(context.Background(), "auto")
	noCluster("two clusters: get auto", err)

	if r := e.do("PATCH", "/api/v1/keys/"+kid, e.tok, map[string]any{"cluster_id": a}); r.status != 200 {
		t.Fatalf("bind: %d %s", r.status, r.raw)
	}
	page, err := client.Models.List(context.Background())
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != "auto" || page.Data[1].ID != "qwen-7b" || page.Data[0].Created == 0 {
		t.Fatalf("bound key: %+v %v", page, err)
	}
}

// TestProbeMalformedRequestIsNotEchoed: a request fasthttp cannot parse
// (here a bad Content-Length) was answered with fasthttp's error text,
// which quotes the raw request — its Authorization header and whatever a
// proxy in front added included. The 400 must say what is wrong without
// echoing the request.
func TestProbeMalformedRequestIsNotEchoed(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	base := serveLoopback(t, e)
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rb_secret_probe\r\n"+
		"X-Internal-Auth: proxy-secret\r\nContent-Length: abc\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, raw: string(raw)}
	json.Unmarshal(raw, &r.body) //nolint:errcheck // checked by envelope
	if r.status != http.StatusBadRequest || strings.Contains(r.raw, "secret") || strings.Contains(r.raw, "Host: x") {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if _, msg := r.envelope(t); !strings.Contains(msg, "Content-Length") {
		t.Errorf("message %q does not say what is malformed", msg)
	}
}

func TestWithoutRequestEcho(t *testing.T) {
	for in, want := range map[string]string{
		`error when reading request headers: cannot find http request method in "GARBAGE\r\n\r\n". Buffer size=11, contents: "GARBAGE\r\n\r\n"`:                        "malformed HTTP request headers: cannot find http request method",
		`error when reading request headers: cannot parse Content-Length: unexpected first char found. Expecting 0-9. Buffer size=68, contents: "POST / HTTP/1.1\r\n"`: "malformed HTTP request headers: cannot parse Content-Length: unexpected first char found. Expecting 0-9",
		`error when reading request body: unexpected EOF`: "malformed HTTP request body: unexpected EOF",
		`Bad Request`: "Bad Request",
	} {
		if got := withoutRequestEcho(in); got != want {
			t.Errorf("withoutRequestEcho(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzWithoutRequestEcho: whatever fasthttp quotes after the reason never
// reaches the answer.
func FuzzWithoutRequestEcho(f *testing.F) {
	f.Add("cannot parse Content-Length", "POST / HTTP/1.1\r\nAuthorization: Bearer x\r\n")
	f.Add("cannot find http request method in ", "GARBAGE")
	f.Fuzz(func(t *testing.T, reason, raw string) {
		if strings.ContainsAny(reason, `"`) || raw == "" {
			return
		}
		msg := fmt.Sprintf("error when reading request headers: %s. Buffer size=%d, contents: %q", reason, len(raw), raw)
		got := withoutRequestEcho(msg)
		if strings.Contains(got, "Buffer size") || strings.Contains(got, `"`) || (len(raw) > 8 && strings.Contains(got, fmt.Sprintf("%q", raw))) {
			t.Fatalf("%q echoes the request: %q", msg, got)
		}
	})
}

// TestProbeRequestFiltersRefuseBadText: a NUL byte or invalid UTF-8 in the
// request log's model/key_id filters or in a forged cursor reached
// Postgres, which refused it: 502 billing_backend_error and an ERROR log
// for a client's typo. They are 400 with the parameter named.
func TestProbeRequestFiltersRefuseBadText(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e, base, _ := ledgerEnv(t, db)
		_, tok := signupTok(e, "filters@example.com")
		nulCursor := base64.RawURLEncoding.EncodeToString([]byte("2026-12-01T15:12:03.999171Z|a\x00b"))
		for _, tc := range []struct{ query, param string }{
			{"model=a%00b", "model"}, {"model=%ff%fe", "model"}, {"key_id=k%00", "key_id"},
			{"key_id=" + strings.Repeat("k", 300), "key_id"}, {"cursor=" + nulCursor, "cursor"},
		} {
			for _, path := range []string{"/api/v1/requests?", "/api/v1/requests.csv?"} {
				r := httpDo(t, "GET", base+path+tc.query, tok, nil)
				if r.status != http.StatusBadRequest {
					t.Errorf("%s%.40s: %d %s", path, tc.query, r.status, r.raw)
					continue
				}
				r.envelope(t)
				if p, _ := r.body["error"].(map[string]any)["param"].(string); p != tc.param {
					t.Errorf("%s%.40s: param %q, want %q", path, tc.query, p, tc.param)
				}
			}
		}
		if r := httpDo(t, "GET", base+"/api/v1/requests?model=qwen%2F7b%20%C3%A9", tok, nil); r.status != 200 {
			t.Errorf("a plain unicode model filter: %d %s", r.status, r.raw)
		}
	})
}

// TestProbeClusterRefWithNUL: a cluster_id (key) or default_cluster_id
// (settings) holding a NUL byte went to Postgres as is: 500
// internal_error. It is the same 400 as any id that names no cluster.
func TestProbeClusterRefWithNUL(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, false, nil)
		base := serveLoopback(t, e)
		_, tok := signupTok(e, "nul-ref@example.com")
		r := httpDo(t, "POST", base+"/api/v1/keys", tok, map[string]any{"name": "k"})
		kid := r.str("id")
		for _, tc := range []struct {
			method, path, param string
			body                map[string]any
		}{
			{"POST", "/api/v1/keys", "cluster_id", map[string]any{"name": "k2", "cluster_id": "c\x00"}},
			{"PATCH", "/api/v1/keys/" + kid, "cluster_id", map[string]any{"cluster_id": "c\x00"}},
			{"PATCH", "/api/v1/settings", "default_cluster_id", map[string]any{"default_cluster_id": "c\x00"}},
			{"PUT", "/api/v1/settings", "default_cluster_id", map[string]any{"preset": "balanced", "default_cluster_id": "\x00"}},
		} {
			r := httpDo(t, tc.method, base+tc.path, tok, tc.body)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, r.status, r.raw)
				continue
			}
			r.envelope(t)
			if p, _ := r.body["error"].(map[string]any)["param"].(string); p != tc.param {
				t.Errorf("%s %s: param %q, want %q", tc.method, tc.path, p, tc.param)
			}
		}
	})
}

// TestProbeFeedbackCountsOnce: POST /v1/feedback for the same request id
// was accepted every time, each one a new label for that prompt and model,
// so one answer could outweigh the rest of the cluster's quality data. The
// first score counts; a repeat is 409.
func TestProbeFeedbackCountsOnce(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m"})
	e := newInfEnv(t, envOpts{instances: []tenants.Instance{inst("i1", up.URL, "m")}, quality: true})
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"rate me once"}]}`, nil)
	rid := resp.Header.Get(HeaderRequestID)
	if resp.StatusCode != 200 || rid == "" {
		t.Fatalf("status %d id %q body %s", resp.StatusCode, rid, body)
	}
	fb := fmt.Sprintf(`{"request_id":%q,"score":0.25}`, rid)
	if resp, body := e.post(t, "/v1/feedback", testKey, fb, nil); resp.StatusCode != 200 {
		t.Fatalf("first feedback: %d %s", resp.StatusCode, body)
	}
	resp, body = e.post(t, "/v1/feedback", testKey, fmt.Sprintf(`{"request_id":%q,"score":1}`, rid), nil)
	if env := decodeEnvelope(t, body); resp.StatusCode != http.StatusConflict || str(env.Error.Code) != "feedback_already_recorded" ||
		str(env.Error.Param) != "request_id" {
		t.Errorf("second feedback: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.post(t, "/v1/feedback", otherKey, fb, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's repeat: %d, want 404 (the id stays unknown to it)", resp.StatusCode)
	}
	if len(e.quality.got) != 1 || e.quality.got[0] != "rate me once|m|0.25" {
		t.Errorf("observed %q, want the first score only", e.quality.got)
	}
}

// TestProbeDeletedClusterStopsItsKeys: the dashboard's delete dialog says
// "keys bound to it stop working", but the store unbound them (ON DELETE
// SET NULL) and they went on routing — to the tenant's only or default
// cluster, one the key was never meant for. Deleting a cluster revokes
// the keys bound to it; other keys keep working.
func TestProbeDeletedClusterStopsItsKeys(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, true, func(d *Deps) {
			d.Inference = InferenceDeps{Keys: d.Tenants, Router: newTestRouter()}
		})
		base := serveLoopback(t, e)
		_, tok := signupTok(e, "delete-bound@example.com")
		prod, staging := mkCluster(t, e, tok, "prod"), mkCluster(t, e, tok, "staging")
		for _, cid := range []string{prod, staging} {
			if r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, map[string]any{"base_url": "http://127.0.0.1:1", "model": "m"}); r.status != 201 {
				t.Fatalf("instance: %d %s", r.status, r.raw)
			}
		}
		bound := e.do("POST", "/api/v1/keys", tok, map[string]any{"name": "staging-ci", "cluster_id": staging})
		other := e.do("POST", "/api/v1/keys", tok, map[string]any{"name": "prod-app", "cluster_id": prod})
		if r := httpDo(t, "GET", base+"/v1/models", bound.str("key"), nil); r.status != 200 {
			t.Fatalf("bound key before: %d %s", r.status, r.raw)
		}
		if r := httpDo(t, "DELETE", base+"/api/v1/clusters/"+staging, tok, nil); r.status != 204 {
			t.Fatalf("delete: %d %s", r.status, r.raw)
		}
		if r := httpDo(t, "GET", base+"/v1/models", bound.str("key"), nil); r.status != http.StatusUnauthorized {
			t.Errorf("the deleted cluster's key: %d %s, want 401 (it must stop working)", r.status, r.raw)
		}
		if r := httpDo(t, "GET", base+"/v1/models", other.str("key"), nil); r.status != 200 {
			t.Errorf("another cluster's key: %d %s", r.status, r.raw)
		}
		r := httpDo(t, "GET", base+"/api/v1/keys", tok, nil)
		if !strings.Contains(r.raw, `"revoked_at"`) || strings.Count(r.raw, `"revoked_at"`) != 1 {
			t.Errorf("keys after the delete: %s", r.raw)
		}
	})
}
