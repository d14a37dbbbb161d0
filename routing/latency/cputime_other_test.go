//go:build !linux

package latency

import "testing"

// measureCPU runs the benchmark loop; thread CPU time is Linux-only.
func measureCPU(b *testing.B, f func()) {
	for b.Loop() {
		f()
	}
}
