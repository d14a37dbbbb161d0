package respcache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestKey(t *testing.T) {
	base := `{"model":"auto","temperature":0,"messages":[{"role":"user","content":"hi"}],"max_tokens":16}`
	k, err := Key("t1", "chat", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	same := []string{
		`{"max_tokens":16,"messages":[{"content":"hi","role":"user"}],"temperature":0,"model":"auto"}`,
		"{\n  \"model\": \"auto\", \"temperature\": 0,\n \"messages\": [ {\"role\":\"user\",\"content\":\"hi\"} ], \"max_tokens\": 16 }",
		`{"model":"auto","temperature":0,"messages":[{"role":"user","content":"hi"}],"max_tokens":16,"n":1}`,
	}
	for _, b := range same[:2] {
		got, err := Key("t1", "chat", []byte(b))
		if err != nil || got != k {
			t.Errorf("Key(%s) = %s, %v; want the same key as the base", b, got, err)
		}
	}
	different := []struct {
		tenant, endpoint, body string
	}{
		{"t2", "chat", base},
		{"t1", "completions", base},
		{"t1", "chat", same[2]}, // n written out is a different body
		{"t1", "chat", strings.Replace(base, `"hi"`, `"hi "`, 1)},
		{"t1", "chat", strings.Replace(base, `16`, `17`, 1)},
		{"t1", "chat", strings.Replace(base, `"auto"`, `"gemma"`, 1)},
		{"t1", "chat", strings.Replace(base, `}`, `,"stream":true}`, 1)},
		{"t1", "chat", strings.Replace(base, `"max_tokens":16`, `"max_tokens":16,"routebalance":{"preset":"cost"}`, 1)},
		{"t1", "chat", strings.Replace(base, `16`, `16.0`, 1)}, // numbers as written
	}
	seen := map[string]bool{k: true}
	for _, d := range different {
		got, err := Key(d.tenant, d.endpoint, []byte(d.body))
		if err != nil {
			t.Fatalf("Key(%s): %v", d.body, err)
		}
		if seen[got] {
			t.Errorf("Key(%s, %s, %s) collides with another request", d.tenant, d.endpoint, d.body)
		}
		seen[got] = true
	}
	for _, b := range []string{
		`{"model":"auto","messages":[]}`,               // temperature absent: the server default samples
		`{"model":"auto","temperature":0.7}`,           // sampling
		`{"model":"auto","temperature":"0"}`,           // not a number
		`{"model":"auto","temperature":0,"n":2}`,       // several choices
		`{"model":"auto","temperature":0,"best_of":3}`, // legacy several
		`{"model":"auto","temperature":0,"n":"1"}`,     // not a number
	} {
		if _, err := Key("t1", "chat", []byte(b)); !errors.Is(err, ErrNotCacheable) {
			t.Errorf("Key(%s) error = %v, want ErrNotCacheable", b, err)
		}
	}
	for _, b := range []string{``, `[]`, `{"a":1} {"b":2}`, `{"temperature":0`, `"x"`} {
		if _, err := Key("t1", "chat", []byte(b)); err == nil || errors.Is(err, ErrNotCacheable) {
			t.Errorf("Key(%q) error = %v, want a parse error", b, err)
		}
	}
}

func put(c *LRU, key string, e Entry) bool {
	ok, _ := c.Put(context.Background(), key, e)
	return ok
}

func get(c *LRU, key string) (Entry, bool) {
	e, ok, _ := c.Get(context.Background(), key)
	return e, ok
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func entry(body string) Entry {
	return Entry{Status: 200, ContentType: "application/json", Body: []byte(body), Model: "m", PromptTokens: 3, OutputTokens: 4}
}

func TestLRUTTLAndEviction(t *testing.T) {
	clk := &fakeClock{t: time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)}
	c, err := NewLRU(Config{TTL: time.Minute, MaxEntries: 2, MaxBytes: 1000, MaxEntryBytes: 200}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	if !put(c, "a", entry("A")) || !put(c, "b", entry("B")) {
		t.Fatal("Put refused a small entry")
	}
	if e, ok := get(c, "a"); !ok || string(e.Body) != "A" || e.OutputTokens != 4 {
		t.Fatalf("Get(a) = %+v, %v", e, ok)
	}
	put(c, "c", entry("C")) // evicts b: a was used more recently
	if _, ok := get(c, "b"); ok {
		t.Error("b survived eviction although a was used after it")
	}
	if _, ok := get(c, "a"); !ok {
		t.Error("a was evicted although it was the most recently used")
	}
	clk.t = clk.t.Add(59 * time.Second)
	if _, ok := get(c, "c"); !ok {
		t.Error("c expired before its TTL")
	}
	clk.t = clk.t.Add(time.Second)
	if _, ok := get(c, "c"); ok {
		t.Error("c answered at its TTL")
	}
	if put(c, "big", entry(strings.Repeat("x", 201))) {
		t.Error("an entry over MaxEntryBytes was cached")
	}
	if put(c, "err", Entry{Status: 503, Body: []byte("{}")}) {
		t.Error("a non-200 answer was cached")
	}
	// The byte budget evicts too.
	b, _ := NewLRU(Config{TTL: time.Minute, MaxEntries: 100, MaxBytes: 300, MaxEntryBytes: 200}, clk.now)
	put(b, "1", entry(strings.Repeat("x", 150)))
	put(b, "2", entry(strings.Repeat("y", 150)))
	if b.Len() != 1 {
		t.Errorf("Len = %d after two 214-byte entries in a 300-byte budget, want 1", b.Len())
	}
	if _, ok := get(b, "2"); !ok {
		t.Error("the newest entry was evicted")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{TTL: time.Millisecond}, {MaxEntries: -1}, {MaxEntryBytes: 10, MaxBytes: 5}} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%+v: Validate accepted it", c)
		}
	}
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// FuzzKey: any body either fails to parse, is refused as not cacheable,
// or gives a key that ignores key order and whitespace.
func FuzzKey(f *testing.F) {
	for _, s := range []string{
		`{"temperature":0,"messages":[{"role":"user","content":"x"}]}`, `{"temperature":0,"n":1,"a":[1,2.50,{"z":null,"y":true}]}`,
		`{"temperature":0.0}`, `{"temperature":1e-400}`, `{}`, `[]`, `{"temperature":0,"\u00e9":"\ud83d\ude00"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		k, err := Key("t", "chat", body)
		if err != nil {
			return
		}
		if len(k) != 64 {
			t.Fatalf("key %q is not a SHA-256 hex digest", k)
		}
		k2, err := Key("t", "chat", append([]byte(" "), body...))
		if err != nil || k2 != k {
			t.Fatalf("leading space changed the key: %v", err)
		}
		if k3, _ := Key("u", "chat", body); k3 == k {
			t.Fatal("two tenants share a key")
		}
	})
}
