// Package testwait is the one way tests wait for something another
// goroutine does: poll a condition until it holds, failing the test after
// a bound. The bound is a guard against a hang, never a timing assertion.
package testwait

import (
	"testing"
	"time"
)

// Bound is how long Until polls before it fails the test: generous, so a
// loaded machine does not fail a correct test.
const Bound = 30 * time.Second

// poll is the interval between checks.
const poll = 5 * time.Millisecond

// Until polls cond every few milliseconds until it returns true, and fails
// t with "timed out waiting for <what>" if it has not after Bound.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(poll)
	}
}
