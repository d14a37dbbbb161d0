package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// green is a go test -json stream of one passing package with one test
// skipped for a missing tool.
const green = `{"Action":"run","Package":"m/p","Test":"TestA"}
{"Action":"pass","Package":"m/p","Test":"TestA"}
{"Action":"run","Package":"m/p","Test":"TestB"}
{"Action":"output","Package":"m/p","Test":"TestB","Output":"    b_test.go:9: needs stripe-mock: stripe-mock not installed\n"}
{"Action":"skip","Package":"m/p","Test":"TestB"}
{"Action":"output","Package":"m/p","Output":"ok  \tm/p\t0.1s\n"}
{"Action":"pass","Package":"m/p"}
`

func TestReport(t *testing.T) {
	goFile := write(t, "go.jsonl", green)
	tap := write(t, "e2e.tap", "TAP version 13\nok 1 - units\n1..1\n")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantLast string
	}{
		{"outside CI a tool skip is reported and passes", []string{"report", "-ci=false", "-trim", "m/", "-go", "go ./...=" + goFile, "-tap", "web/e2e=" + tap},
			0, "summary: 2 passed, 0 failed, 1 skipped — ran go ./... (1 packages), web/e2e (1 tests); skipped: needs stripe-mock: stripe-mock not installed ×1 (p)"},
		{"under CI the same run fails", []string{"report", "-ci", "-trim", "m/", "-go", "go ./...=" + goFile, "-tap", "web/e2e=" + tap},
			1, "summary: 2 passed, 1 failed, 0 skipped — ran go ./... (1 packages), web/e2e (1 tests); nothing skipped; CI counts 1 skips for missing tools as failures: needs stripe-mock: stripe-mock not installed ×1 (p)"},
		{"a runner that could not start is named", []string{"report", "-ci=false", "-trim", "m/", "-go", "go ./...=" + goFile, "-skip", "web/e2e=needs node: node not on PATH"},
			0, "summary: 1 passed, 0 failed, 2 skipped — ran go ./... (1 packages); skipped: needs stripe-mock: stripe-mock not installed ×1 (p); needs node: node not on PATH ×1 (web/e2e)"},
		{"CI from the environment", []string{"report", "-trim", "m/", "-go", "go ./...=" + goFile},
			1, "summary: 1 passed, 1 failed, 0 skipped — ran go ./... (1 packages); nothing skipped; CI counts 1 skips for missing tools as failures: needs stripe-mock: stripe-mock not installed ×1 (p)"},
		{"a failed step outside the runners counts", []string{"report", "-ci=false", "-trim", "m/", "-go", "go ./...=" + goFile, "-fail", "go vet=exit status 1"},
			1, "summary: 1 passed, 1 failed, 1 skipped — ran go ./... (1 packages); skipped: needs stripe-mock: stripe-mock not installed ×1 (p)"},
		{"missing file", []string{"report", "-go", "x=" + filepath.Join(t.TempDir(), "none")}, 1, ""},
		{"unknown command", []string{"sum"}, 2, ""},
	}
	t.Setenv("CI", "true")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(tt.args, strings.NewReader(""), &out, &errOut)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errOut.String())
			}
			if tt.wantLast == "" {
				return
			}
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if got := lines[len(lines)-1]; got != tt.wantLast {
				t.Errorf("last line\n got %q\nwant %q", got, tt.wantLast)
			}
		})
	}
}

func TestPrint(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"print"}, strings.NewReader(green), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if out.String() != "ok  \tm/p\t0.1s\n" {
		t.Errorf("print = %q, want go test's quiet ok line only", out.String())
	}
}
