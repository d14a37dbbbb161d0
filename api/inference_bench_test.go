package api

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/tenants"
)

// BenchmarkInferenceOverhead compares one sequential chat completion sent
// straight to a loopback fake vLLM server with the same request sent
// through RouteBalance (auth, parsing, the scheduler's Router, the proxy):
// the difference of the two is the latency the service adds at light load.
//
//	go test -run '^$' -bench InferenceOverhead -benchtime 2000x ./api/
func BenchmarkInferenceOverhead(b *testing.B) {
	up := vllmtest.New(b, vllmtest.Config{Model: "m", Tokens: 4})
	e := newInfEnv(b, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	for _, bc := range []struct {
		name, url, auth string
		stream          bool
	}{
		{"direct", up.URL + "/v1/chat/completions", "", false},
		{"routed", e.url + "/v1/chat/completions", "Bearer " + testKey, false},
		{"direct-stream", up.URL + "/v1/chat/completions", "", true},
		{"routed-stream", e.url + "/v1/chat/completions", "Bearer " + testKey, true},
	} {
		body := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`
		if bc.stream {
			body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`
		}
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{}
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, bc.url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if bc.auth != "" {
					req.Header.Set("Authorization", bc.auth)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
