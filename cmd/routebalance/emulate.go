package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/routebalance/routebalance/infra/clusters"
	"github.com/routebalance/routebalance/infra/vllmemu"
	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/routing/engine"
)

// faultFlags collects repeated --fault flags: "K:key=value,key=value".
type faultFlags map[int]vllmemu.Fault

func (f faultFlags) String() string { return "" }

func (f faultFlags) Set(s string) error {
	ks, spec, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("want K:key=value,... (e.g. 3:error_rate=0.2,error_status=500), got %q", s)
	}
	k, err := strconv.Atoi(ks)
	if err != nil || k < 0 {
		return fmt.Errorf("instance index %q is not a number >= 0", ks)
	}
	ft := f[k]
	for _, kv := range strings.Split(spec, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("want key=value, got %q", kv)
		}
		switch key {
		case "error_rate":
			ft.ErrorRate, err = strconv.ParseFloat(val, 64)
		case "error_status":
			ft.ErrorStatus, err = strconv.Atoi(val)
		case "stall_ms":
			ft.StallMs, err = strconv.ParseFloat(val, 64)
		case "dead":
			ft.Dead, err = strconv.ParseBool(val)
		default:
			return fmt.Errorf("unknown fault %q (want error_rate, error_status, stall_ms, dead)", key)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := ft.Validate(); err != nil {
		return err
	}
	f[k] = ft
	return nil
}

// runEmulate hosts every instance of a cluster file on its own port until
// ctx ends (Ctrl-C).
func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("emulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clusterPath := fs.String("cluster", "", "cluster file (JSON); empty = the project's calibrated reference-13 cluster (infra/clusters)")
	host := fs.String("host", vllmemu.DefaultHost, "listen address (0.0.0.0 listens on all interfaces)")
	basePort := fs.Int("base-port", 8000, "port of instance 0; instance k listens on base-port+k (0 = OS-chosen ports)")
	scale := fs.Float64("time-scale", 1, "wall seconds per emulated second (0.1 = ten times faster)")
	seed := fs.Uint64("seed", 0, "world seed (output lengths, injected-error draws)")
	zero := fs.Bool("zero-latency", false, "answer without modelled delays (gateway-overhead benchmarks)")
	data := fs.String("data", "", "JSON lines with prompt and task fields: the task of known prompts (the demo set's prompts are always known; others are \"default\")")
	faults := faultFlags{}
	fs.Var(faults, "fault", "initial fault of an instance, K:error_rate=R,error_status=S,stall_ms=M,dead=true (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: routebalance emulate [--cluster FILE] [--host 127.0.0.1] [--base-port N] [--time-scale X] [--seed S] [--zero-latency] [--data FILE.jsonl] [--fault K:...]")
		fmt.Fprintln(stderr, "\nAt run time: POST {URL}/admin/fault {\"error_rate\":0.2,\"error_status\":503,\"stall_ms\":500,\"dead\":true}")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	var file *engine.ClusterFile
	if *clusterPath == "" {
		var err error
		if file, err = engine.ParseCluster(clusters.Reference13()); err != nil {
			return err
		}
	} else {
		var err error
		if file, err = engine.LoadCluster(*clusterPath); err != nil {
			return err
		}
	}
	cfg := vllmemu.Config{File: file, Host: *host, BasePort: *basePort, TimeScale: *scale, Seed: *seed,
		ZeroLatency: *zero, Faults: faults, Log: slog.New(slog.NewTextHandler(stderr, nil))}
	tasks, err := taskTable(*data)
	if err != nil {
		return err
	}
	cfg.Tasks = tasks
	c, err := vllmemu.StartCluster(ctx, cfg)
	if err != nil {
		return err
	}
	printInstances(stdout, c)
	fmt.Fprintln(stdout, "\nCtrl-C stops the cluster.")
	c.Wait()
	return nil
}

// taskTable is the demo set's prompt → task table plus, when path is not
// empty, the file's.
func taskTable(path string) (vllmemu.TaskTable, error) {
	t, err := vllmemu.ReadTaskTable(bytes.NewReader(demoset.JSONL()))
	if err != nil {
		return nil, err
	}
	if path == "" {
		return t, nil
	}
	more, err := vllmemu.LoadTaskTable(path)
	if err != nil {
		return nil, err
	}
	maps.Copy(t, more)
	return t, nil
}

func printInstances(w io.Writer, c *vllmemu.Cluster) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "K\tURL\tMODEL\tGPU\tTP\tINSTANCE")
	for _, in := range c.Instances {
		sp := in.Spec()
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", sp.Index, in.URL, sp.Tier.Model, sp.Tier.GPU, sp.Tier.TensorParallel, sp.ID)
	}
	_ = tw.Flush()
}
