// Package respcache is the exact-match response cache of the inference
// path (off by default): a deterministic request (temperature 0, one
// choice) that a tenant has sent before is answered with the bytes its
// first answer sent, without an upstream call.
//
// A key is SHA-256 over the tenant, the endpoint and the request body in a
// canonical form (object keys sorted, insignificant space removed, numbers
// kept as written), so two requests share an entry exactly when they come
// from the same tenant and ask the same thing: model, messages, every
// sampling parameter, streaming or not, and any routing overrides (under
// model "auto" those can change which model answers). Keys never cross
// tenants: the tenant id is the first thing hashed.
//
// Two stores: LRU, in process, bounded in entries and bytes; and Redis
// (redis.go), shared by every replica, with the TTL kept by Redis.
package respcache

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// Entry is a cached answer: what was written to the client and what the
// meter needs to record a cached request.
type Entry struct {
	// Status and ContentType are the answer's HTTP status (always 200: only
	// successes are cached) and content type.
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	// Body is exactly what the client received (a JSON body or a whole SSE
	// stream).
	Body []byte `json:"body"`
	// Model and InstanceID say who produced the answer first.
	Model      string `json:"model"`
	InstanceID string `json:"instance_id"`
	// PromptTokens and OutputTokens are the first answer's usage.
	PromptTokens int `json:"prompt_tokens"`
	OutputTokens int `json:"output_tokens"`
	// Stored is when the answer was cached.
	Stored time.Time `json:"stored"`
}

// size is the entry's weight in an LRU's byte budget.
func (e *Entry) size() int {
	return len(e.Body) + len(e.ContentType) + len(e.Model) + len(e.InstanceID) + 64
}

// Config configures the cache.
type Config struct {
	// TTL is how long an entry answers; default 10 minutes.
	TTL time.Duration
	// MaxEntries bounds the in-process LRU; default 10,000.
	MaxEntries int
	// MaxBytes bounds the LRU's bodies in bytes; default 64 MiB.
	MaxBytes int
	// MaxEntryBytes is the largest body cached; larger answers are not
	// cached. Default 1 MiB.
	MaxEntryBytes int
}

// Defaults for Config's zero fields.
const (
	DefaultTTL           = 10 * time.Minute
	DefaultMaxEntries    = 10_000
	DefaultMaxBytes      = 64 << 20
	DefaultMaxEntryBytes = 1 << 20
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	return c
}

// Validate checks the configuration (after WithDefaults).
func (c Config) Validate() error {
	switch {
	case c.TTL < time.Second:
		return fmt.Errorf("respcache: ttl must be at least 1s, got %v", c.TTL)
	case c.MaxEntries < 1:
		return fmt.Errorf("respcache: max entries must be >= 1, got %d", c.MaxEntries)
	case c.MaxEntryBytes < 1 || c.MaxBytes < c.MaxEntryBytes:
		return fmt.Errorf("respcache: need 1 <= max entry bytes (%d) <= max bytes (%d)", c.MaxEntryBytes, c.MaxBytes)
	}
	return nil
}

// ErrNotCacheable is returned by Key for a request whose answer is not
// deterministic (or not worth caching).
var ErrNotCacheable = errors.New("respcache: request is not cacheable")

// Key returns the cache key of a request body sent by tenant to endpoint
// ("chat", "completions", …), or ErrNotCacheable unless the body sets
// temperature to 0 and asks for at most one choice. A body that is not a
// JSON object is an error.
func Key(tenantID, endpoint string, body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return "", fmt.Errorf("respcache: body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("respcache: body: trailing data after the JSON object")
	}
	if !deterministic(fields) {
		return "", ErrNotCacheable
	}
	h := sha256.New()
	writeField(h, tenantID)
	writeField(h, endpoint)
	if err := canonical(h, fields); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeField(w io.Writer, s string) {
	fmt.Fprintf(w, "%d:%s;", len(s), s)
}

// deterministic: temperature exactly 0, n absent or 1 (best_of too).
func deterministic(f map[string]any) bool {
	t, ok := f["temperature"].(json.Number)
	if !ok {
		return false
	}
	if v, err := t.Float64(); err != nil || v != 0 {
		return false
	}
	for _, k := range []string{"n", "best_of"} {
		if v, ok := f[k]; ok && v != nil {
			n, ok := v.(json.Number)
			if !ok || n.String() != "1" {
				return false
			}
		}
	}
	return true
}

// canonical writes v with object keys sorted and numbers as written.
func canonical(w io.Writer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		io.WriteString(w, "{")
		for i, k := range keys {
			if i > 0 {
				io.WriteString(w, ",")
			}
			b, _ := json.Marshal(k)
			w.Write(b)
			io.WriteString(w, ":")
			if err := canonical(w, x[k]); err != nil {
				return err
			}
		}
		io.WriteString(w, "}")
	case []any:
		io.WriteString(w, "[")
		for i, e := range x {
			if i > 0 {
				io.WriteString(w, ",")
			}
			if err := canonical(w, e); err != nil {
				return err
			}
		}
		io.WriteString(w, "]")
	case json.Number:
		io.WriteString(w, x.String())
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Errorf("respcache: body: %w", err)
		}
		w.Write(b)
	}
	return nil
}

// LRU is the in-process store: least recently used entries go first when
// the entry or byte budget is exceeded; expired entries are dropped when
// met. Safe for concurrent use.
type LRU struct {
	cfg   Config
	now   func() time.Time
	mu    sync.Mutex
	ll    *list.List // front = most recent; values are *lruItem
	items map[string]*list.Element
	bytes int
}

type lruItem struct {
	key     string
	e       Entry
	expires time.Time
}

// NewLRU returns an empty LRU; now is its clock (nil: time.Now).
func NewLRU(cfg Config, now func() time.Time) (*LRU, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &LRU{cfg: cfg, now: now, ll: list.New(), items: map[string]*list.Element{}}, nil
}

// Get returns the live entry under key (the error is always nil: the
// signature is the one the Redis store shares).
func (c *LRU) Get(_ context.Context, key string) (Entry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return Entry{}, false, nil
	}
	it := el.Value.(*lruItem)
	if !c.now().Before(it.expires) {
		c.remove(el)
		return Entry{}, false, nil
	}
	c.ll.MoveToFront(el)
	return it.e, true, nil
}

// MaxEntryBytes is the largest body the store takes.
func (c *LRU) MaxEntryBytes() int { return c.cfg.MaxEntryBytes }

// Put stores e under key for the TTL; it reports false (and stores
// nothing) for an entry over MaxEntryBytes or with a status other than 200.
func (c *LRU) Put(_ context.Context, key string, e Entry) (bool, error) {
	if e.Status != 200 || len(e.Body) > c.cfg.MaxEntryBytes {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	it := &lruItem{key: key, e: e, expires: c.now().Add(c.cfg.TTL)}
	c.items[key] = c.ll.PushFront(it)
	c.bytes += e.size()
	for c.ll.Len() > c.cfg.MaxEntries || c.bytes > c.cfg.MaxBytes {
		c.remove(c.ll.Back())
	}
	return true, nil
}

// Len returns the number of entries held (live or not yet found expired).
func (c *LRU) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func (c *LRU) remove(el *list.Element) {
	it := el.Value.(*lruItem)
	c.ll.Remove(el)
	delete(c.items, it.key)
	c.bytes -= it.e.size()
}
