package api

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// watchClient polls the client's connection every interval while a request
// waits on its upstream and calls cancel once the client has closed or
// reset it. fasthttp neither reads the connection during a handler nor
// cancels any context when the peer leaves, so without this a departed
// client's generation would run to the end on the instance. The probe is
// a non-consuming peek (MSG_PEEK|MSG_DONTWAIT): bytes of a pipelined next
// request stay in the socket for fasthttp. A client that half-closes its
// sending side after the request looks departed; HTTP clients do not do
// that. Connections that expose no file descriptor are not watched.
// stop ends the watch and returns after the poller has exited, so the
// connection is not touched once stop returns; it is idempotent.
func watchClient(conn net.Conn, interval time.Duration, cancel context.CancelFunc) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok || interval <= 0 {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if peerGone(rc) {
					cancel()
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-exited
		})
	}
}
