package engine

import (
	"fmt"
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
