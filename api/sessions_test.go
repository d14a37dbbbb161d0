package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/tenants"
)

// TestSessionEndpoints: issue 16 item 4 over HTTP. Refresh rotates and a
// reused refresh token ends the login; logout, password change and
// revoke-all (both spellings) revoke what they say.
func TestSessionEndpoints(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	_, tok, refresh := e.signup("sessions@example.com")
	login := func() (string, string) {
		r := e.do("POST", "/api/v1/login", "", map[string]any{"email": "sessions@example.com", "password": "correct-horse-42"})
		if r.status != 200 {
			t.Fatalf("login: %d %s", r.status, r.raw)
		}
		return r.str("access_token"), r.str("refresh_token")
	}
	works := func(access string) bool { return e.do("GET", "/api/v1/keys", access, nil).status == 200 }

	r := e.do("POST", "/api/v1/refresh", "", map[string]any{"refresh_token": refresh})
	if r.status != 200 {
		t.Fatalf("refresh: %d %s", r.status, r.raw)
	}
	tok2, refresh2 := r.str("access_token"), r.str("refresh_token")
	if r := e.do("POST", "/api/v1/refresh", "", map[string]any{"refresh_token": refresh}); r.status != 401 {
		t.Fatalf("reused refresh token: %d %s, want 401", r.status, r.raw)
	}
	if r := e.do("POST", "/api/v1/refresh", "", map[string]any{"refresh_token": refresh2}); r.status != 401 {
		t.Errorf("refresh token issued before the reuse: %d, want 401", r.status)
	}
	if works(tok) || works(tok2) {
		t.Error("access tokens of a family revoked by reuse still work")
	}

	a, aRefresh := login()
	b, _ := login()
	if r := e.do("POST", "/api/v1/logout", a, nil); r.status != 204 {
		t.Fatalf("logout: %d %s", r.status, r.raw)
	}
	if works(a) || !works(b) {
		t.Errorf("after logging out a: a works %v (want false), b works %v (want true)", works(a), works(b))
	}
	if r := e.do("POST", "/api/v1/refresh", "", map[string]any{"refresh_token": aRefresh}); r.status != 401 {
		t.Errorf("refresh after logout: %d", r.status)
	}
	if r := e.do("POST", "/api/v1/logout", "", nil); r.status != 401 {
		t.Errorf("logout without a token: %d, want 401", r.status)
	}

	c, _ := login()
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"old_password": "wrong-horse-42", "new_password": "difference-engine-2"}, "old_password"},
		{map[string]any{"old_password": "correct-horse-42", "new_password": "password123"}, "new_password"},
		{map[string]any{"old_password": "correct-horse-42", "new_password": "correct-horse-42"}, "new_password"},
		{map[string]any{"new_password": "difference-engine-2"}, "old_password"},
	} {
		r := e.do("POST", "/api/v1/password", c, tc.body)
		env, _ := r.body["error"].(map[string]any)
		if r.status != 400 || env["param"] != tc.param {
			t.Errorf("password change %v: %d %s, want 400 on %s", tc.body, r.status, r.raw, tc.param)
		}
	}
	r = e.do("POST", "/api/v1/password", c, map[string]any{"old_password": "correct-horse-42", "new_password": "difference-engine-2"})
	if r.status != 200 || r.str("access_token") == "" {
		t.Fatalf("password change: %d %s", r.status, r.raw)
	}
	fresh := r.str("access_token")
	if works(b) || works(c) || !works(fresh) {
		t.Errorf("after the password change: b %v, c %v (want false), new token %v (want true)", works(b), works(c), works(fresh))
	}

	for _, route := range []struct{ method, path string }{{"POST", "/api/v1/sessions/revoke-all"}, {"DELETE", "/api/v1/sessions"}} {
		x := e.do("POST", "/api/v1/login", "", map[string]any{"email": "sessions@example.com", "password": "difference-engine-2"}).str("access_token")
		y := e.do("POST", "/api/v1/login", "", map[string]any{"email": "sessions@example.com", "password": "difference-engine-2"}).str("access_token")
		if r := e.do(route.method, route.path, x, nil); r.status != 204 {
			t.Fatalf("%s %s: %d %s", route.method, route.path, r.status, r.raw)
		}
		if works(x) || works(y) {
			t.Errorf("%s %s left a session working", route.method, route.path)
		}
	}
}

// TestLoginThrottleRetryAfterAndProxies: issue 16 item 7 over HTTP. The
// 429 carries Retry-After; behind a trusted proxy the throttle counts per
// X-Forwarded-For client, so failures from one client do not lock the
// owner out from another.
func TestLoginThrottleRetryAfterAndProxies(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, false, nil)
	e.signup("owner@example.com")
	cfg := DefaultConfig()
	cfg.TrustedProxies = []string{"0.0.0.0/0"} // app.Test's peer address is 0.0.0.0
	app := New(cfg, e.srv.deps).App()
	post := func(client, password string) *http.Response {
		t.Helper()
		req := httptest.NewRequest("POST", "/api/v1/login", jsonBody(map[string]any{"email": "owner@example.com", "password": password}))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", client+", 10.0.0.1")
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for range tenants.DefaultConfig().LoginMaxFailures {
		if res := post("198.51.100.7", "wrong-horse-42"); res.StatusCode != 401 {
			t.Fatalf("failure: %d", res.StatusCode)
		}
	}
	res := post("198.51.100.7", "correct-horse-42")
	if res.StatusCode != 429 {
		t.Fatalf("attacker's client: %d, want 429", res.StatusCode)
	}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 || s > int(tenants.DefaultConfig().LoginWindow.Seconds()) {
		t.Errorf("Retry-After %q, want whole seconds within the window", res.Header.Get("Retry-After"))
	}
	if res := post("203.0.113.9", "correct-horse-42"); res.StatusCode != 200 {
		t.Errorf("owner from another client: %d, want 200", res.StatusCode)
	}
}

func jsonBody(v any) *bytes.Reader {
	j, _ := json.Marshal(v)
	return bytes.NewReader(j)
}
