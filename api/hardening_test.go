package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/routebalance/routebalance/migrations/dbtest"
)

// TestControlCharactersRefused: issue 16 item 6. CR, LF, NUL, other C0,
// DEL and C1 characters are refused in names, model, gpu and api_key with
// 400 and the field as param, on create and on patch.
func TestControlCharactersRefused(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	_, tok, _ := e.signup("cc@example.com")
	cid := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "prod"}).str("id")
	kid := e.do("POST", "/api/v1/keys", tok, map[string]any{"name": "k"}).str("id")
	inst := map[string]any{"base_url": "http://203.0.113.1:8000", "model": "m"}
	r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, inst)
	if r.status != 201 {
		t.Fatalf("create instance: %d %s", r.status, r.raw)
	}
	iid := r.str("id")
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for k, v := range inst {
			m[k] = v
		}
		m[k] = v
		return m
	}
	bad := []string{"a\r\nX-Injected: 1", "a\nb", "a\x00b", "a\tb", "a\x1bb", "a\x7fb", "a\u0085b"}
	for _, v := range bad {
		for _, tc := range []struct {
			name, method, path, param string
			body                      any
		}{
			{"signup name", "POST", "/api/v1/signup", "name", map[string]any{"email": "n@example.com", "password": "correct-horse-42", "name": v}},
			{"cluster name", "POST", "/api/v1/clusters", "name", map[string]any{"name": v}},
			{"cluster rename", "PATCH", "/api/v1/clusters/" + cid, "name", map[string]any{"name": v}},
			{"key name", "POST", "/api/v1/keys", "name", map[string]any{"name": v}},
			{"key rename", "PATCH", "/api/v1/keys/" + kid, "name", map[string]any{"name": v}},
			{"instance model", "POST", "/api/v1/clusters/" + cid + "/instances", "model", with("model", v)},
			{"instance gpu", "POST", "/api/v1/clusters/" + cid + "/instances", "gpu", with("gpu", v)},
			{"instance api_key", "POST", "/api/v1/clusters/" + cid + "/instances", "api_key", with("api_key", "sk-"+v)},
			{"patch model", "PATCH", "/api/v1/clusters/" + cid + "/instances/" + iid, "model", map[string]any{"model": v}},
			{"patch gpu", "PATCH", "/api/v1/clusters/" + cid + "/instances/" + iid, "gpu", map[string]any{"gpu": v}},
			{"patch api_key", "PATCH", "/api/v1/clusters/" + cid + "/instances/" + iid, "api_key", map[string]any{"api_key": "sk-" + v}},
			{"test-connection api_key", "POST", "/api/v1/clusters/" + cid + "/instances/test-connection", "api_key", map[string]any{"base_url": "http://203.0.113.1:8000", "api_key": "sk-" + v}},
		} {
			r := e.do(tc.method, tc.path, tok, tc.body)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s %q: status %d, want 400: %s", tc.name, v, r.status, r.raw)
				continue
			}
			e.t = t
			if env, _ := r.body["error"].(map[string]any); env["param"] != tc.param {
				t.Errorf("%s %q: param %v, want %q: %s", tc.name, v, env["param"], tc.param, r.raw)
			}
		}
	}
	// A space inside an upstream key is refused too (it is sent verbatim
	// as a bearer token); ordinary values still pass.
	if r := e.do("PATCH", "/api/v1/clusters/"+cid+"/instances/"+iid, tok, map[string]any{"api_key": "sk two"}); r.status != 400 {
		t.Errorf("api_key with a space: %d %s", r.status, r.raw)
	}
	if r := e.do("PATCH", "/api/v1/clusters/"+cid+"/instances/"+iid, tok, map[string]any{"api_key": "sk-Ab0_.~+/=", "gpu": "A100 80G", "model": "Qwen/Qwen2.5-7B-Instruct"}); r.status != 200 {
		t.Errorf("ordinary values refused: %d %s", r.status, r.raw)
	}
	if r := e.do("PATCH", "/api/v1/clusters/"+cid, tok, map[string]any{"name": "prod – eu ✓"}); r.status != 200 {
		t.Errorf("unicode name refused: %d %s", r.status, r.raw)
	}
}

// TestPricesBounded: issue 16 item 1 (registration part). Prices above
// tenants.MaxPricePerMTok, negative or non-finite are 400 with the field as
// param on create and patch; the maximum itself is accepted.
func TestPricesBounded(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	_, tok, _ := e.signup("price@example.com")
	cid := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "prod"}).str("id")
	base := `{"base_url":"http://203.0.113.1:8000","model":"m",`
	for _, tc := range []struct {
		body, param string
	}{
		{`"price_in_per_mtok":1e308}`, "price_in_per_mtok"},
		{`"price_out_per_mtok":1e308}`, "price_out_per_mtok"},
		{`"price_in_per_mtok":10000.01}`, "price_in_per_mtok"},
		{`"price_out_per_mtok":-0.5}`, "price_out_per_mtok"},
	} {
		r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, base+tc.body)
		if r.status != 400 {
			t.Errorf("%s: status %d, want 400: %s", tc.body, r.status, r.raw)
			continue
		}
		if env, _ := r.body["error"].(map[string]any); env["param"] != tc.param {
			t.Errorf("%s: param %v, want %s", tc.body, env["param"], tc.param)
		}
	}
	r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, base+`"price_in_per_mtok":10000,"price_out_per_mtok":10000}`)
	if r.status != 201 {
		t.Fatalf("the documented maximum is refused: %d %s", r.status, r.raw)
	}
	iid := r.str("id")
	if r := e.do("PATCH", "/api/v1/clusters/"+cid+"/instances/"+iid, tok, `{"price_out_per_mtok":1e300}`); r.status != 400 {
		t.Errorf("patch to 1e300: %d %s", r.status, r.raw)
	}
}

// TestConnectionDoesNotFollowRedirects: issue 16 "Also". A redirect from
// the registered server is reported as a failed probe and never followed,
// so the upstream key is sent to the registered host:port only.
func TestConnectionDoesNotFollowRedirects(t *testing.T) {
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
	}))
	defer other.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	defer redir.Close()

	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, true, nil)
	_, tok, _ := e.signup("redir@example.com")
	cid := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "prod"}).str("id")
	r := e.do("POST", "/api/v1/clusters/"+cid+"/instances/test-connection", tok, map[string]any{"base_url": redir.URL, "api_key": "sk-secret"})
	if r.status != 200 || r.body["ok"] != false {
		t.Fatalf("test-connection through a redirect: %d %s, want 200 with ok false", r.status, r.raw)
	}
	if h, _ := r.body["health"].(map[string]any); !strings.Contains(h["error"].(string), "redirect") {
		t.Errorf("health error does not say redirect: %s", r.raw)
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("Authorization sent to another host:port %d times", n)
	}
}

// TestNoClusterSeveral: issue 16 "Also". The 400 for a tenant with
// several clusters and none chosen says so.
func TestNoClusterSeveral(t *testing.T) {
	e := newInfEnv(t, envOpts{})
	e.p.Cluster, e.p.UnchosenClusters = nil, 3
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, nil)
	env := decodeEnvelope(t, body)
	if resp.StatusCode != 400 || str(env.Error.Code) != "no_cluster" || !strings.Contains(env.Error.Message, "3 clusters and none is chosen") {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}
