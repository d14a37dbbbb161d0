package respcache

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/routebalance/routebalance/internal/redistest"
)

func TestRedisStore(t *testing.T) {
	c, prefix := redistest.Client(t)
	ctx := context.Background()
	a, err := NewRedis(c, prefix+":", Config{TTL: 2 * time.Second, MaxEntryBytes: 100, MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// A second replica with its own client sees what the first stored.
	b, err := NewRedis(redistest.NewClient(t), prefix+":", Config{TTL: 2 * time.Second, MaxEntryBytes: 100, MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("empty store: ok=%v err=%v", ok, err)
	}
	want := entry(`{"id":"x"}`)
	want.Stored = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	if ok, err := a.Put(ctx, "k", want); !ok || err != nil {
		t.Fatalf("Put: %v %v", ok, err)
	}
	got, ok, err := b.Get(ctx, "k")
	if err != nil || !ok || string(got.Body) != string(want.Body) || got.OutputTokens != 4 || !got.Stored.Equal(want.Stored) {
		t.Fatalf("replica B Get = %+v %v %v, want %+v", got, ok, err, want)
	}
	ttl := c.PTTL(ctx, prefix+":k").Val()
	if ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("redis TTL = %v, want (0, 2s]", ttl)
	}
	if ok, _ := a.Put(ctx, "big", entry(strings.Repeat("x", 101))); ok {
		t.Error("an oversize entry was stored")
	}
	// A corrupt value is a reported miss and is removed.
	c.Set(ctx, prefix+":bad", "not json", time.Minute)
	if _, ok, err := a.Get(ctx, "bad"); ok || err == nil {
		t.Errorf("corrupt entry: ok=%v err=%v, want a miss with an error", ok, err)
	}
	if n := c.Exists(ctx, prefix+":bad").Val(); n != 0 {
		t.Error("the corrupt entry was not removed")
	}
}

func TestRedisDown(t *testing.T) {
	dead, err := NewRedis(redisAt(t, "127.0.0.1:1"), "x:", Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, ok, err := dead.Get(ctx, "k"); ok || err == nil {
		t.Errorf("unreachable redis: ok=%v err=%v, want an error", ok, err)
	}
	if ok, err := dead.Put(ctx, "k", entry("{}")); ok || err == nil {
		t.Errorf("unreachable redis Put: ok=%v err=%v, want an error", ok, err)
	}
}

func redisAt(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
