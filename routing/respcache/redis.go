package respcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the store shared by every replica: one string key per entry
// (prefix + key), the entry JSON-encoded, its TTL kept by Redis (SET … PX).
// Errors are returned, not hidden: the caller treats a failing cache as a
// miss and goes upstream.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	cfg    Config
}

// NewRedis returns a store on c whose keys start with prefix (e.g.
// "rb:cache:").
func NewRedis(c redis.UniversalClient, prefix string, cfg Config) (*Redis, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("respcache: nil redis client")
	}
	return &Redis{c: c, prefix: prefix, cfg: cfg}, nil
}

// Get returns the entry under key; a miss is (Entry{}, false, nil).
func (r *Redis) Get(ctx context.Context, key string) (Entry, bool, error) {
	b, err := r.c.Get(ctx, r.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("respcache: redis get: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		// A corrupt value answers nothing and is dropped.
		_ = r.c.Del(ctx, r.prefix+key).Err()
		return Entry{}, false, fmt.Errorf("respcache: redis entry %s: %w", key, err)
	}
	return e, true, nil
}

// Put stores e under key for the TTL; it reports false (and stores
// nothing) for an entry over MaxEntryBytes or with a status other than 200.
func (r *Redis) Put(ctx context.Context, key string, e Entry) (bool, error) {
	if e.Status != 200 || len(e.Body) > r.cfg.MaxEntryBytes {
		return false, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("respcache: encode: %w", err)
	}
	if err := r.c.Set(ctx, r.prefix+key, b, r.cfg.TTL).Err(); err != nil {
		return false, fmt.Errorf("respcache: redis set: %w", err)
	}
	return true, nil
}

// MaxEntryBytes is the largest body the store takes.
func (r *Redis) MaxEntryBytes() int { return r.cfg.MaxEntryBytes }

// TTL is the store's entry lifetime.
func (r *Redis) TTL() time.Duration { return r.cfg.TTL }
