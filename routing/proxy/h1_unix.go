//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// h1Alive reports whether an idle connection is still open: a
// non-blocking peek finds nothing to read (EAGAIN). A closed connection
// reads as EOF, an instance that wrote to an idle connection is not
// trusted either; both are dropped rather than written to.
func h1Alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	}); err != nil {
		return false
	}
	return alive
}
