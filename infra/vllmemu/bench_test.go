package vllmemu

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/routing/engine"
)

// BenchmarkZeroLatencyChat measures one non-streaming chat round trip to a
// zero-latency instance over loopback.
func BenchmarkZeroLatencyChat(b *testing.B) {
	f := engine.ReferenceCluster()
	f.Tiers = f.Tiers[3:]
	f.Tiers[0].Instances = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := StartCluster(ctx, Config{File: f, ZeroLatency: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	url := c.Instances[0].URL + "/v1/chat/completions"
	body := `{"model":"gemma-2-9b-it","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`
	for b.Loop() {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
