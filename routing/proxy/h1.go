package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/routebalance/routebalance/routing"
)

// The plain-HTTP upstream client. An instance reached over http:// (vLLM
// in a cluster's network) is called on pooled keep-alive HTTP/1.1
// connections by the calling goroutine itself: it writes the request,
// reads the response headers and then the body from the connection.
// net/http's transport runs a read and a write goroutine per connection
// and hands every request and every response header between them and the
// caller; at c=64 that was most of Proxy.Open's ~10 % of the gateway's
// CPU, and two goroutine hand-offs before a stream's first byte. https://
// instances, base URLs with credentials and a Deps.Transport still go
// through net/http.
//
// A connection goes back to the pool only when its response body was read
// to its end and the response allows keep-alive; anything else (an error,
// a cancellation, a body left unread) closes it. An idle connection the
// instance closed is noticed before reuse (h1Alive: a non-blocking peek),
// so a request is never written to it; a request is never resent.

// h1Client is the pool of plain-HTTP upstream connections.
type h1Client struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	cfg     Config
	targets sync.Map     // base URL → *h1Target
	nTarget atomic.Int64 // entries in targets

	mu    sync.Mutex
	idle  map[string][]*h1Conn // by host:port, most recently used last
	nIdle int
}

// h1Target is a base URL the plain client serves.
type h1Target struct {
	ok     bool   // plain http://, no credentials, no query
	addr   string // host:port to dial
	host   string // the Host header
	prefix string // the base URL's path, without a trailing "/v1"
}

// h1Conn is one upstream connection.
type h1Conn struct {
	c      net.Conn
	lim    h1Limit // what br reads from: bounded while response headers are read
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
}

func newH1Client(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *h1Client {
	return &h1Client{dial: dial, cfg: cfg, idle: map[string][]*h1Conn{}}
}

// target returns how the plain client reaches base (ok false: not at all).
func (h *h1Client) target(base string) *h1Target {
	if t, ok := h.targets.Load(base); ok {
		return t.(*h1Target)
	}
	t := &h1Target{}
	u, err := url.Parse(strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1"))
	if err == nil && u.Scheme == "http" && u.User == nil && u.RawQuery == "" && u.Fragment == "" && u.Host != "" && u.Opaque == "" {
		t.ok = true
		t.host = u.Host
		t.addr = u.Host
		if u.Port() == "" {
			t.addr = net.JoinHostPort(u.Hostname(), "80")
		}
		t.prefix = strings.TrimRight(u.EscapedPath(), "/")
	}
	if h.nTarget.Add(1) > maxH1Targets { // base URLs are as many as instances; bound it anyway
		h.targets.Clear()
		h.nTarget.Store(1)
	}
	h.targets.Store(base, t)
	return t
}

// get returns an idle live connection to addr, or nil.
func (h *h1Client) get(addr string, now time.Time) *h1Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		list := h.idle[addr]
		if len(list) == 0 {
			return nil
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		h.idle[addr] = list[:len(list)-1]
		h.nIdle--
		if now.Sub(c.idleAt) < h.cfg.IdleConnTimeout && c.br.Buffered() == 0 && h1Alive(c.c) {
			return c
		}
		c.c.Close()
	}
}

// put returns a connection to the pool (or closes it when the pool is
// full or closed).
func (h *h1Client) put(c *h1Conn, now time.Time) {
	h.mu.Lock()
	if h.nIdle >= h.cfg.MaxIdleConns || len(h.idle[c.addr]) >= h.cfg.MaxIdleConnsPerHost {
		h.mu.Unlock()
		c.c.Close()
		return
	}
	c.idleAt = now
	h.idle[c.addr] = append(h.idle[c.addr], c)
	h.nIdle++
	h.mu.Unlock()
}

// closeIdle closes every idle connection.
func (h *h1Client) closeIdle() {
	h.mu.Lock()
	idle := h.idle
	h.idle, h.nIdle = map[string][]*h1Conn{}, 0
	h.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.c.Close()
		}
	}
}

// maxH1Targets bounds the cache of parsed base URLs.
const maxH1Targets = 4096

func (h *h1Client) connect(ctx context.Context, addr string) (*h1Conn, error) {
	nc, err := h.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{c: nc, lim: h1Limit{r: nc, n: -1}, bw: bufio.NewWriterSize(nc, 8<<10), addr: addr}
	c.br = bufio.NewReaderSize(&c.lim, 16<<10)
	return c, nil
}

// maxH1HeaderBytes bounds what the plain client reads from the network
// while it waits for a response's headers (1xx answers included): an
// instance that sends more is unreachable and its connection is closed.
// net/http's transport allows 10 MB; vLLM sends well under 1 KiB.
const maxH1HeaderBytes = 1 << 20

var errH1HeadersTooLarge = errors.New("the instance's response headers exceed 1 MiB")

// h1Limit reads from r at most n more bytes, failing after them with
// errH1HeadersTooLarge; n < 0 is no limit.
type h1Limit struct {
	r io.Reader
	n int64
}

