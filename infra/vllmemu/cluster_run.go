package vllmemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing/engine"
)

// Config configures an emulated cluster.
type Config struct {
	// File is the cluster to host; required.
	File *engine.ClusterFile
	// Host is the address the instances listen on; default 127.0.0.1.
	// Listening on all interfaces must be asked for explicitly ("0.0.0.0").
	Host string
	// BasePort is the port of instance 0; instance k listens on BasePort+k.
	// 0 lets the OS choose a free port for every instance (tests, demo).
	BasePort int
	// TimeScale is wall seconds per world second (0.1 = ten times faster);
	// 0 means 1.
	TimeScale float64
	// Seed selects the world.
	Seed uint64
	// ZeroLatency answers without modelled delays.
	ZeroLatency bool
	// Tasks maps prompts to tasks; nil means "default" for every prompt.
	Tasks TaskLookup
	// Faults are initial faults by instance index.
	Faults map[int]Fault
	// Judges make instances (by index) judge-kind instances (judge.go).
	Judges map[int]*Judge
	// Log receives lifecycle messages; nil discards.
	Log *slog.Logger
}

// DefaultHost is where the emulator listens unless told otherwise.
const DefaultHost = "127.0.0.1"

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.File == nil {
		return errors.New("emulator: no cluster file")
	}
	if err := c.File.Validate(); err != nil {
		return err
	}
	if c.BasePort < 0 || c.BasePort+len(c.File.Instances())-1 > 65535 {
		return fmt.Errorf("emulator: base port %d does not leave room for %d instances", c.BasePort, len(c.File.Instances()))
	}
	if math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) || c.TimeScale < 0 {
		return fmt.Errorf("emulator: time scale must be > 0, got %v", c.TimeScale)
	}
	n := len(c.File.Instances())
	for k, f := range c.Faults {
		if k < 0 || k >= n {
			return fmt.Errorf("emulator: fault for instance %d, but the cluster has %d", k, n)
		}
		if err := f.Validate(); err != nil {
			return fmt.Errorf("emulator: instance %d fault: %w", k, err)
		}
	}
	for k, j := range c.Judges {
		if k < 0 || k >= n {
			return fmt.Errorf("emulator: judge at instance %d, but the cluster has %d", k, n)
		}
		if err := j.Validate(); err != nil {
			return fmt.Errorf("emulator: instance %d: %w", k, err)
		}
	}
	return nil
}

// Cluster is a running emulated cluster.
type Cluster struct {
	// Instances are the running instances in file order.
	Instances []*Instance
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Instance is one running emulated instance.
type Instance struct {
	*Server
	// URL is the base URL, e.g. "http://127.0.0.1:8000" (append /v1 for
	// an OpenAI client).
	URL  string
	Addr net.Addr
	http *http.Server
}

// StartCluster listens on every instance's port and starts the instances.
// They stop when ctx ends or Close is called; Close waits for them.
func StartCluster(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.File != nil {
		cfg.File.ApplyDefaults()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host := cfg.Host
	if host == "" {
		host = DefaultHost
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Cluster{cancel: cancel}
	var lns []net.Listener
	vocab := NewVocab() // one tokenizer table, so any instance detokenizes what another tokenized
	fail := func(err error) (*Cluster, error) {
		cancel()
		for _, ln := range lns {
			_ = ln.Close()
		}
		return nil, err
	}
	for _, spec := range cfg.File.Instances() {
		srv, err := NewServer(ServerConfig{Spec: spec, Lengths: cfg.File.OutputLengths, Seed: cfg.Seed, TimeScale: cfg.TimeScale,
			ZeroLatency: cfg.ZeroLatency, Tasks: cfg.Tasks, Fault: cfg.Faults[spec.Index], Judge: cfg.Judges[spec.Index], Log: log, Vocab: vocab})
		if err != nil {
			return fail(err)
		}
		port := 0
		if cfg.BasePort > 0 {
			port = cfg.BasePort + spec.Index
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fail(fmt.Errorf("instance %d (%s): %w", spec.Index, spec.ID, err))
		}
		lns = append(lns, ln)
		c.Instances = append(c.Instances, &Instance{Server: srv, URL: "http://" + ln.Addr().String(), Addr: ln.Addr(),
			http: &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}})
	}
	for i, in := range c.Instances {
		ln := lns[i]
		c.wg.Add(3)
		go func() { // the engine driver
			defer c.wg.Done()
			_ = in.Run(ctx)
		}()
		go func() { // the HTTP server
			defer c.wg.Done()
			if err := in.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("emulated instance stopped", slog.String("instance", in.Spec().ID), slog.Any("err", err))
			}
		}()
		go func() { // shutdown on ctx end
			defer c.wg.Done()
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer scancel()
			if err := in.http.Shutdown(sctx); err != nil {
				_ = in.http.Close()
			}
		}()
	}
	log.Info("emulated cluster started", slog.String("cluster", cfg.File.Name), slog.Int("instances", len(c.Instances)))
	return c, nil
}

// Close stops every instance and waits until they have stopped.
func (c *Cluster) Close() error {
	c.closeOnce.Do(c.cancel)
	c.wg.Wait()
	return nil
}

// Wait blocks until the cluster has stopped (its ctx ended or Close).
func (c *Cluster) Wait() { c.wg.Wait() }
