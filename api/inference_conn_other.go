//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package api

import "syscall"

// peerGone cannot peek on this platform; departures are then noticed only
// when a write to the client fails.
func peerGone(syscall.RawConn) bool { return false }
