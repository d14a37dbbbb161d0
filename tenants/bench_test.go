package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/tenants"
)

// BenchmarkResolveKeyCached measures the hot path of every inference
// request: shape check, SHA-256, cache hit, usage note.
func BenchmarkResolveKeyCached(b *testing.B) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	svc, _ := newService(b, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(b)}, clk)
	tn, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "b@example.com", Password: "bench-password-1", Name: "B"})
	if err != nil {
		b.Fatal(err)
	}
	_, secret, err := svc.CreateKey(ctx, tn.ID, tenants.KeyInput{Name: "k"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.ResolveKey(ctx, secret); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.ResolveKey(ctx, secret); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHashPassword measures one argon2id hash at the production
// parameters (what a signup or login costs).
func BenchmarkHashPassword(b *testing.B) {
	p := tenants.DefaultPasswordParams()
	for i := 0; i < b.N; i++ {
		if _, err := tenants.HashPassword("correct-horse-42", p); err != nil {
			b.Fatal(err)
		}
	}
}
