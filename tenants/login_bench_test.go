package tenants_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

// BenchmarkLoginTiming: issue 16 item 5. An unknown email and a wrong
// password, at the production argon2id parameters, alternated ABBA so
// drift hits both alike. Reported: the median of each path, their
// difference, and the noise — the difference between the medians of the
// two halves (odd and even samples) of the wrong-password path, i.e. what
// the same path differs from itself. Run:
//
//	go test -run X -bench LoginTiming -benchtime 60x ./tenants/
func BenchmarkLoginTiming(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchLoginTiming(b, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(b)}) })
	b.Run("postgres", func(b *testing.B) { benchLoginTiming(b, dbtest.Engine{Name: "postgres", Pool: dbtest.Postgres(b)}) })
}

func benchLoginTiming(b *testing.B, e dbtest.Engine) {
	{
		ctx := context.Background()
		var st *sqlstore.Store
		if e.Pool != nil {
			st = sqlstore.NewPostgres(e.Pool)
		} else {
			st = sqlstore.NewSQLite(e.SQLite)
		}
		sess, _ := tenants.NewSessions(tenants.DefaultSessionConfig([]byte(strings.Repeat("s", 32))), nil)
		sealer, _ := tenants.NewSealer([]byte(strings.Repeat("e", 32)))
		cfg := tenants.DefaultConfig() // production argon2id parameters
		cfg.LoginMaxFailures, cfg.LoginMaxFailuresPerIP = 1<<30, 1<<30
		svc, err := tenants.NewService(cfg, tenants.Deps{Store: st, Sessions: sess, Sealer: sealer, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := svc.Signup(ctx, tenants.SignupInput{Email: "known@example.com", Password: "analytical-engine-1", Name: "K"}); err != nil {
			b.Fatal(err)
		}
		timed := func(email string) time.Duration {
			start := time.Now()
			_, err := svc.Login(ctx, email, "wrong-password-7")
			d := time.Since(start)
			if !errors.Is(err, tenants.ErrUnauthorized) {
				b.Fatalf("login %s: %v", email, err)
			}
			return d
		}
		var unknown, wrong []time.Duration
		b.ResetTimer()
		for i := range b.N {
			if i%2 == 0 {
				unknown = append(unknown, timed("nobody@example.com"))
				wrong = append(wrong, timed("known@example.com"))
			} else {
				wrong = append(wrong, timed("known@example.com"))
				unknown = append(unknown, timed("nobody@example.com"))
			}
		}
		b.StopTimer()
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		mu, mw := median(unknown), median(wrong)
		var even, odd []time.Duration
		for i, d := range wrong {
			if i%2 == 0 {
				even = append(even, d)
			} else {
				odd = append(odd, d)
			}
		}
		b.ReportMetric(ms(mu), "unknown-ms")
		b.ReportMetric(ms(mw), "wrong-ms")
		b.ReportMetric(ms(mu-mw), "diff-ms")
		b.ReportMetric(ms(median(even)-median(odd)), "noise-ms")
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
