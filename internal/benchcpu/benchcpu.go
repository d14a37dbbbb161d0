// Package benchcpu measures the CPU time of the calling OS thread, so
// benchmarks on a shared machine can report the work done rather than the
// wait for a core.
package benchcpu

import (
	"runtime"
	"testing"
	"time"
)

// Measure runs the benchmark loop f on a locked OS thread and reports the
// thread's CPU time per operation as "cpu-ns/op" where the platform can
// tell it.
func Measure(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := Thread()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	if end, ok2 := Thread(); ok && ok2 && n > 0 {
		b.ReportMetric(float64(end-start)/float64(n), "cpu-ns/op")
	}
}

// Since returns the calling thread's CPU time since start (from Thread).
func Since(start time.Duration) time.Duration {
	now, _ := Thread()
	return now - start
}
