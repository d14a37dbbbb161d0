package api

import (
	"context"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func TestWatchClient(t *testing.T) {
	t.Run("departure cancels", func(t *testing.T) {
		server, client := tcpPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		stop := watchClient(server, time.Millisecond, cancel)
		defer stop()
		client.Close()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not notice the departed client")
		}
	})
	t.Run("stopped before the first check", func(t *testing.T) {
		server, _ := tcpPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		stop := watchClient(server, time.Hour, cancel)
		stop()
		stop() // idempotent
		if ctx.Err() != nil {
			t.Fatal("a live client's request was cancelled")
		}
	})
	t.Run("stopped while polling", func(t *testing.T) {
		server, _ := tcpPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		stop := watchClient(server, time.Microsecond, cancel)
		time.Sleep(5 * time.Millisecond) // let the poller run a few checks
		stop()
		if ctx.Err() != nil {
			t.Fatal("a live client's request was cancelled")
		}
	})
}
