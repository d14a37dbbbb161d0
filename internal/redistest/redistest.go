// Package redistest gives tests a real Redis (REDIS_URL, default
// redis://127.0.0.1:6379/0) and a key prefix of their own, and deletes the
// prefix's keys when the test ends. Without a reachable Redis the test is
// skipped with a "needs redis: …" reason — except under CI, where it fails,
// so CI never passes by skipping (internal/testenv).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routebalance/routebalance/internal/testenv"
)

// DefaultURL is the Redis tests use when REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns REDIS_URL or DefaultURL.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client returns a client of the test Redis and a key prefix unique to
// this test ("rbtest:<name>:<random>"); keys under the prefix are deleted
// at cleanup and the client closed.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("REDIS_URL %q: %v", URL(), err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		testenv.Need(t, "redis", fmt.Sprintf("unreachable at %s (set REDIS_URL, or run redis-server on 127.0.0.1:6379): %v", URL(), err))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	prefix := "rbtest:" + name + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		Delete(ctx, c, prefix)
		_ = c.Close()
	})
	return c, prefix
}

// NewClient returns another client of the same Redis (a second replica's
// connection pool), closed at cleanup.
func NewClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Delete removes every key that starts with prefix (SCAN, then DEL).
func Delete(ctx context.Context, c *redis.Client, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			c.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}
