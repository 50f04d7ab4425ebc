package pglease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis/internal/latency"
	"github.com/aegislab/aegis/internal/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

// BenchmarkAcquireRelease measures one TryAcquire plus one Release on a
// free key, against two floors on the same server in the same run: the same
// two statements sent raw through pgx (the library's overhead), and two
// round trips of SELECT 1 (the network and protocol floor).
//
//	make bench   (or: go test -run '^$' -bench . ./lease/pglease)
func BenchmarkAcquireRelease(b *testing.B) {
	pool := benchPool(b)
	l, err := pglease.New(pool, &pglease.Config{Table: "bench_lease"})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) { benchAcquireRelease(b, l, pool, n) })
	}
}

func benchAcquireRelease(b *testing.B, l *pglease.Locker, pool *pgxpool.Pool, goroutines int) {
	ctx := context.Background()
	run := func(b *testing.B, op func(key string) error) {
		latency.Bench(b, goroutines, func(g int) error { return op(fmt.Sprintf("bench/%d", g)) })
	}
	b.Run("aegis", func(b *testing.B) {
		run(b, func(key string) error {
			lease, err := l.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				return err
			}
			return l.Release(ctx, lease)
		})
	})
	b.Run("raw-sql", func(b *testing.B) {
		// The statements pglease sends, without the library around them.
		const acquire = `INSERT INTO bench_lease AS l (key, owner, token, expires_at, granted_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond', now())
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = l.token + 1,
  expires_at = excluded.expires_at, granted_at = excluded.granted_at
WHERE l.expires_at <= now() RETURNING token`
		const release = `UPDATE bench_lease SET expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > now()`
		run(b, func(key string) error {
			var token int64
			if err := pool.QueryRow(ctx, acquire, key, "raw", int64(time.Minute/time.Microsecond)).Scan(&token); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, release, key, "raw", token)
			return err
		})
	})
	b.Run("select1", func(b *testing.B) {
		run(b, func(string) error {
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
			return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
		})
	})
}

// benchPool is a pool on a fresh schema, so each run starts from an empty
// lease table.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return testenv.Postgres(b)
}
