// Command testsummary is scripts/test.sh's reporter (package
// internal/testsummary does the work).
//
//	go test -json ./... | tee go.jsonl | testsummary print
//	testsummary report -trim "$(go list -m)/" -go 'go ./...=go.jsonl' \
//	    -go 'infra/helm=helm.jsonl' -tap 'web/e2e=e2e.tap' -skip 'web/e2e=needs node: not installed' \
//	    -fail 'go vet=failed'
//
// print turns go test -json on stdin back into go test's quiet output.
// report prints each skip and failure, then the one summary line, and
// exits 1 when anything failed, nothing ran, or — with CI set (or -ci) — a
// test was skipped for a missing tool.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/routebalance/routebalance/internal/testenv"
	"github.com/routebalance/routebalance/internal/testsummary"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// pairs collects repeated NAME=VALUE flags.
type pairs [][2]string

func (p *pairs) String() string { return fmt.Sprint(*p) }

func (p *pairs) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE")
	}
	*p = append(*p, [2]string{name, val})
	return nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: testsummary print|report [flags]")
		return 2
	}
	switch args[0] {
	case "print":
		fs := flag.NewFlagSet("print", flag.ContinueOnError)
		fs.SetOutput(stderr)
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if _, err := testsummary.ReadGo(stdin, testsummary.GoOptions{Echo: stdout}); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case "report":
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		fs.SetOutput(stderr)
		var goFiles, tapFiles, skips, fails pairs
		fs.Var(&goFiles, "go", "NAME=FILE: a go test -json stream (repeatable)")
		fs.Var(&tapFiles, "tap", "NAME=FILE: node TAP output (repeatable)")
		fs.Var(&skips, "skip", "NAME=REASON: a runner that did not run at all (repeatable)")
		fs.Var(&fails, "fail", "NAME=REASON: a step that failed outside the test runners, e.g. go vet (repeatable)")
		trim := fs.String("trim", "", "prefix cut from Go package paths (the module path and a slash)")
		ci := fs.Bool("ci", testenv.CI(), "count skips for missing tools as failures (default: CI is set)")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		var res testsummary.Result
		for _, g := range goFiles {
			r, err := readFile(g[1], func(f io.Reader) (testsummary.Result, error) {
				return testsummary.ReadGo(f, testsummary.GoOptions{Name: g[0], TrimPrefix: *trim})
			})
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			res.Add(r)
		}
		for _, tp := range tapFiles {
			r, err := readFile(tp[1], func(f io.Reader) (testsummary.Result, error) { return testsummary.ReadTAP(f, tp[0]) })
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			res.Add(r)
		}
		for _, s := range skips {
			res.Add(testsummary.Result{Skips: []testsummary.Skip{{Runner: s[0], Test: "(all tests)", Reason: s[1]}}})
		}
		for _, f := range fails {
			res.Add(testsummary.Result{Failed: 1, Failures: []string{f[0] + ": " + f[1]}})
		}
		rep := testsummary.Summarize(res, *ci)
		for _, l := range rep.Lines {
			fmt.Fprintln(stdout, l)
		}
		fmt.Fprintln(stdout, rep.Summary)
		if !rep.OK {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "testsummary: unknown command %q (print or report)\n", args[0])
	return 2
}

func readFile(path string, read func(io.Reader) (testsummary.Result, error)) (testsummary.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return testsummary.Result{}, fmt.Errorf("testsummary: %w", err)
	}
	defer f.Close()
	return read(f)
}
