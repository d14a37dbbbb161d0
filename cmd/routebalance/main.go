// Command routebalance is the RouteBalance binary: the routing service and
// every tool around it (emulator, simulator, benchmarks, index builder).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name; it returns flag.ErrHelp after printing usage for -h.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the subcommand table. Each entry lives in its own file.
func commands() map[string]command {
	return map[string]command{
		"serve":       {"run the routing service", runServe},
		"migrate":     {"apply database migrations and exit", runMigrate},
		"reseal":      {"re-encrypt upstream credentials with the current key (key rotation)", runReseal},
		"healthcheck": {"probe a running server's /healthz (container HEALTHCHECK)", runHealthcheck},
		"demo":        {"start an emulated cluster, the service and a demo tenant", runDemo},
		"emulate":     {"host emulated vLLM instances from a cluster file", runEmulate},
		"simulate":    {"discrete-event simulation of policies over a cluster", runSimulate},
		"bench":       {"live load generator against an OpenAI-compatible endpoint", runBench},
		"index":       {"build a quality/length index from labelled prompts", runIndex},
		"estimate":    {"predict quality and length for prompts with an index", runEstimate},
		"profile":     {"QPS sweep against one instance to train a latency model", runProfile},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "routebalance: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "routebalance %s: %v\n", args[0], err)
		return 1
	}
}

// errUsage is returned by a command after it printed a usage error.
var errUsage = errors.New("usage")

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: routebalance <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'routebalance <command> -h' for a command's flags")
}
