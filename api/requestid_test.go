package api

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Request ids sort by the millisecond they were made in (the usage
// ledger's primary key then grows at its end) and stay unique within one
// millisecond.
func TestRequestIDOrderAndUniqueness(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var ids []string
	seen := map[string]bool{}
	for i := range 2000 {
		id := requestIDAt(base.Add(time.Duration(i/4) * time.Millisecond)) // 4 per millisecond
		if len(id) != 28 || !saneRequestID(id) {
			t.Fatalf("id %q: want 28 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	for i := 4; i < len(ids); i += 4 {
		if !(slices.Max(ids[i-4:i]) < slices.Min(ids[i:i+4])) {
			t.Fatalf("ids of millisecond %d do not sort after those of %d: %v then %v", i/4, i/4-1, ids[i-4:i], ids[i:i+4])
		}
	}
	if got, want := requestIDAt(base)[:12], fmt.Sprintf("%012x", base.UnixMilli()); got != want {
		t.Errorf("prefix %s, want the Unix millisecond in hex, %s", got, want)
	}
	if a, b := randomSuffix(), randomSuffix(); len(a) != 8 || a == b {
		t.Errorf("suffixes %q, %q: want two different 8-digit ones", a, b)
	}
}
