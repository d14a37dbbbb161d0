package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// accessLine returns the access-log line of path from the server's JSON log.
func accessLine(t *testing.T, logs *lockedBuffer, path string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "http request" && m["path"] == path {
			return m
		}
	}
	return nil
}

// TestAccessLogWaitsForStreamEnd: a stream's access-log line is written
// when the stream ends, with the bytes the client received and a duration
// that covers the whole stream (issue 16, "Also"). The upstream waits
// 20 ms between its 20 tokens, so the stream lasts at least 19 × 20 ms
// after the handler returned; before the fix the line was written when the
// handler returned, without bytes_out and with the duration of the
// response headers only.
func TestAccessLogWaitsForStreamEnd(t *testing.T) {
	const tokens, gap = 20, 20 * time.Millisecond
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: tokens, TokenDelay: gap})
	logs := &lockedBuffer{}
	e := newInfEnv(t, envOpts{realRouter: true, logTo: logs, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	resp, body := e.post(t, "/v1/chat/completions", testKey, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("stream: %d %q", resp.StatusCode, body)
	}
	var line map[string]any
	testwait.Until(t, "the access-log line", func() bool { line = accessLine(t, logs, "/v1/chat/completions"); return line != nil })
	if got, _ := line["bytes_out"].(float64); int(got) != len(body) {
		t.Errorf("bytes_out = %v, want the %d bytes the client received (line %v)", line["bytes_out"], len(body), line)
	}
	if got, _ := line["duration_ms"].(float64); got < float64((tokens-1)*gap/time.Millisecond) {
		t.Errorf("duration_ms = %v, want ≥ %d (the stream's own length): logged before the stream ended", got, (tokens-1)*gap/time.Millisecond)
	}
	if line["stream"] != true {
		t.Errorf("line %v: want stream true", line)
	}
}

// TestAccessLogStreamClientGone: a client that leaves mid-stream gets its
// line when the stream ends (the relay stops at the departure), with the
// bytes written until then — not the 500-token answer.
func TestAccessLogStreamClientGone(t *testing.T) {
	up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 500, TokenDelay: 5 * time.Millisecond})
	logs := &lockedBuffer{}
	e := newInfEnv(t, envOpts{realRouter: true, logTo: logs, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 3 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	resp.Body.Close()
	var line map[string]any
	testwait.Until(t, "the access-log line", func() bool { line = accessLine(t, logs, "/v1/chat/completions"); return line != nil })
	if got, _ := line["bytes_out"].(float64); got <= 0 || got >= 500*40 {
		t.Errorf("bytes_out = %v, want the bytes sent before the client left (> 0, far below 500 tokens)", line["bytes_out"])
	}
}
