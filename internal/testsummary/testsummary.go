// Package testsummary reads what the test runners of scripts/test.sh
// report — `go test -json` streams and the TAP output of node's test runner
// (web/e2e) — and sums it up: how many tests passed, failed and were
// skipped, and why each skip happened. It also turns a go test -json
// stream back into go test's usual quiet output (ok/FAIL lines and the
// output of failed tests), so the script can run go test with -json and
// still print what people and CI log readers expect.
//
// Under CI a skip for a missing tool (reason "needs <tool>: …", the form
// internal/testenv writes) counts as a failure.
package testsummary

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/routebalance/routebalance/internal/testenv"
)

// Skip is one skipped test and the reason it gave.
type Skip struct {
	// Runner names where the test lives ("billing/stripesync", "web/e2e").
	Runner string
	// Test is the test's name (subtests as Parent/Sub).
	Test string
	// Reason is what the test said when it skipped ("" when nothing).
	Reason string
}

// Tool reports whether the skip is for a missing tool: its reason has
// the "needs <tool>: …" form.
func (s Skip) Tool() bool { return strings.HasPrefix(s.Reason, testenv.SkipPrefix) }

// Result is what one or more runners reported.
type Result struct {
	Passed, Failed int
	Skips          []Skip
	// Failures names each failed test ("pkg TestX") and each package that
	// failed without a failed test (build error, panic, timeout).
	Failures []string
	// Ran describes each runner that ran ("go ./... 61 packages").
	Ran []string
}

// Skipped is the number of skipped tests.
func (r *Result) Skipped() int { return len(r.Skips) }

// Add merges o into r.
func (r *Result) Add(o Result) {
	r.Passed += o.Passed
	r.Failed += o.Failed
	r.Skips = append(r.Skips, o.Skips...)
	r.Failures = append(r.Failures, o.Failures...)
	r.Ran = append(r.Ran, o.Ran...)
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Output      string
	FailedBuild string
}

type testKey struct{ pkg, test string }

// GoOptions tune ReadGo.
type GoOptions struct {
	// Name is the runner's description in Result.Ran ("go ./...").
	Name string
	// TrimPrefix is cut from package paths (the module path and a slash).
	TrimPrefix string
	// Echo, when set, receives go test's usual quiet output as the stream
	// is read: package ok/FAIL lines, build errors, and the whole output
	// of every failed top-level test.
	Echo io.Writer
}

// ReadGo reads a go test -json stream. Lines that are not JSON (go vet or
// build chatter) are echoed as they are and otherwise ignored.
func ReadGo(r io.Reader, opt GoOptions) (Result, error) {
	var (
		res      Result
		outputs  = map[testKey][]string{} // a test's own output lines, for skip reasons
		tree     = map[testKey][]string{} // a top-level test's output, subtests included, in order
		failedIn = map[string]int{}       // failed tests per package
		pkgs     = map[string]bool{}      // packages that ran tests
		started  = map[string]bool{}      // packages started and not finished
		echo     = opt.Echo
	)
	if echo == nil {
		echo = io.Discard
	}
	short := func(p string) string { return strings.TrimPrefix(p, opt.TrimPrefix) }
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(echo, "%s\n", line)
			continue
		}
		switch ev.Action {
		case "build-output":
			fmt.Fprint(echo, ev.Output)
			continue
		case "build-fail":
			continue
		}
		if ev.Test == "" {
			switch ev.Action {
			case "start":
				started[ev.Package] = true
			case "output":
				if ev.Output != "PASS\n" {
					fmt.Fprint(echo, ev.Output)
				}
			case "fail":
				if failedIn[ev.Package] == 0 {
					res.Failed++
					what := "failed"
					if ev.FailedBuild != "" {
						what = "did not build"
					}
					res.Failures = append(res.Failures, short(ev.Package)+" "+what)
				}
				pkgs[ev.Package] = true
				delete(started, ev.Package)
			case "pass", "skip":
				if ev.Action == "pass" {
					pkgs[ev.Package] = true
				}
				delete(started, ev.Package)
			}
			continue
		}
		k := testKey{ev.Package, ev.Test}
		top := testKey{ev.Package, strings.SplitN(ev.Test, "/", 2)[0]}
		switch ev.Action {
		case "output":
			outputs[k] = append(outputs[k], ev.Output)
			switch {
			case k == top && strings.HasPrefix(ev.Output, "--- FAIL"):
				// go test prints a test's verdict before its subtests' output.
				tree[top] = append([]string{ev.Output}, tree[top]...)
			case !isFrame(ev.Output):
				tree[top] = append(tree[top], ev.Output)
			}
		case "pass":
			res.Passed++
			delete(outputs, k)
		case "skip":
			res.Skips = append(res.Skips, Skip{Runner: short(ev.Package), Test: ev.Test, Reason: skipReason(outputs[k])})
			delete(outputs, k)
		case "fail":
			res.Failed++
			failedIn[ev.Package]++
			res.Failures = append(res.Failures, short(ev.Package)+" "+ev.Test)
			delete(outputs, k)
		}
		if k == top && (ev.Action == "pass" || ev.Action == "skip" || ev.Action == "fail") {
			if ev.Action == "fail" {
				for _, l := range tree[top] {
					fmt.Fprint(echo, l)
				}
			}
			delete(tree, top)
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("testsummary: read go test -json: %w", err)
	}
	// A package that started and never reported (go test killed, stream
	// cut) is a failure, or an interrupted run would look green.
	var unfinished []string
	for p := range started {
		unfinished = append(unfinished, p)
	}
	sort.Strings(unfinished)
	for _, p := range unfinished {
		res.Failed++
		res.Failures = append(res.Failures, short(p)+" did not finish")
	}
	name := opt.Name
	if name == "" {
		name = "go test"
	}
	res.Ran = append(res.Ran, fmt.Sprintf("%s (%d packages)", name, len(pkgs)))
	return res, nil
}

