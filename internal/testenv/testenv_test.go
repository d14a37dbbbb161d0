package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "FALSE": false, "true": true, "1": true, "yes": true} {
		t.Setenv("CI", v)
		if got := CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, got, want)
		}
	}
}

// TestNeed runs the helper in a child test process with and without CI and
// checks that a missing tool skips outside CI, fails under CI, and that an
// available tool does neither.
func TestNeed(t *testing.T) {
	if mode := os.Getenv("TESTENV_CHILD"); mode != "" {
		tool := "widget"
		missing := "not installed (apt-get install widget)"
		if mode == "present" {
			missing = ""
		}
		Need(t, tool, missing)
		t.Log("tool present: test ran")
		return
	}
	tests := []struct {
		name, mode, ci string
		wantFail       bool
		want           string
	}{
		{"missing outside CI skips", "missing", "", false, "--- SKIP: TestNeed"},
		{"missing under CI fails", "missing", "true", true, "--- FAIL: TestNeed"},
		{"present under CI runs", "present", "true", false, "tool present: test ran"},
		{"present outside CI runs", "present", "", false, "tool present: test ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNeed$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTENV_CHILD="+tt.mode, "CI="+tt.ci)
			out, err := cmd.CombinedOutput()
			if (err != nil) != tt.wantFail {
				t.Fatalf("child err = %v, want failure %v; output:\n%s", err, tt.wantFail, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("child output lacks %q:\n%s", tt.want, out)
			}
			if tt.mode == "missing" && !strings.Contains(string(out), "needs widget: not installed") {
				t.Errorf("child output lacks the reason in the needs form:\n%s", out)
			}
		})
	}
}

func TestCause(t *testing.T) {
	op := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5432}, Err: errors.New("connect: connection refused")}
	wrapped := fmt.Errorf("failed to connect to `user=postgres database=test`:\n\t127.0.0.1:5432: %w", op)
	if got, want := Cause(wrapped), "dial tcp 127.0.0.1:5432: connect: connection refused"; got != want {
		t.Errorf("Cause = %q, want %q", got, want)
	}
	if got := Cause(errors.New("first\nsecond")); got != "first" {
		t.Errorf("Cause = %q, want the first line", got)
	}
}
