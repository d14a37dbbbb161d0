package api

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// directStream writes a streamed answer straight to the client's
// connection from the handler's goroutine, as HTTP/1.1 chunked encoding:
// the status line and headers go out with the first event, each Flush is
// one chunk in one write. fasthttp's own way (SetBodyStreamWriter) runs
// the writer on a goroutine of its own and pipes every flush to the
// connection's goroutine, which writes it: three goroutine hand-offs
// before the first byte, each a wait for a thread on a busy machine. Here
// the relay, on the handler's goroutine, writes the socket itself.
//
// The handler returns once the stream has ended; it then hijacks the
// connection with no response (fasthttp writes nothing more) and the
// hijack handler (connResumer) ends the body and serves the connection's
// next requests with the same server, so keep-alive holds.
type directStream struct {
	conn  net.Conn
	out   []byte // the header block until it is sent, then one chunk's frame
	head  int    // length of the header block still to send in out
	pend  []byte // body bytes written since the last Flush
	begun bool   // begin has rendered the headers
	ended bool   // the last chunk was sent
	n     int64  // body bytes sent
	err   error  // the first write error: the client is gone
}

var directStreams sync.Pool

// maxKeptBuffer bounds the buffers a pooled directStream keeps.
const maxKeptBuffer = 64 << 10

func newDirectStream(conn net.Conn) *directStream {
	ds, _ := directStreams.Get().(*directStream)
	if ds == nil {
		ds = &directStream{out: make([]byte, 0, 2048), pend: make([]byte, 0, 1024)}
	}
	ds.conn = conn
	return ds
}

func (ds *directStream) release() {
	if cap(ds.out) > maxKeptBuffer || cap(ds.pend) > maxKeptBuffer {
		return
	}
	*ds = directStream{out: ds.out[:0], pend: ds.pend[:0]}
	directStreams.Put(ds)
}

// begin renders the response's status line and headers, chunked, to be
// sent with the first Flush.
func (ds *directStream) begin(h *fasthttp.ResponseHeader) {
	h.SetContentLength(-1) // Transfer-Encoding: chunked
	ds.out = h.AppendBytes(ds.out[:0])
	ds.head = len(ds.out)
	ds.begun = true
}

// Write buffers p until the next Flush. Nothing follows an SSE stream's
// "data: [DONE]" event; bytes written after it are dropped (the body has
// ended).
func (ds *directStream) Write(p []byte) (int, error) {
	if ds.err != nil {
		return 0, ds.err
	}
	if !ds.ended {
		ds.pend = append(ds.pend, p...)
	}
	return len(p), nil
}

// streamDone is the last event of a chat or text completion stream.
var streamDone = []byte("data: [DONE]\n\n")

// Flush sends what was written since the last Flush as one chunk (after
// the headers, the first time). A chunk that ends with the stream's
// [DONE] event carries the body's last chunk in the same write: a client
// that stops reading at [DONE] (the OpenAI SDKs do) then has the whole
// body, and Go's transport, like others, keeps the connection only for a
// body read to its end; a last chunk sent a moment later makes it dial a
// new connection for the next request about one stream in five.
func (ds *directStream) Flush() error {
	if ds.err != nil {
		return ds.err
	}
	if len(ds.pend) == 0 {
		return nil
	}
	out := appendChunk(ds.out[:ds.head], ds.pend)
	if bytes.HasSuffix(ds.pend, streamDone) {
		out = append(out, "0\r\n\r\n"...)
		ds.ended = true
	}
	ds.out, ds.head = out[:0], 0
	ds.n += int64(len(ds.pend))
	ds.pend = ds.pend[:0]
	return ds.send(out)
}

// finish sends the last chunk (and the headers, if nothing was sent),
// unless [DONE] ended the body already.
func (ds *directStream) finish() error {
	if err := ds.Flush(); err != nil || ds.ended {
		return err
	}
	out := append(ds.out[:ds.head], "0\r\n\r\n"...)
	ds.out, ds.head = out[:0], 0
	ds.ended = true
	return ds.send(out)
}

func (ds *directStream) send(b []byte) error {
	if _, err := ds.conn.Write(b); err != nil {
		ds.err = err
	}
	return ds.err
}

