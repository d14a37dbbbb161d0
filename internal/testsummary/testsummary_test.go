package testsummary

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/go.jsonl is real `go test -json ./...` output of a small module:
// package a passes TestPass, skips TestTool for a missing tool and fails
// TestSubs/two (so TestSubs); b skips TestShort for a non-tool reason and
// passes TestOK; c does not build; d has no test files.
// testdata/e2e.tap is real `node --test --test-reporter=tap` output: one
// pass, one skip for Chromium, a test with a passing and a skipped
// subtest, one failure.

func readGo(t *testing.T) (Result, string) {
	t.Helper()
	f, err := os.Open("testdata/go.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var echo strings.Builder
	r, err := ReadGo(f, GoOptions{Name: "go ./...", TrimPrefix: "example.com/m/", Echo: &echo})
	if err != nil {
		t.Fatal(err)
	}
	return r, echo.String()
}

func readTAP(t *testing.T) Result {
	t.Helper()
	f, err := os.Open("testdata/e2e.tap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ReadTAP(f, "web/e2e")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadGo(t *testing.T) {
	r, _ := readGo(t)
	want := Result{
		Passed: 3, // TestPass, TestSubs/one, TestOK
		Failed: 3, // TestSubs/two, TestSubs, package c (build)
		Skips: []Skip{
			{Runner: "a", Test: "TestTool", Reason: "needs stripe-mock: stripe-mock not installed"},
			{Runner: "b", Test: "TestShort", Reason: "starts 13 emulated instances"},
		},
		Failures: []string{"a TestSubs/two", "a TestSubs", "c did not build"},
		Ran:      []string{"go ./... (3 packages)"},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ReadGo (-want +got):\n%s", diff)
	}
}

// TestReadGoEchoesQuietOutput checks the print mode: what go test prints
// without -json and -v — ok/FAIL/no-test-files lines, build errors and
// the failed test's output — and none of the passing or skipped tests'
// chatter.
func TestReadGoEchoesQuietOutput(t *testing.T) {
	_, echo := readGo(t)
	want := strings.Join([]string{
		"--- FAIL: TestSubs (0.00s)",
		"    a_test.go:9: about to fail",
		"    a_test.go:9: boom 2",
		"--- FAIL: TestSubs/two (0.00s)",
		"FAIL",
		"FAIL\texample.com/m/a\t0.010s",
		"# example.com/m/c [example.com/m/c.test]",
		`c/c.go:3:23: cannot use "x" (untyped string constant) as int value in return statement`,
		"FAIL\texample.com/m/c [build failed]",
		"?   \texample.com/m/d\t[no test files]",
		"ok  \texample.com/m/b\t0.024s",
		"",
	}, "\n")
	if diff := cmp.Diff(want, echo); diff != "" {
		t.Errorf("echo (-want +got):\n%s", diff)
	}
}

func TestReadGoPassesThroughNonJSON(t *testing.T) {
	in := "go: downloading example.com/x v1.0.0\n" +
		`{"Action":"run","Package":"p","Test":"TestA"}` + "\n" +
		`{"Action":"pass","Package":"p","Test":"TestA"}` + "\n" +
		`{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}` + "\n" +
		`{"Action":"pass","Package":"p"}` + "\n"
	var echo strings.Builder
	r, err := ReadGo(strings.NewReader(in), GoOptions{Echo: &echo})
	if err != nil {
		t.Fatal(err)
	}
	if r.Passed != 1 || r.Failed != 0 || echo.String() != "go: downloading example.com/x v1.0.0\nok  \tp\t0.1s\n" {
		t.Errorf("got %+v, echo %q", r, echo.String())
	}
}

func TestReadTAP(t *testing.T) {
	r := readTAP(t)
	want := Result{
		Passed: 3, // passes, inner ok, with subtests
		Failed: 1,
		Skips: []Skip{
			{Runner: "web/e2e", Test: "browser # thing", Reason: "needs chromium: /usr/bin/chromium not found (apt-get install -y chromium)"},
			{Runner: "web/e2e", Test: "inner skip", Reason: ""},
		},
		Failures: []string{"web/e2e fails"},
		Ran:      []string{"web/e2e (6 tests)"},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ReadTAP (-want +got):\n%s", diff)
	}
}

// closing is the CI readers' contract for the last line.
var closing = regexp.MustCompile(`^summary: \d+ passed, \d+ failed, \d+ skipped\b`)

func TestSummarize(t *testing.T) {
	pass := func(n int, skips ...Skip) Result {
		return Result{Passed: n, Skips: skips, Ran: []string{"go ./... (1 packages)"}}
	}
	tool := Skip{Runner: "billing/stripesync", Test: "TestCheckout", Reason: "needs stripe-mock: stripe-mock not installed"}
	tool2 := Skip{Runner: "billing", Test: "TestMeter", Reason: "needs postgres: no server at 127.0.0.1:5432"}
	plain := Skip{Runner: "cmd/routebalance", Test: "TestDemo", Reason: "starts the service (-short)"}
	tests := []struct {
		name    string
		r       Result
		ci      bool
		ok      bool
		summary string
	}{
		{"all green", pass(5), false, true,
			"summary: 5 passed, 0 failed, 0 skipped — ran go ./... (1 packages); nothing skipped"},
		{"tool skip outside CI is listed, not failed", pass(5, tool, tool, tool2, plain), false, true,
			"summary: 5 passed, 0 failed, 4 skipped — ran go ./... (1 packages); skipped: " +
				"needs stripe-mock: stripe-mock not installed ×2 (billing/stripesync); " +
				"needs postgres: no server at 127.0.0.1:5432 ×1 (billing); starts the service (-short) ×1 (cmd/routebalance)"},
		{"tool skip under CI is a failure", pass(5, tool, plain), true, false,
			"summary: 5 passed, 1 failed, 1 skipped — ran go ./... (1 packages); skipped: starts the service (-short) ×1 (cmd/routebalance); " +
				"CI counts 1 skips for missing tools as failures: needs stripe-mock: stripe-mock not installed ×1 (billing/stripesync)"},
		{"non-tool skip under CI is fine", pass(5, plain), true, true,
			"summary: 5 passed, 0 failed, 1 skipped — ran go ./... (1 packages); skipped: starts the service (-short) ×1 (cmd/routebalance)"},
		{"a failure", Result{Passed: 1, Failed: 1, Failures: []string{"p TestX"}}, false, false,
			"summary: 1 passed, 1 failed, 0 skipped; nothing skipped"},
		{"nothing ran", Result{}, false, false, "summary: 0 passed, 0 failed, 0 skipped; nothing skipped; no tests ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Summarize(tt.r, tt.ci)
			if diff := cmp.Diff([]any{tt.ok, tt.summary}, []any{rep.OK, rep.Summary}); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
			if !closing.MatchString(rep.Summary) || strings.Contains(rep.Summary, "\n") {
				t.Errorf("summary %q is not one line starting 'summary: N passed, N failed, N skipped'", rep.Summary)
			}
		})
	}
}

// TestSummarizeRealStreams sums the two fixtures as scripts/test.sh does
// and checks the counts and reasons, with and without CI.
func TestSummarizeRealStreams(t *testing.T) {
	g, _ := readGo(t)
	var r Result
	r.Add(g)
	r.Add(readTAP(t))
	r.Add(Result{Skips: []Skip{{Runner: "infra/helm", Test: "(all tests)", Reason: "needs node: node not on PATH"}}})

	rep := Summarize(r, false)
	if !strings.HasPrefix(rep.Summary, "summary: 6 passed, 4 failed, 5 skipped — ran go ./... (3 packages), web/e2e (6 tests); skipped: ") {
		t.Errorf("summary = %q", rep.Summary)
	}
	for _, want := range []string{"needs stripe-mock: stripe-mock not installed ×1 (a)", "needs chromium: /usr/bin/chromium not found", "needs node: node not on PATH ×1 (infra/helm)", "(no reason given) ×1 (web/e2e)"} {
		if !strings.Contains(rep.Summary, want) {
			t.Errorf("summary lacks %q: %s", want, rep.Summary)
		}
	}
	ci := Summarize(r, true)
	if !strings.HasPrefix(ci.Summary, "summary: 6 passed, 7 failed, 2 skipped") || ci.OK {
		t.Errorf("CI summary = %q (ok %v), want the 3 tool skips counted as failures", ci.Summary, ci.OK)
	}
	if diff := cmp.Diff([]string{
		"failed: a TestSubs/two", "failed: a TestSubs", "failed: c did not build", "failed: web/e2e fails",
		"failed (tool skipped under CI): a TestTool — needs stripe-mock: stripe-mock not installed",
		"failed (tool skipped under CI): web/e2e browser # thing — needs chromium: /usr/bin/chromium not found (apt-get install -y chromium)",
		"failed (tool skipped under CI): infra/helm (all tests) — needs node: node not on PATH",
		"skipped: b TestShort — starts 13 emulated instances",
		"skipped: web/e2e inner skip — (no reason given)",
	}, ci.Lines); diff != "" {
		t.Errorf("CI lines (-want +got):\n%s", diff)
	}
}

// TestReadGoUnfinishedPackageFails cuts a stream mid-package (go test
// killed): the package counts as failed, so the run is not green.
func TestReadGoUnfinishedPackageFails(t *testing.T) {
	in := `{"Action":"start","Package":"m/p"}
{"Action":"run","Package":"m/p","Test":"TestA"}
{"Action":"pass","Package":"m/p","Test":"TestA"}
{"Action":"start","Package":"m/q"}
{"Action":"output","Package":"m/q","Output":"?   \tm/q\t[no test files]\n"}
{"Action":"skip","Package":"m/q"}
{"Action":"run","Package":"m/p","Test":"TestB"}
`
	r, err := ReadGo(strings.NewReader(in), GoOptions{TrimPrefix: "m/"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p did not finish"}, r.Failures); diff != "" || r.Failed != 1 || r.Passed != 1 {
		t.Errorf("failures (-want +got):\n%s (failed %d passed %d)", diff, r.Failed, r.Passed)
	}
	if Summarize(r, false).OK {
		t.Error("an unfinished package summarized as OK")
	}
}
