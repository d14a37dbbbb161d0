//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package api

import (
	"errors"
	"syscall"
)

// peerGone peeks at the socket without consuming: a zero-byte read means
// the peer sent FIN, ECONNRESET that it reset the connection; EAGAIN (no
// data yet) and pending bytes mean it is still there. A descriptor that is
// already closed counts as gone.
func peerGone(rc syscall.RawConn) bool {
	gone := false
	var buf [1]byte
	err := rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			gone = true
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOTCONN):
			gone = true
		}
	})
	return err != nil || gone
}
