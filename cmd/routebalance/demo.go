package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/routebalance/routebalance/infra/clusters"
	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/routing/engine"
)

// demoConfig is what `routebalance demo` reads from its flags.
type demoConfig struct {
	addr      string
	dataDir   string
	indexDir  string
	timeScale float64
	seed      uint64
}

// runDemo starts the emulated reference cluster, the service on embedded
// SQLite, seeds a demo tenant with the cluster, its instances and an API
// key, and prints how to call it. It runs until ctx ends (Ctrl-C).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "service listen address")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory (SQLite, secrets, index, log); empty = a temporary directory removed at exit")
	fs.StringVar(&c.indexDir, "index", "", "quality/length index built with `routebalance index build`; empty = build one from the embedded synthetic demo set")
	fs.Float64Var(&c.timeScale, "time-scale", 0.5, "wall seconds per emulated second of the cluster (0.5: a typical answer takes about a second)")
	fs.Uint64Var(&c.seed, "seed", 1, "emulated world seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "demo: unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	if c.dataDir == "" {
		dir, err := os.MkdirTemp("", "routebalance-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.dataDir = dir
	} else if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(c.dataDir, "demo.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewJSONHandler(logFile, nil))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// 1. The emulated cluster (the project's calibrated reference-13 world),
	// on OS-chosen loopback ports.
	file, err := engine.ParseCluster(clusters.Reference13())
	if err != nil {
		return err
	}
	tasks, err := taskTable("")
	if err != nil {
		return err
	}
	cluster, err := vllmemu.StartCluster(ctx, vllmemu.Config{File: file, TimeScale: c.timeScale, Seed: c.seed, Tasks: tasks, Log: log})
	if err != nil {
		return fmt.Errorf("emulated cluster: %w", err)
	}
	defer cluster.Close()

	// 2. The index.
	index, err := demoIndex(ctx, c, stderr)
	if err != nil {
		return err
	}

	// 3. The service, exactly as `routebalance serve` runs it.
	base, served, err := startDemoService(ctx, c, index, logFile)
	if err != nil {
		return err
	}

	// 4. The demo tenant, through the management API.
	seed, err := seedDemo(ctx, base, cluster)
	if err != nil {
		cancel()
		<-served
		return fmt.Errorf("seed demo tenant: %w", err)
	}
	printDemo(stdout, base, c.dataDir, cluster, seed)

	select {
	case <-ctx.Done():
	case err := <-served:
		if err != nil {
			return fmt.Errorf("service stopped: %w", err)
		}
	}
	fmt.Fprintln(stdout, "\nstopping…")
	cancel()
	err = <-served
	cluster.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// startDemoService runs serve on c.addr and returns its base URL once it
// is ready. serve binds the address itself and the URL is read from its
// "routebalance listening on" line: with port 0 the kernel's port is
// the one served (a port picked here and released for serve to bind could
// be taken by another process meanwhile).
func startDemoService(ctx context.Context, c demoConfig, index []string, logFile io.Writer) (string, <-chan error, error) {
	// Metrics on a free loopback port (logged), so two demos do not clash.
	serveArgs := append([]string{"--addr", c.addr, "--data-dir", c.dataDir, "--allow-private-endpoints", "--database-url", "", "--metrics-addr", "127.0.0.1:0"}, index...)
	served := make(chan error, 1)
	up := &lineCatcher{line: make(chan string, 1)}
	go func() { served <- runServe(ctx, serveArgs, up, logFile) }()
	var base string
	select {
	case l := <-up.line:
		base = strings.TrimPrefix(l, "routebalance listening on ")
	case err := <-served:
		return "", nil, fmt.Errorf("service did not start on %s: %v (pick another --addr if it is taken; see demo.log in the data dir)", c.addr, err)
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	if err := waitReady(ctx, base, served); err != nil {
		return "", nil, err
	}
	return base, served, nil
}

// lineCatcher is the io.Writer of serve's stdout: it hands the first line
// (without its newline) to line and drops everything.
type lineCatcher struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	line chan string
}

func (w *lineCatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.sent = true
			w.line <- strings.TrimSpace(string(w.buf[:i]))
			w.buf = nil
		}
	}
	return len(p), nil
}

// waitReady polls /readyz until the service answers 200.
func waitReady(ctx context.Context, base string, served <-chan error) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-served:
			return fmt.Errorf("service did not start: %v (see demo.log in the data dir)", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("service not ready after 60 s (see demo.log in the data dir)")
		}
	}
}