// appendChunk appends b framed as one HTTP/1.1 chunk.
func appendChunk(dst, b []byte) []byte {
	const hex = "0123456789abcdef"
	var size [16]byte
	i := len(size)
	for n := len(b); ; n >>= 4 {
		i--
		size[i] = hex[n&15]
		if n < 16 {
			break
		}
	}
	dst = append(dst, size[i:]...)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// connResumer hands a connection whose stream a directStream wrote back
// to the server (its ServeConn). The server runs with KeepHijackedConns,
// so fasthttp leaves hijacked connections to their hijack handler.
//
// A connection without a pipelined request waits here for the first byte
// of its next one, within the server's idle timeout, as fasthttp waits on
// an idle keep-alive connection; close (at the server's shutdown) closes
// the connections waiting so. Only then does ServeConn take it over:
// fasthttp would count a connection in ServeConn as busy until its next
// request came, and its shutdown would wait for it.
type connResumer struct {
	serve func(net.Conn) error
	idle  time.Duration // 0: no limit
	// streams counts the streams written by a directStream (the tests
	// tell by it which way a stream went).
	streams atomic.Int64

	mu      sync.Mutex
	resting map[net.Conn]struct{}
	closed  bool
}

func newConnResumer(serve func(net.Conn) error, idle time.Duration) *connResumer {
	return &connResumer{serve: serve, idle: idle, resting: map[net.Conn]struct{}{}}
}

// handler is the hijack handler of the connection ds streamed to: it
// sends the body's last chunk (unless [DONE] did), calls ended, then with
// keep resumes the connection, else it closes it.
func (r *connResumer) handler(ds *directStream, keep bool, ended func()) fasthttp.HijackHandler {
	return func(hc net.Conn) {
		err := ds.finish()
		ds.release()
		ended()
		r.resume(hc, keep && err == nil)
	}
}

func (r *connResumer) resume(hc net.Conn, keep bool) {
	raw := hc
	if u, ok := hc.(interface{ UnsafeConn() net.Conn }); ok {
		raw = u.UnsafeConn()
	}
	if !keep {
		_ = raw.Close()
		return
	}
	conn, err := reclaimConn(hc, raw)
	if err != nil {
		_ = raw.Close()
		return
	}
	if _, pipelined := conn.(*prefixConn); !pipelined {
		if conn, err = r.rest(conn); err != nil {
			_ = raw.Close()
			return
		}
	}
	_ = r.serve(conn) // it closes the connection when it ends, unless hijacked again
}

// rest waits for the first byte of conn's next request and returns conn
// with that byte put back in front.
func (r *connResumer) rest(conn net.Conn) (net.Conn, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, net.ErrClosed
	}
	r.resting[conn] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.resting, conn)
		r.mu.Unlock()
	}()
	if r.idle > 0 {
		if err := conn.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
			return nil, err
		}
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(conn, first); err != nil {
		return nil, err
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return &prefixConn{Conn: conn, pre: first}, nil
}

// close closes the connections waiting for their next request, and from
// now on every connection a stream hands back.
func (r *connResumer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for c := range r.resting {
		_ = c.Close()
	}
}

// reclaimConn returns the connection under hc, the hijacked connection
// fasthttp reads through its buffered reader, with the bytes that reader
// holds already (a pipelined next request) put back in front of it.
// Reading hc with a read deadline in the past returns the buffered bytes
// and then a timeout, leaving the socket's own bytes in the socket. The
// result is never a prefixConn over another prefixConn: a connection
// reclaimed again is unwrapped first.
func reclaimConn(hc, raw net.Conn) (net.Conn, error) {
	if err := raw.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return nil, err
	}
	var held []byte
	buf := make([]byte, 512)
	for {
		n, err := hc.Read(buf)
		held = append(held, buf[:n]...)
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
		break
	}
	if err := raw.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	if p, ok := raw.(*prefixConn); ok {
		held = append(held, p.pre...)
		raw = p.Conn
	}
	if len(held) == 0 {
		return raw, nil
	}
	return &prefixConn{Conn: raw, pre: held}, nil
}

// prefixConn is a connection whose first reads return pre.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// SyscallConn exposes the socket (watchClient peeks at it).
func (p *prefixConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := p.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
