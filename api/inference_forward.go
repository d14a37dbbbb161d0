package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing/owner"
)

// Several replicas (routing/owner): a request whose cluster another live
// replica owns is forwarded there, after this replica authenticated the
// key and parsed the request, and before anything is admitted or metered
// here. The owner runs the whole journey (limits, budget, route, relay,
// meter) exactly as for a request it received itself, so a forwarded
// request is admitted and metered once, by the owner. Only when the owner
// cannot be connected to — nothing was sent, so nothing was admitted
// there — does this replica route the request itself.

// hdrReplica names the replica that made the routing decision.
const hdrReplica = "X-RouteBalance-Replica"

// Owners names the replica that schedules a cluster's requests
// ((*owner.Leases)). Lookup is called for every request this replica
// receives from a client; forward false means route here. Touch is called
// for every request forwarded here (it keeps a held lease from idling
// out). Unreachable reports a failed connection to owner. All are safe for
// concurrent use.
type Owners interface {
	Lookup(ctx context.Context, cluster string) (o owner.Replica, forward bool)
	Touch(cluster string)
	Unreachable(cluster string, o owner.Replica)
}

// ForwardConfig configures a Forwarder; zero fields take the defaults.
type ForwardConfig struct {
	// Replica is this replica's id: the sender in the headers it signs
	// and the X-RouteBalance-Replica of the decisions it makes.
	Replica string
	// DialTimeout bounds connecting to an owner (default 250 ms); past it
	// the request is routed here.
	DialTimeout time.Duration
	// LogEvery is the least time between two "owner unreachable" log lines
	// (default 10 s).
	LogEvery time.Duration
}

// Forwarder is the several-replica step of the inference path: it
// forwards requests to their cluster's owner and checks the
// X-RouteBalance-Forwarded header of requests forwarded here. Built by
// cmd, handed over in InferenceDeps.Forward; safe for concurrent use.
type Forwarder struct {
	cfg    ForwardConfig
	owners Owners
	signer *owner.Signer
	client *http.Client
	log    *slog.Logger
	now    func() time.Time

	lastLog atomic.Int64 // unix ns of the last "owner unreachable" line
	stats   struct{ forwarded, fallbacks, failed, received, refused atomic.Int64 }
}

