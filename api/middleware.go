package api

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Locals keys.
const (
	localRequestID = "rb.request_id"
	localTenantID  = "rb.tenant_id"
	localSession   = "rb.session"
	localCancel    = "rb.cancel"
	localErrLogged = "rb.err"
	localTraceID   = "rb.trace_id"
	localStreamLog = "rb.stream_log"
	// localStreamBytes holds the body bytes of a stream written straight
	// to the connection (streamDirect), for the access log.
	localStreamBytes = "rb.stream_bytes"
)

// HeaderRequestID carries the request id in both directions.
const HeaderRequestID = "X-Request-Id"

// saneRequestID accepts a client's id of 1–128 characters from
// [A-Za-z0-9._:-], so it can be logged and echoed safely.
func saneRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-' || b == ':') {
			return false
		}
	}
	return true
}

// newRequestID makes a request id: 28 hex digits, the Unix time in
// milliseconds (12) and then 64 random bits (16).
func newRequestID() string { return requestIDAt(time.Now()) }

// requestIDAt is newRequestID at time t. Ids of later milliseconds sort
// after earlier ones, so the usage ledger's primary key (request_id)
// grows at its end instead of at a random leaf per request: with random
// ids every row of a batch dirtied its own index page, and the SQLite
// insert cost ~25 % more CPU per event (BenchmarkInsert in
// billing/sqlitestore, TIMEID=1 against random ids). Uniqueness rests
// on the random part: two requests of the same millisecond collide with
// probability 2⁻⁶⁴. The random bits come from math/rand/v2's generator
// (ChaCha8, seeded from the OS per process): an id names a request, it
// guards nothing, and crypto/rand's reader cost ~2 % of the gateway's CPU.
func requestIDAt(t time.Time) string {
	var b [14]byte
	ms := uint64(max(t.UnixMilli(), 0))
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	binary.BigEndian.PutUint64(b[6:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// randomSuffix is 8 random hex digits (the suffix that makes a client's
// X-Request-Id unique).
func randomSuffix() string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], rand.Uint32())
	return hex.EncodeToString(b[:])
}

// requestID takes a sane incoming X-Request-Id or makes one, stores it and
// echoes it in the response.
func (s *Server) requestID(c *fiber.Ctx) error {
	id := c.Get(HeaderRequestID)
	if !saneRequestID(id) {
		id = newRequestID()
	}
	c.Locals(localRequestID, id)
	c.Set(HeaderRequestID, id)
	return c.Next()
}

// requestIDOf returns the request's id (the api's id for routing.Request).
func requestIDOf(c *fiber.Ctx) string {
	id, _ := c.Locals(localRequestID).(string)
	return id
}

// accessLog writes one JSON line per request after it is answered. Errors
// returned by handlers are turned into responses here, so the logged status
// is the one the client got.
//
// A streamed response (written by a body stream writer after the handler
// has returned) is logged when the stream ends, with its real duration
// and the bytes sent: the handler wraps its writer with streamLogged. A
// stream written without it is logged at once, without bytes_out.
func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	c.Locals(localStreamLog, accessLogOn{})
	err := c.Next()
	if err != nil {
		if werr := s.errorHandler(c, err); werr != nil {
			s.log.Error("write error response", slog.Any("err", werr))
		}
	}
	if sl, ok := c.Locals(localStreamLog).(*streamLog); ok {
		defer close(sl.ready)
		if c.Response().IsBodyStream() {
			s.logRequest(c, start, sl)
			return nil
		}
	}
	s.logRequest(c, start, nil)
	return nil
}

