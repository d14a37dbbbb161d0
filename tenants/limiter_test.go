package tenants

import (
	"fmt"
	"testing"
	"time"
)

func TestLoginLimiterBounded(t *testing.T) {
	l := newWindowCounter(3, time.Minute)
	l.maxKeys = 50
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	for i := 0; i < 1000; i++ {
		l.fail(fmt.Sprintf("spray%d@example.com", i), now.Add(time.Duration(i)*time.Millisecond))
		if len(l.m) > l.maxKeys {
			t.Fatalf("after %d emails the table holds %d > %d", i+1, len(l.m), l.maxKeys)
		}
	}
	l.fail("a@example.com", now)
	l.fail("a@example.com", now)
	if _, b := l.blocked("a@example.com", now); b {
		t.Error("blocked after 2 of 3 failures")
	}
	l.fail("a@example.com", now)
	if wait, b := l.blocked("a@example.com", now.Add(59*time.Second)); !b || wait != time.Second {
		t.Errorf("after 3 failures: blocked %v, retry in %v; want true, 1s", b, wait)
	}
	if _, b := l.blocked("a@example.com", now.Add(time.Minute)); b {
		t.Error("still blocked after the window")
	}
}
