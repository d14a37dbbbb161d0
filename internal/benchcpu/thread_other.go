//go:build !linux

package benchcpu

import "time"

// Thread reports false: per-thread CPU time is read on Linux only.
func Thread() (time.Duration, bool) { return 0, false }