func (l *h1Limit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errH1HeadersTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// discard closes a connection for good.
func (c *h1Conn) discard() {
	c.c.Close()
}

// h1Carrier writes the propagator's fields as request header lines.
type h1Carrier struct {
	bw  *bufio.Writer
	bad bool
}

func (c *h1Carrier) Get(string) string { return "" }
func (c *h1Carrier) Keys() []string    { return nil }
func (c *h1Carrier) Set(k, v string) {
	if !validHeaderName(k) || !validHeaderValue(v) {
		c.bad = true
		return
	}
	c.bw.WriteString(k)
	c.bw.WriteString(": ")
	c.bw.WriteString(v)
	c.bw.WriteString("\r\n")
}

// validHeaderName and validHeaderValue are RFC 9110's field syntax, as
// net/http checks it before sending.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// errH1Header is returned (before anything is written) when a header
// value cannot be sent; Open then sends the call through net/http, which
// refuses it with its own error.
var errH1Header = errors.New("proxy: header value cannot be written")

// roundTrip sends one call on a pooled or new connection and returns the
// response once its headers arrived. Its errors read as net/http's
// (*url.Error{Op: "Post"}). The response's body returns the connection to
// the pool when read to its end and closed.
func (h *h1Client) roundTrip(ctx context.Context, t *h1Target, in *routing.Instance, call *Call, body []byte, prop propagation.TextMapPropagator, pctx context.Context) (*http.Response, error) {
	if k := in.APIKey.Reveal(); k != "" && !validHeaderValue(k) {
		return nil, errH1Header
	}
	if !validHeaderValue(call.RequestID) {
		return nil, errH1Header
	}
	now := time.Now()
	c := h.get(t.addr, now)
	if c == nil {
		var err error
		if c, err = h.connect(ctx, t.addr); err != nil {
			return nil, &url.Error{Op: "Post", URL: upstreamURL(in.BaseURL, call.Endpoint), Err: err}
		}
	}
	// Cancelling ctx closes the connection, which ends any read or write
	// on it; stop tells afterwards whether that happened.
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	bw := c.bw
	bw.WriteString("POST ")
	bw.WriteString(t.prefix)
	bw.WriteString(string(call.Endpoint))
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(t.host)
	bw.WriteString("\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\nAccept: ")
	if call.Stream {
		bw.WriteString("text/event-stream")
	} else {
		bw.WriteString("application/json")
	}
	if k := in.APIKey.Reveal(); k != "" {
		bw.WriteString("\r\nAuthorization: Bearer ")
		bw.WriteString(k)
	}
	if call.RequestID != "" {
		bw.WriteString("\r\nX-Request-Id: ")
		bw.WriteString(call.RequestID)
	}
	bw.WriteString("\r\nContent-Length: ")
	var nb [20]byte
	bw.Write(strconv.AppendInt(nb[:0], int64(len(body)), 10))
	bw.WriteString("\r\n")
	carrier := h1Carrier{bw: bw}
	prop.Inject(pctx, &carrier)
	if carrier.bad {
		stop()
		c.discard() // part of the request may have been written
		return nil, errH1Header
	}
	bw.WriteString("\r\n")
	bw.Write(body)
	fail := func(err error) (*http.Response, error) {
		stop()
		c.discard()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &url.Error{Op: "Post", URL: upstreamURL(in.BaseURL, call.Endpoint), Err: err}
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if err := c.c.SetReadDeadline(time.Now().Add(h.cfg.ResponseHeaderTimeout)); err != nil {
		return fail(err)
	}
	var resp *http.Response
	c.lim.n = maxH1HeaderBytes
	for {
		var err error
		resp, err = http.ReadResponse(c.br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				err = errors.New("net/http: timeout awaiting response headers")
			}
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 1xx: informational, the answer follows (as net/http skips it)
	}
	c.lim.n = -1
	if err := c.c.SetReadDeadline(time.Time{}); err != nil {
		resp.Body.Close()
		return fail(err)
	}
	resp.Body = &h1Body{h: h, c: c, r: resp.Body, ctx: ctx, stop: stop, keep: !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	return resp, nil
}

// h1Body is a response body on a pooled connection.
type h1Body struct {
	h    *h1Client
	c    *h1Conn
	r    io.ReadCloser
	ctx  context.Context // the call's: once it ends, reads fail even from buffered bytes
	stop func() bool
	keep bool // the response allows keep-alive
	eof  bool // the body was read to its end
	done bool // the connection was released (pooled or closed)
}

// Read reads the body; at its end the connection goes back to the pool
// when the response allows keep-alive and the exchange was not cancelled
// (the caller cancels its context after the body, as with net/http).
func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		if b.eof {
			return 0, io.EOF
		}
		return 0, errBodyClosed
	}
	if err := b.ctx.Err(); err != nil {
		// As with net/http: a cancelled call reads nothing more, though
		// the rest of the answer may sit in the connection's buffer.
		b.done = true
		b.stop()
		b.c.discard()
		return 0, err
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof, b.done = true, true
		if b.stop() && b.keep {
			b.h.put(b.c, time.Now())
		} else {
			b.c.discard()
		}
	}
	return n, err
}

var errBodyClosed = errors.New("proxy: read on a closed response body")

// Close closes the connection unless Read already released it at the
// body's end (it never reads on: a stream may not end).
func (b *h1Body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	b.stop()
	b.c.discard()
	return nil
}
