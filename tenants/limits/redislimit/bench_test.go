package redislimit

import (
	"testing"

	"github.com/routebalance/routebalance/internal/redistest"
	"github.com/routebalance/routebalance/tenants/limits"
)

// BenchmarkAdmit measures one admission + release with every limit set on
// both scopes (the release corrects the token charge), in-process and in
// Redis (Redis's TIME, two round trips: the admit script and the release
// script), in the same run so the difference is the added cost per
// admitted request; redis-ping is one bare round trip for scale:
//
//	go test -run x -bench Admit -benchtime 20000x ./tenants/limits/redislimit
func BenchmarkAdmit(b *testing.B) {
	lim := limits.Limits{RPM: 1 << 40, TPM: 1 << 50, MaxConcurrency: 1 << 20}
	b.Run("in-process", func(b *testing.B) {
		l, err := limits.New(limits.Config{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			tk, _, _, ok := l.Admit("t1", lim, "k1", lim, 100)
			if !ok {
				b.Fatal("refused")
			}
			tk.Observe(80)
			tk.Release()
		}
	})
	b.Run("redis", func(b *testing.B) {
		c, prefix := redistest.Client(b)
		l, err := New(Config{Prefix: prefix}, c, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			tk, _, _, ok := l.Admit("t1", lim, "k1", lim, 100)
			if !ok {
				b.Fatal("refused")
			}
			tk.Observe(80)
			tk.Release()
		}
		if s := l.Stats(); s.Fallbacks != 0 {
			b.Fatalf("%d admissions fell back: Redis was not used", s.Fallbacks)
		}
	})
	b.Run("redis-ping", func(b *testing.B) { // one bare round trip, the floor
		c, _ := redistest.Client(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Ping(b.Context()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("redis-admit-only", func(b *testing.B) {
		c, prefix := redistest.Client(b)
		l, err := New(Config{Prefix: prefix}, c, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, _, ok := l.Admit("t1", lim, "k1", lim, 100); !ok {
				b.Fatal("refused")
			}
		}
	})
}
