package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/api"
	"github.com/routebalance/routebalance/routing/owner"
	"github.com/routebalance/routebalance/telemetry"
)

// servePprof serves net/http/pprof's /debug/pprof/ handlers on their own
// listener (--pprof-addr) until the returned stop is called.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serveMux(addr, "--pprof-addr", "pprof", mux, log)
}

// defaultMetricsAddr is where /metrics listens unless told otherwise:
// loopback only, so the default exposes nothing to the network. In a pod,
// set --metrics-addr 0.0.0.0:9091 (the Helm chart does) and keep the port
// off the ingress.
const defaultMetricsAddr = "127.0.0.1:9091"

// metricsLabelKey derives the key of the metrics label pseudonyms from the
// session secret (HMAC-SHA256 under a fixed context string), so it needs
// no secret of its own and differs from the signing key.
func metricsLabelKey(sessionSecret []byte) []byte {
	mac := hmac.New(sha256.New, sessionSecret)
	mac.Write([]byte("routebalance metrics label pseudonyms v1"))
	return mac.Sum(nil)
}

// serveMetrics serves h at /metrics on its own listener (--metrics-addr)
// until the returned stop is called; stop waits for the server goroutine.
// A non-empty token is required as a bearer token.
func serveMetrics(addr string, h http.Handler, token string, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	if token != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
				http.Error(w, "/metrics needs Authorization: Bearer <metrics token>", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /metrics", h)
	return serveMux(addr, "--metrics-addr", "metrics", mux, log)
}

// serveMux serves mux on its own listener at addr until the returned stop
// is called; stop waits for the server goroutine. flagName and what name
// the listener in errors and logs.
func serveMux(addr, flagName, what string, mux *http.ServeMux, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" server stopped", slog.String("error", err.Error()))
		}
	}()
	log.Info(what+" listening", slog.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// replicaStats reads the forwarding step's and the owner leases' counters
// for telemetry.Deps.Replicas; both are set once serve has built them
// (before that, and for leases without Redis, their series are zero or
// absent).
func replicaStats(fwd *atomic.Pointer[api.Forwarder], leases *atomic.Pointer[owner.Leases]) func() telemetry.ReplicaStats {
	return func() telemetry.ReplicaStats {
		var s telemetry.ReplicaStats
		if f := fwd.Load(); f != nil {
			st := f.Stats()
			s.Forwarded, s.OwnerUnreachable, s.ForwardFailed, s.ForwardReceived, s.ForwardRefused = st.Forwarded, st.Fallbacks, st.Failed, st.Received, st.Refused
		}
		if l := leases.Load(); l != nil {
			st := l.Stats()
			s.Leases, s.LeasesHeld, s.LeasesLost, s.LeaseRedisErrors = true, st.Held, st.Lost, st.RedisErrors
		}
		return s
	}
}
