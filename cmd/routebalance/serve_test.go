package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// startServe runs `routebalance serve` on a free loopback port with the
// given data dir and returns its base URL and a stop function that returns
// runServe's error.
func startServe(t testing.TB, dataDir string, extra ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	// Metrics on a free loopback port unless the test says otherwise (the
	// default 127.0.0.1:9091 would clash between tests running at once).
	args := append([]string{"--addr", "127.0.0.1:0", "--data-dir", dataDir, "--database-url", "", "--shutdown-timeout", "5s", "--metrics-addr", "127.0.0.1:0"}, extra...)
	go func() {
		err := runServe(ctx, args, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("serve did not start: %v (%v)", err, <-done)
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck
	url := strings.TrimSpace(strings.TrimPrefix(line, "routebalance listening on "))
	return url, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute): // a hang guard: a loaded machine drains slowly
			t.Fatal("serve did not stop within 1 min of cancellation")
			return nil
		}
	}
}

func TestServeLifecycle(t *testing.T) {
	dir := t.TempDir()
	url, stop := startServe(t, dir, "--allow-private-endpoints")
	res, err := http.Get(url + "/readyz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", res, err)
	}
	res.Body.Close()
	body := `{"email":"ops@example.com","password":"correct-horse-42","name":"Ops"}`
	res, err = http.Post(url+"/api/v1/signup", "application/json", strings.NewReader(body))
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("signup: %v %v", res, err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	json.NewDecoder(res.Body).Decode(&tok) //nolint:errcheck
	res.Body.Close()
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after cancellation", err)
	}
	for _, f := range []string{"jwt.secret", "encryption.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s not persisted: %v", f, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	// A restart reuses the persisted secrets: the old session still works.
	url, stop = startServe(t, dir)
	defer stop() //nolint:errcheck
	req, _ := http.NewRequest("GET", url+"/api/v1/clusters", nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Contains(b, []byte(`"data":[]`)) {
		t.Fatalf("after restart: %d %s", res.StatusCode, b)
	}
}

func TestMigrateCommand(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := runMigrate(context.Background(), []string{"--data-dir", dir, "--database-url", ""}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "engine: sqlite") || !strings.Contains(out.String(), "0001_tenants") || strings.Contains(out.String(), "none") {
		t.Errorf("first migrate printed:\n%s", out.String())
	}
	out.Reset()
	if err := runMigrate(context.Background(), []string{"--data-dir", dir, "--database-url", ""}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "none (up to date)") {
		t.Errorf("second migrate printed:\n%s", out.String())
	}
}

func TestDecodeSecret(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  int
	}{
		{"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", 32},
		{"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 32},
		{"short", -1},
	} {
		b, err := decodeSecret(tc.in)
		if tc.n < 0 {
			if err == nil {
				t.Errorf("decodeSecret(%q) accepted", tc.in)
			}
			continue
		}
		if err != nil || len(b) != tc.n || b[1] != 1 {
			t.Errorf("decodeSecret(%q) = %v, %v", tc.in, b, err)
		}
	}
}

func TestHealthcheckCommand(t *testing.T) {
	url, stop := startServe(t, t.TempDir())
	defer stop() //nolint:errcheck
	addr := strings.TrimPrefix(url, "http://")
	if err := runHealthcheck(context.Background(), []string{"--addr", addr}, io.Discard, io.Discard); err != nil {
		t.Errorf("healthcheck against a live server: %v", err)
	}
	if err := runHealthcheck(context.Background(), []string{"--addr", "127.0.0.1:1", "--timeout", "1s"}, io.Discard, io.Discard); err == nil {
		t.Error("healthcheck against a closed port succeeded")
	}
}

func postJSON(t testing.TB, url, token, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out) //nolint:errcheck
	if res.StatusCode >= 300 {
		t.Fatalf("POST %s: %d %v", url, res.StatusCode, out)
	}
	return out
}

// TestServeDrainsStreamOnShutdown cancels serve (as SIGTERM does) while a
// streamed completion is in flight: new connections are refused, the
// stream still ends with [DONE], serve returns nil and the request is
// metered.
func TestServeDrainsStreamOnShutdown(t *testing.T) {
	hold := make(chan struct{})
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 20, Hold: hold})
	dir := t.TempDir()
	base, stop := startServe(t, dir, "--allow-private-endpoints")

	tok := postJSON(t, base+"/api/v1/signup", "", `{"email":"d@example.com","password":"correct-horse-42","name":"D"}`)["access_token"].(string)
	cid := postJSON(t, base+"/api/v1/clusters", tok, `{"name":"c"}`)["id"].(string)
	postJSON(t, base+"/api/v1/clusters/"+cid+"/instances", tok, `{"base_url":"`+up.URL+`","model":"m","gpu":"l4"}`)
	key := postJSON(t, base+"/api/v1/keys", tok, `{"name":"k"}`)["key"].(string)

	body := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"auto","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			body <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		body <- string(b)
	}()
	<-up.Arrived()

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Wait (bounded) until the listener is closed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
		res, err := c.Get(base + "/healthz")
		if err != nil {
			break
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 10 s after shutdown began")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("serve returned (%v) while a stream was in flight", err)
	default:
	}
	close(hold)
	got := <-body
	if !strings.Contains(got, "data: [DONE]") || strings.Count(got, `"content"`) < 20 {
		t.Fatalf("stream cut by shutdown:\n%s", got)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}

	db, err := sqlstore.OpenSQLite(filepath.Join(dir, "routebalance.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM billing_usage").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("metered requests = %d, want 1", n)
	}
}

func TestServeTracingFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string // ROUTEBALANCE_OTLP_ENDPOINT
		want    telemetry.TracingConfig
		wantErr bool
	}{
		{name: "off by default", want: telemetry.TracingConfig{ServiceName: "routebalance", SampleRatio: 1}},
		{name: "flags", args: []string{"--otlp-endpoint", "http://otel:4318", "--otlp-service-name", "rb-eu", "--trace-sample-ratio", "0.25"},
			want: telemetry.TracingConfig{Endpoint: "http://otel:4318", ServiceName: "rb-eu", SampleRatio: 0.25}},
		{name: "env", env: "https://collector.example.com/v1/traces",
			want: telemetry.TracingConfig{Endpoint: "https://collector.example.com/v1/traces", ServiceName: "routebalance", SampleRatio: 1}},
		{name: "bad endpoint", args: []string{"--otlp-endpoint", "otel:4318"}, wantErr: true},
		{name: "ratio zero", args: []string{"--trace-sample-ratio", "0"}, wantErr: true},
		{name: "ratio above one", args: []string{"--trace-sample-ratio", "2"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ROUTEBALANCE_OTLP_ENDPOINT", tc.env)
			cfg, err := parseServeFlags(tc.args, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(tc.want, cfg.tracing); diff != "" {
					t.Errorf("tracing config (-want +got):\n%s", diff)
				}
			}
		})
	}
}
