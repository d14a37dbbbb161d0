package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWebServesDashboard(t *testing.T) {
	app := New(Config{}, Deps{}).App()
	type want struct {
		status      int
		contentType string
		bodyHas     string
		secHeaders  bool
	}
	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		want   want
	}{
		{"root is the shell", "GET", "/", nil, want{200, "text/html; charset=utf-8", `<script type="module" src="/js/main.js">`, true}},
		{"deep link falls back to the shell", "GET", "/cluster", nil, want{200, "text/html; charset=utf-8", `<div class="layout">`, true}},
		{"nested deep link falls back to the shell", "GET", "/keys/abc", nil, want{200, "text/html; charset=utf-8", `<div class="layout">`, true}},
		{"module script", "GET", "/js/main.js", nil, want{200, "text/javascript; charset=utf-8", "import { Session }", true}},
		{"stylesheet", "GET", "/app.css", nil, want{200, "text/css; charset=utf-8", ":root", true}},
		{"icon", "GET", "/favicon.svg", nil, want{200, "image/svg+xml", "<svg", true}},
		{"missing asset is 404, not the shell", "GET", "/js/nope.js", nil, want{404, "text/plain; charset=utf-8", "not found", true}},
		{"path traversal stays inside the assets", "GET", "/js/../../web.go", nil, want{404, "text/plain; charset=utf-8", "not found", true}},
		{"HEAD answers without a body", "HEAD", "/", nil, want{200, "text/html; charset=utf-8", "", true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			got := want{resp.StatusCode, resp.Header.Get("Content-Type"), tc.want.bodyHas, resp.Header.Get("Content-Security-Policy") != ""}
			if !strings.Contains(string(body), tc.want.bodyHas) {
				got.bodyHas = "<missing> in " + webTruncate(string(body), 200)
			}
			if tc.method == "HEAD" && len(body) != 0 {
				got.bodyHas = "a body of " + strconv.Itoa(len(body)) + " bytes"
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
			if tc.want.secHeaders {
				checkSecurityHeaders(t, resp.Header)
			}
		})
	}
}

// TestWebLeavesAPIPathsAlone checks that API paths and non-GET methods
// fall through to the app's own 404/405 handling instead of the shell.
func TestWebLeavesAPIPathsAlone(t *testing.T) {
	app := New(Config{}, Deps{}).App()
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/v1/no-such-thing"},
		{"GET", "/v1/no-such-thing"},
		{"GET", "/api"},
		{"POST", "/no-such-thing"},
		{"DELETE", "/cluster"},
	} {
		resp, err := app.Test(httptest.NewRequest(tc.method, tc.path, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 405 {
			t.Errorf("%s %s: status %d, want 404 or 405", tc.method, tc.path, resp.StatusCode)
		}
		if strings.Contains(string(body), "<html") || resp.Header.Get("Content-Security-Policy") != "" {
			t.Errorf("%s %s answered with the dashboard: %s", tc.method, tc.path, webTruncate(string(body), 120))
		}
	}
}

func checkSecurityHeaders(t *testing.T, h http.Header) {
	t.Helper()
	want := map[string]string{
		"X-Frame-Options":        "DENY",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	}
	got := map[string]string{}
	for k := range want {
		got[k] = h.Get(k)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("security headers (-want +got):\n%s", diff)
	}
	csp := h.Get("Content-Security-Policy")
	for _, d := range []string{"script-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q allows inline or eval", csp)
	}
}

func TestWebETagRevalidation(t *testing.T) {
	app := New(Config{}, Deps{}).App()
	resp, err := app.Test(httptest.NewRequest("GET", "/js/main.js", nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if etag == "" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q; want an ETag and no-cache", etag, resp.Header.Get("Cache-Control"))
	}
	for _, tc := range []struct {
		inm  string
		want int
	}{{etag, 304}, {`W/` + etag, 304}, {`"other", ` + etag, 304}, {`"other"`, 200}} {
		req := httptest.NewRequest("GET", "/js/main.js", nil)
		req.Header.Set("If-None-Match", tc.inm)
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("If-None-Match %s: status %d, want %d", tc.inm, resp.StatusCode, tc.want)
		}
	}
}

func webTruncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