// logRequest writes the access line of the answered request c that
// started at start. Nothing allocates: the attributes sit in an array on
// this stack and point at the request's own buffers, the client address
// comes from s.ips, and with Deps.AccessLog the line is encoded into a
// pooled buffer (through slog, without it, slog allocates twice per line:
// its Record spills attributes past five into a slice and its JSON handler
// encodes the float through encoding/json). Nothing is built when the
// level is off.
// With sl (a stream wrapped by streamLogged) the line is handed to sl, to
// be written when the stream ends.
func (s *Server) logRequest(c *fiber.Ctx, start time.Time, sl *streamLog) {
	status := c.Response().StatusCode()
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	ctx := c.UserContext()
	if !s.log.Enabled(ctx, level) {
		return
	}
	var buf [12]slog.Attr
	attrs := append(buf[:0],
		slog.String("request_id", requestIDOf(c)),
		slog.String("method", c.Method()),
		slog.String("path", c.Path()),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.Int("bytes_in", len(c.Request().Body())),
		slog.String("ip", s.clientIP(c)),
	)
	if n, ok := c.Locals(localStreamBytes).(int64); ok {
		attrs = append(attrs, slog.Int64("bytes_out", n), slog.Bool("stream", true))
	} else if !c.Response().IsBodyStream() {
		attrs = append(attrs, slog.Int("bytes_out", len(c.Response().Body())))
	}
	if tid, ok := c.Locals(localTraceID).(string); ok {
		attrs = append(attrs, slog.String("trace_id", tid))
	}
	if tid, ok := c.Locals(localTenantID).(string); ok {
		attrs = append(attrs, slog.String("tenant_id", tid))
	}
	if level == slog.LevelError {
		if e, ok := c.Locals(localErrLogged).(string); ok {
			attrs = append(attrs, slog.String("err", e))
		}
	}
	if sl != nil {
		sl.s, sl.start, sl.level = s, start, level
		sl.attrs = append(make([]slog.Attr, 0, len(attrs)+2), attrs...)
		sl.deferred = true
		return
	}
	s.writeAccessLine(ctx, level, attrs)
}

// writeAccessLine writes the access line: straight to Deps.AccessLog when
// it is set (the same bytes slog's JSON handler writes, no allocation),
// else through the logger.
func (s *Server) writeAccessLine(ctx context.Context, level slog.Level, attrs []slog.Attr) {
	if s.access != nil && s.access.write(time.Now(), level, "http request", attrs) {
		return
	}
	s.log.LogAttrs(ctx, level, "http request", attrs...)
}

// clientIP is c.IP() without formatting the address on every request.
func (s *Server) clientIP(c *fiber.Ctx) string {
	if s.ipFromHeader {
		return c.IP()
	}
	return s.ips.String(c.Context().RemoteIP())
}

// ipStrings interns the text form of client addresses, so the access log
// does not format (and allocate) the same address on every request. It
// holds at most max addresses and starts over when full; safe for
// concurrent use.
type ipStrings struct {
	max int
	mu  sync.RWMutex
	m   map[[16]byte]string
}

// String returns ip's text form as net.IP.String writes it.
func (p *ipStrings) String(ip net.IP) string {
	ip16 := ip.To16()
	if ip16 == nil {
		return ip.String()
	}
	k := [16]byte(ip16)
	p.mu.RLock()
	v, ok := p.m[k]
	p.mu.RUnlock()
	if ok {
		return v
	}
	v = ip.String()
	p.mu.Lock()
	if p.m == nil || len(p.m) >= p.max {
		p.m = make(map[[16]byte]string, 64)
	}
	p.m[k] = v
	p.mu.Unlock()
	return v
}

// recoverPanic turns a panic in a handler into a logged 500 in the
// envelope.
func (s *Server) recoverPanic(c *fiber.Ctx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler",
				slog.String("request_id", requestIDOf(c)),
				slog.String("panic", fmt.Sprint(r)),
				slog.String("stack", string(debug.Stack())))
			err = errPanic
		}
	}()
	return c.Next()
}

// userContext gives the request a context with the configured deadline,
// cancelled when the handler returns, unless the handler took the cancel
// over with requestCancel (streaming responses, which run after the
// handler has returned).
func (s *Server) userContext(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.RequestTimeout)
	r := &liveRequest{cancel: cancel, running: &s.running}
	s.running.Add(1)
	taken := false
	c.Locals(localCancel, func() context.CancelFunc { taken = true; return r.end })
	c.SetUserContext(ctx)
	err := c.Next()
	if !taken {
		r.end()
	}
	return err
}

