package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/routebalance/routebalance/infra/clusters"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/engine"
)

func TestFaultFlags(t *testing.T) {
	f := faultFlags{}
	for _, s := range []string{"3:error_rate=0.2,error_status=500", "3:stall_ms=100", "0:dead=true"} {
		if err := f.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	want := faultFlags{3: {ErrorRate: 0.2, ErrorStatus: 500, StallMs: 100}, 0: {Dead: true}}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"x:dead=true", "1", "1:error_rate=2", "1:colour=red", "1:error_status=404"} {
		if err := (faultFlags{}).Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunEmulate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runEmulate(ctx, []string{"--base-port", "0", "--time-scale", "0.01", "--fault", "12:dead=true"}, &out, &errOut)
	}()
	deadline := time.Now().Add(testwait.Bound)
	for !strings.Contains(out.String(), "Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("no instance table; stderr: %s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 14 || !strings.HasPrefix(lines[0], "K ") {
		t.Fatalf("table = %q", out.String())
	}
	world, err := engine.ParseCluster(clusters.Reference13())
	if err != nil {
		t.Fatal(err)
	}
	ref := world.Instances()
	for k, spec := range ref {
		f := strings.Fields(lines[k+1])
		if len(f) < 4 || f[2] != spec.Tier.Model || f[3] != spec.Tier.GPU {
			t.Fatalf("row %d = %q, want %s on %s", k, lines[k+1], spec.Tier.Model, spec.Tier.GPU)
		}
		resp, err := http.Get(f[1] + "/health")
		if k == 12 {
			if err == nil {
				resp.Body.Close()
				t.Errorf("instance 12 started dead but answered %d", resp.StatusCode)
			}
			continue
		}
		if err != nil {
			t.Fatalf("instance %d health: %v", k, err)
		}
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runEmulate after cancel: %v", err)
	}
}
