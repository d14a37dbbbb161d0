package vllmemu

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkEngine measures the engine's cost per generated token with a
// full batch of 64 sequences of about 250 tokens each, arrivals every 5 ms.
func BenchmarkEngine(b *testing.B) {
	tier := ReferenceCluster().Tiers[2] // llama-3.1-8b on A30, max_num_seqs 64
	lengths := ReferenceCluster().OutputLengths
	b.ReportAllocs()
	var tokens uint64
	for b.Loop() {
		e, _ := NewEngine(EngineConfig{Tier: tier, Lengths: lengths, Start: t0})
		var evs []Event
		at := t0
		for i := 0; i < 1000; i++ {
			for {
				t, ok := e.NextEvent()
				if !ok || t.After(at) {
					break
				}
				evs = e.Advance(t, evs[:0])
			}
			_, _ = e.Submit(at, Request{ID: fmt.Sprint(i), Prompt: fmt.Sprint("prompt ", i), PromptTokens: 200})
			at = at.Add(5 * time.Millisecond)
		}
		for {
			t, ok := e.NextEvent()
			if !ok {
				break
			}
			evs = e.Advance(t, evs[:0])
		}
		tokens += e.Stats().GenerationTokens
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
}

// BenchmarkZeroLatencyChat measures one non-streaming chat round trip to a
// zero-latency instance over loopback.
func BenchmarkZeroLatencyChat(b *testing.B) {
	f := ReferenceCluster()
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
