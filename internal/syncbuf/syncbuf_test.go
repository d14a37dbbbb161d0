package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers (run with -race) lose nothing and tear no write.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("ab\n")) //nolint:errcheck
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	s := b.String()
	if got := strings.Count(s, "ab\n"); got != 800 || len(s) != 2400 {
		t.Errorf("%d whole writes in %d bytes, want 800 in 2400", got, len(s))
	}
}
