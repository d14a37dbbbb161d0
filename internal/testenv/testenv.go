// Package testenv is how a test says it needs an outside tool (Postgres,
// stripe-mock, Chromium, …). Without the tool the test is skipped with a
// reason in one fixed form, "needs <tool>: <why>", which scripts/test.sh's
// summary (internal/testsummary) groups by tool; when CI is set the same
// call fails the test instead, because .ci/run installs every tool and a
// silent skip there would make a red suite look green.
package testenv

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
)

// SkipPrefix starts the reason of every skip for a missing tool.
const SkipPrefix = "needs "

// CI reports whether the CI environment variable is set to anything but
// "", "0" or "false".
func CI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}

// Need skips t, or fails it when CI is set, if tool is unavailable:
// missing is why ("" means the tool is there and Need does nothing).
func Need(t testing.TB, tool, missing string) {
	t.Helper()
	if missing == "" {
		return
	}
	if CI() {
		t.Fatalf("%s%s: %s (CI is set, so a missing tool is a failure: .ci/run installs it)", SkipPrefix, tool, missing)
	}
	t.Skipf("%s%s: %s", SkipPrefix, tool, missing)
}

// Reason is the skip reason Need uses; scripts that skip a whole runner
// (web/e2e without node) write the same form.
func Reason(tool, missing string) string { return SkipPrefix + tool + ": " + missing }

// Cause is a short, stable description of why a connection failed: the
// network error inside err ("dial tcp 127.0.0.1:5432: connect: connection
// refused") when there is one, else err's first line. Skip reasons built
// from it group well in the summary.
func Cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