// liveRequest is one request's context cancel, counted in the server's
// running requests until its first end.
type liveRequest struct {
	cancel  context.CancelFunc
	running *atomic.Int64
	ended   atomic.Bool
}

func (r *liveRequest) end() {
	if r.ended.CompareAndSwap(false, true) {
		r.cancel()
		r.running.Add(-1)
	}
}

// requestCancel hands the request context's cancel function to the caller,
// who must call it when the response is complete (e.g. at the end of a
// SetBodyStreamWriter callback). Without this call the context is cancelled
// as soon as the handler returns.
func requestCancel(c *fiber.Ctx) context.CancelFunc {
	if take, ok := c.Locals(localCancel).(func() context.CancelFunc); ok {
		return take()
	}
	return func() {}
}

// requestContext returns the request's context and a function that
// cancels it: the request-timeout context of userContext with its own
// cancel, taken over (so the handler makes no second context per
// request, and must call cancel itself, as requestCancel's callers do),
// or, where no userContext ran, a new cancellable child.
func requestContext(c *fiber.Ctx) (context.Context, context.CancelFunc) {
	if take, ok := c.Locals(localCancel).(func() context.CancelFunc); ok {
		return c.UserContext(), take()
	}
	return context.WithCancel(c.UserContext())
}

// accessLogOn marks (in Locals) a request the access log will write a line
// for, so streamLogged may take the line over.
type accessLogOn struct{}

// streamLog is the access-log line of one streamed response: accessLog
// fills it when the handler returns (then closes ready); the stream writer
// wrapped by streamLogged writes it when the stream ends. Only streams
// allocate one.
type streamLog struct {
	ready    chan struct{}
	deferred bool // set before ready is closed: there is a line to write
	s        *Server
	start    time.Time
	level    slog.Level
	attrs    []slog.Attr
}

// streamLogged wraps a response body stream writer so that the request's
// access-log line is written when the stream ends (the last byte is sent,
// or the relay stopped because the client left), with the stream's
// duration and the bytes written, instead of when the handler returns.
// Bytes reach the connection exactly when sw flushes, as before. Outside
// the access log (no accessLog in the chain) it returns sw unchanged.
func streamLogged(c *fiber.Ctx, sw fasthttp.StreamWriter) fasthttp.StreamWriter {
	if _, ok := c.Locals(localStreamLog).(accessLogOn); !ok {
		return sw
	}
	sl := &streamLog{ready: make(chan struct{})}
	c.Locals(localStreamLog, sl)
	return func(w *bufio.Writer) {
		cw := &countingFlusher{w: w}
		bw, _ := streamLogWriters.Get().(*bufio.Writer)
		if bw == nil || bw.Size() != w.Size() {
			bw = bufio.NewWriterSize(cw, w.Size())
		} else {
			bw.Reset(cw)
		}
		defer func() {
			bw.Flush() //nolint:errcheck // a departed client: nothing to do
			bw.Reset(nil)
			streamLogWriters.Put(bw) // sw has returned: nothing writes to bw any more
			// fasthttp runs sw on its own goroutine as soon as it is set:
			// wait until the handler returned and accessLog filled sl.
			<-sl.ready
			if !sl.deferred {
				return
			}
			attrs := append(sl.attrs, slog.Int64("bytes_out", cw.n), slog.Bool("stream", true))
			for i := range attrs {
				if attrs[i].Key == "duration_ms" {
					attrs[i] = slog.Float64("duration_ms", float64(time.Since(sl.start).Microseconds())/1000)
				}
			}
			sl.s.writeAccessLine(context.Background(), sl.level, attrs)
		}()
		sw(bw)
	}
}

// streamLogWriters holds streamLogged's buffered writers between streams.
var streamLogWriters sync.Pool

// countingFlusher passes every write through to w and flushes it, so the
// stream writer's own Flush still pushes bytes to the client; it counts
// what was sent.
type countingFlusher struct {
	w *bufio.Writer
	n int64
}

func (f *countingFlusher) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.w.Flush()
	}
	if err != nil {
		return n, err
	}
	f.n += int64(n)
	return n, nil
}
