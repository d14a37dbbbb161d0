package benchcpu

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD.
const rusageThread = 1

// Thread returns the CPU time the calling OS thread has used; callers lock
// the goroutine to its thread first.
func Thread() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