// NewForwarder returns the forwarding step. owners nil: nothing is
// forwarded (one replica, or no Redis), forwarded headers are still
// checked. signer nil: every forwarded header is refused.
func NewForwarder(cfg ForwardConfig, owners Owners, signer *owner.Signer, log *slog.Logger) *Forwarder {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 250 * time.Millisecond
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		Proxy:               nil, // pod to pod, never through an HTTP proxy
		DialContext:         (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     60 * time.Second, // below the owner's idle timeout
		DisableCompression:  true,             // relay the owner's bytes unchanged
	}
	return &Forwarder{cfg: cfg, owners: owners, signer: signer, log: log, now: time.Now,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// ForwardStats counts what the forwarding step did since it started.
type ForwardStats struct {
	// Forwarded is requests answered by their cluster's owner.
	Forwarded int64
	// Fallbacks is requests routed here because the owner could not be
	// connected to.
	Fallbacks int64
	// Failed is forwarded requests whose owner accepted the connection but
	// gave no complete answer (answered 502 here, never run twice).
	Failed int64
	// Received is requests forwarded here with a valid header; Refused
	// those with an invalid one (403).
	Received, Refused int64
}

// Stats returns the counters.
func (f *Forwarder) Stats() ForwardStats {
	return ForwardStats{Forwarded: f.stats.forwarded.Load(), Fallbacks: f.stats.fallbacks.Load(), Failed: f.stats.failed.Load(),
		Received: f.stats.received.Load(), Refused: f.stats.refused.Load()}
}

// step runs the forwarding step of a prepared request. handled false:
// dispatch it here. handled with handedOff: a streamed answer is being
// relayed after the handler returns, and done (stop the client watch,
// cancel ctx) is called when it ends.
func (f *Forwarder) step(ctx context.Context, x *exchange, done func()) (handled, handedOff bool, err error) {
	c := x.c
	if f == nil {
		if c.Get(owner.Header) != "" {
			return true, false, sendError(c, http.StatusForbidden, typePermission, "invalid_forwarded_header", owner.Header,
				"this server does not accept forwarded requests")
		}
		return false, false, nil
	}
	if f.cfg.Replica != "" {
		c.Set(hdrReplica, f.cfg.Replica)
	}
	if h := c.Get(owner.Header); h != "" {
		// From another replica: route here, never forward again.
		if f.signer == nil {
			f.stats.refused.Add(1)
			return true, false, sendError(c, http.StatusForbidden, typePermission, "invalid_forwarded_header", owner.Header,
				"this server does not accept forwarded requests")
		}
		if _, err := f.signer.Verify(h, f.now(), c.Method(), string(c.Request().RequestURI()), c.BodyRaw()); err != nil {
			f.stats.refused.Add(1)
			return true, false, sendError(c, http.StatusForbidden, typePermission, "invalid_forwarded_header", owner.Header,
				"the "+owner.Header+" header is only for requests between replicas: "+err.Error())
		}
		f.stats.received.Add(1)
		if f.owners != nil {
			f.owners.Touch(x.cluster.ID)
		}
		return false, false, nil
	}
	if f.owners == nil || f.signer == nil {
		return false, false, nil
	}
	o, fwd := f.owners.Lookup(ctx, x.cluster.ID)
	if !fwd {
		return false, false, nil
	}
	return f.forward(ctx, x, o, done)
}

// hopHeaders are not relayed either way (RFC 9110 §7.6.1), nor the
// lengths and framing the two connections set themselves.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true,
	"Date": true, "Server": true,
}

// forward sends the request to o and relays the answer.
func (f *Forwarder) forward(ctx context.Context, x *exchange, o owner.Replica, done func()) (handled, handedOff bool, err error) {
	c := x.c
	method, uri := c.Method(), string(c.Request().RequestURI())
	body := bytes.Clone(c.BodyRaw()) // fasthttp reuses its buffer once the handler returns
	req, err := http.NewRequestWithContext(ctx, method, o.URL+uri, bytes.NewReader(body))
	if err != nil { // o.URL was validated when the lease was written
		f.unreachable(x, o, err)
		return false, false, nil
	}
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	c.Request().Header.VisitAll(func(k, v []byte) {
		if name := http.CanonicalHeaderKey(string(k)); !hopHeaders[name] && name != owner.Header {
			req.Header.Add(name, string(v))
		}
	})
	req.Header.Set(HeaderRequestID, x.id)
	// Lets net/http resend on a fresh connection when a pooled one was
	// closed before anything was written (never after: the owner might
	// have admitted it).
	req.Header.Set("X-Idempotency-Key", x.id)
	req.Header.Set(owner.Header, f.signer.Sign(f.now(), f.cfg.Replica, method, uri, body))
	res, err := f.client.Do(req)
	if err != nil {
		if dialFailed(err) && ctx.Err() == nil {
			f.unreachable(x, o, err)
			return false, false, nil // nothing reached the owner: route here
		}
		return true, false, f.failed(ctx, x, o, err)
	}
	copyHeaders := func() {
		for k, vs := range res.Header {
			if hopHeaders[k] {
				continue
			}
			c.Response().Header.Del(k)
			for _, v := range vs {
				c.Response().Header.Add(k, v)
			}
		}
		c.Status(res.StatusCode)
	}
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return true, false, f.failed(ctx, x, o, err)
		}
		copyHeaders()
		f.stats.forwarded.Add(1)
		return true, false, c.Send(b)
	}
	// A stream: relay each read as it arrives, flushed, after the handler
	// returned (fasthttp sends the headers then).
	copyHeaders()
	f.stats.forwarded.Add(1)
	endRequest := requestCancel(c)
	status := res.StatusCode
	c.Context().SetBodyStreamWriter(streamLogged(c, func(w *bufio.Writer) {
		defer func() {
			res.Body.Close()
			done()
			endRequest()
			x.endRoot(status)
		}()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := res.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return // the client left; closing the body tells the owner
				}
				if werr := w.Flush(); werr != nil {
					return
				}
			}
			if rerr != nil {
				return // io.EOF, or the owner's stream broke: the client sees it end
			}
		}
	}))
	return true, true, nil
}

// dialFailed reports a connection that was never made.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// unreachable counts a fallback, tells the owners and logs at most once
// per LogEvery.
func (f *Forwarder) unreachable(x *exchange, o owner.Replica, err error) {
	f.stats.fallbacks.Add(1)
	f.owners.Unreachable(x.cluster.ID, o)
	now := f.now().UnixNano()
	if last := f.lastLog.Load(); now-last >= int64(f.cfg.LogEvery) && f.lastLog.CompareAndSwap(last, now) {
		f.log.Warn("cluster owner unreachable; routing its requests here until it answers or its lease passes",
			slog.String("cluster", x.cluster.ID), slog.String("owner", o.ID), slog.String("owner_url", o.URL), slog.String("error", err.Error()))
	}
}

// failed answers a forward the owner accepted but did not complete: 502
// (or 504 past the deadline), never a second run here.
func (f *Forwarder) failed(ctx context.Context, x *exchange, o owner.Replica, err error) error {
	f.stats.failed.Add(1)
	if errors.Is(err, context.DeadlineExceeded) {
		return sendError(x.c, http.StatusGatewayTimeout, typeUnavailable, "timeout", "", "the request timed out")
	}
	if ctx.Err() == nil {
		f.log.Warn("forwarded request failed at its cluster's owner", slog.String("request_id", x.id), slog.String("owner", o.ID), slog.String("error", err.Error()))
	}
	return sendError(x.c, http.StatusBadGateway, typeUpstream, "owner_replica_failed", "",
		"the replica that schedules this cluster failed while serving the request; it was not retried, as it may have been served")
}