// isFrame reports whether a test output line is test2json framing that
// go test does not print without -v.
func isFrame(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"} {
		if strings.HasPrefix(strings.TrimLeft(l, " "), p) {
			return true
		}
	}
	return false
}

// logPrefix is the "file_test.go:12: " go test puts before t.Log lines.
var logPrefix = regexp.MustCompile(`^\S+\.go:\d+: `)

// skipReason is what a skipped test logged, framing and file:line
// prefixes removed, joined with "; ".
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		if isFrame(l) {
			continue
		}
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		parts = append(parts, logPrefix.ReplaceAllString(l, ""))
	}
	return strings.Join(parts, "; ")
}

// tapLine is an "ok"/"not ok" line of node's TAP reporter, at any depth,
// with an optional SKIP or TODO directive.
var tapLine = regexp.MustCompile(`^\s*(not ok|ok) \d+(?: - (.*?))?(?: # (SKIP|TODO)\b ?(.*))?$`)

// ReadTAP reads TAP from node --test --test-reporter=tap. Every test and
// subtest counts; a SKIP directive's text is the reason.
func ReadTAP(r io.Reader, runner string) (Result, error) {
	var res Result
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		m := tapLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n++
		name := strings.ReplaceAll(m[2], `\#`, "#")
		switch {
		case m[3] == "SKIP" || m[3] == "TODO":
			reason := m[4]
			if m[3] == "TODO" {
				reason = "todo: " + reason
			}
			res.Skips = append(res.Skips, Skip{Runner: runner, Test: name, Reason: reason})
		case m[1] == "ok":
			res.Passed++
		default:
			res.Failed++
			res.Failures = append(res.Failures, runner+" "+name)
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("testsummary: read TAP: %w", err)
	}
	res.Ran = append(res.Ran, fmt.Sprintf("%s (%d tests)", runner, n))
	return res, nil
}

// Report is the closing summary of a run.
type Report struct {
	// Lines lists every skip and failure, one per line, for the log.
	Lines []string
	// Summary is the one closing line: "summary: N passed, N failed, N
	// skipped — ran …; skipped: reason ×count; …".
	Summary string
	// OK is false when anything failed, nothing ran, or (under CI) a test
	// was skipped for a missing tool.
	OK bool
}

// Summarize builds the report. Under ci every tool skip is a failure and
// counted as failed, not skipped.
func Summarize(r Result, ci bool) Report {
	var (
		rep     Report
		skipped []Skip
		toolCI  []Skip
	)
	for _, s := range r.Skips {
		if ci && s.Tool() {
			toolCI = append(toolCI, s)
			continue
		}
		skipped = append(skipped, s)
	}
	failed := r.Failed + len(toolCI)
	for _, f := range r.Failures {
		rep.Lines = append(rep.Lines, "failed: "+f)
	}
	for _, s := range toolCI {
		rep.Lines = append(rep.Lines, fmt.Sprintf("failed (tool skipped under CI): %s %s — %s", s.Runner, s.Test, orNone(s.Reason)))
	}
	for _, s := range skipped {
		rep.Lines = append(rep.Lines, fmt.Sprintf("skipped: %s %s — %s", s.Runner, s.Test, orNone(s.Reason)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %d passed, %d failed, %d skipped", r.Passed, failed, len(skipped))
	if len(r.Ran) > 0 {
		fmt.Fprintf(&b, " — ran %s", strings.Join(r.Ran, ", "))
	}
	if g := groups(skipped); g != "" {
		fmt.Fprintf(&b, "; skipped: %s", g)
	} else {
		b.WriteString("; nothing skipped")
	}
	if len(toolCI) > 0 {
		fmt.Fprintf(&b, "; CI counts %d skips for missing tools as failures: %s", len(toolCI), groups(toolCI))
	}
	total := r.Passed + r.Failed + len(r.Skips)
	if total == 0 {
		b.WriteString("; no tests ran")
	}
	rep.Summary = b.String()
	rep.OK = failed == 0 && total > 0
	return rep
}

func orNone(s string) string {
	if s == "" {
		return "(no reason given)"
	}
	return s
}

// groups is "reason ×n (where, …); …", most frequent first.
func groups(skips []Skip) string {
	type group struct {
		reason string
		n      int
		where  []string
	}
	byReason := map[string]*group{}
	var order []*group
	for _, s := range skips {
		reason := orNone(s.Reason)
		g := byReason[reason]
		if g == nil {
			g = &group{reason: reason}
			byReason[reason] = g
			order = append(order, g)
		}
		g.n++
		if len(g.where) == 0 || g.where[len(g.where)-1] != s.Runner {
			g.where = append(g.where, s.Runner)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].n > order[j].n })
	var parts []string
	for _, g := range order {
		where := dedupe(g.where)
		if len(where) > 3 {
			where = append(where[:3], fmt.Sprintf("+%d more", len(where)-3))
		}
		parts = append(parts, fmt.Sprintf("%s ×%d (%s)", truncate(g.reason, 160), g.n, strings.Join(where, ", ")))
	}
	return strings.Join(parts, "; ")
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
