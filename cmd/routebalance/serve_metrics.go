package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
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

// serveMetrics serves h at /metrics on its own listener (--metrics-addr)
// until the returned stop is called; stop waits for the server goroutine.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
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
