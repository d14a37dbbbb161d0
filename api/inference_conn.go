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
//
// The poller is a timer until its first check: a request answered within
// one interval (the usual case) starts no goroutine and stops the watch
// with a timer stop, without waiting on another goroutine.
func watchClient(conn net.Conn, interval time.Duration, cancel context.CancelFunc) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok || interval <= 0 {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	w := &connWatch{rc: rc, interval: interval, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(interval, w.run)
	w.mu.Unlock()
	return w.stop
}

// connWatch is one watched connection (watchClient).
type connWatch struct {
	rc       syscall.RawConn
	interval time.Duration
	cancel   context.CancelFunc

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	done    chan struct{} // made when the poller starts; closed by stop
	exited  chan struct{} // closed when the poller has returned
}

// run is the poller, started by the timer after the first interval.
func (w *connWatch) run() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.done, w.exited = make(chan struct{}), make(chan struct{})
	w.mu.Unlock()
	defer close(w.exited)
	if peerGone(w.rc) {
		w.cancel()
		return
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			if peerGone(w.rc) {
				w.cancel()
				return
			}
		}
	}
}

// stop ends the watch; once it returns the poller has exited or will
// never touch the connection. Idempotent.
func (w *connWatch) stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	done, exited := w.done, w.exited
	w.mu.Unlock()
	if done == nil { // the poller never started, and seeing stopped it never will
		w.timer.Stop()
		return
	}
	close(done)
	<-exited
}
