//go:build !race

package proxy

// raceOn: the race detector is on (it makes allocations of its own).
const raceOn = false
