package latency

import (
	"runtime"
	"syscall"
	"testing"
)

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}

// measureCPU runs the benchmark loop f on a locked OS thread and reports
// the thread's CPU time per operation as "cpu-ns/op": on a shared machine
// wall time per op includes waiting for a core, CPU time does not.
func measureCPU(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPU()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	if end, ok2 := threadCPU(); ok && ok2 && n > 0 {
		b.ReportMetric(float64(end-start)/float64(n), "cpu-ns/op")
	}
}