// demoSeed is what seeding created.
type demoSeed struct {
	email, password, clusterID, key string
}

// seedDemo signs up the demo tenant and registers the cluster, its
// instances and an API key.
func seedDemo(ctx context.Context, base string, cluster *vllmemu.Cluster) (demoSeed, error) {
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	s := demoSeed{email: "demo@routebalance.example", password: hex.EncodeToString(pw)}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := call(ctx, base+"/api/v1/signup", "", map[string]any{"email": s.email, "password": s.password, "name": "Demo"}, &tok); err != nil {
		return s, err
	}
	var cl struct {
		ID string `json:"id"`
	}
	if err := call(ctx, base+"/api/v1/clusters", tok.AccessToken, map[string]any{"name": "reference-13 (emulated)"}, &cl); err != nil {
		return s, err
	}
	s.clusterID = cl.ID
	for _, in := range cluster.Instances {
		t := in.Spec().Tier
		body := map[string]any{"base_url": in.URL, "model": t.Model, "gpu": t.GPU, "tensor_parallel": t.TensorParallel,
			"price_in_per_mtok": t.PriceInPerMTok, "price_out_per_mtok": t.PriceOutPerMTok, "max_concurrency": t.MaxNumSeqs}
		if err := call(ctx, base+"/api/v1/clusters/"+cl.ID+"/instances", tok.AccessToken, body, nil); err != nil {
			return s, fmt.Errorf("instance %s: %w", in.Spec().ID, err)
		}
	}
	var key struct {
		Secret string `json:"key"`
	}
	if err := call(ctx, base+"/api/v1/keys", tok.AccessToken, map[string]any{"name": "demo", "cluster_id": cl.ID}, &key); err != nil {
		return s, err
	}
	s.key = key.Secret
	return s, nil
}

// call POSTs a JSON body and decodes a 2xx answer into out (may be nil).
func call(ctx context.Context, url, token string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(rb))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rb, out)
}

func printDemo(w io.Writer, base, dataDir string, cluster *vllmemu.Cluster, s demoSeed) {
	fmt.Fprintf(w, "RouteBalance demo is running.\n\nEmulated cluster (calibrated reference-13, %d instances):\n", len(cluster.Instances))
	printInstances(w, cluster)
	fmt.Fprintf(w, "\nDashboard:  %s/\n  log in as %s / %s\n", base, s.email, s.password)
	fmt.Fprintf(w, "API key:    %s\nData dir:   %s (service log: demo.log)\n\n", s.key, dataDir)
	fmt.Fprintf(w, "Try it:\n\ncurl -N %s/v1/chat/completions \\\n  -H 'Authorization: Bearer %s' \\\n  -H 'Content-Type: application/json' \\\n  -d '{\"model\":\"auto\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"A train travels 120 km in 2 hours. How far does it travel in 5 hours?\"}]}'\n\n", base, s.key)
	fmt.Fprintln(w, "Ctrl-C stops everything.")
}

// demoIndex returns the serve flags that load the quality/length index:
// the user's --index, or one built now from the embedded synthetic demo
// set into <data-dir>/index.
func demoIndex(ctx context.Context, c demoConfig, stderr io.Writer) ([]string, error) {
	dir := c.indexDir
	if dir == "" {
		data := filepath.Join(c.dataDir, "demo.jsonl")
		if err := os.WriteFile(data, demoset.JSONL(), 0o600); err != nil {
			return nil, err
		}
		dir = filepath.Join(c.dataDir, "index")
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		if err := runIndex(ctx, []string{"build", "--data", data, "--out", dir, "--quiet"}, io.Discard, stderr); err != nil {
			return nil, fmt.Errorf("build the demo index: %w", err)
		}
	}
	return []string{"--index-dir", dir}, nil
}
