package pglease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/internal/testing/testenv"
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
WHERE l.expires_at <= now() AND l.queue_until <= now()
RETURNING token`
		const release = `UPDATE bench_lease SET expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > now()
RETURNING CASE WHEN queue_until > now() THEN pg_notify('bench', key) END`
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

// BenchmarkHandoff measures the handoff of a contended key: a holder
// releases while a waiter on another pool (another process) is blocked in
// aegis.Acquire, queued and listening. Each handoff is the time from the
// holder's Release call to the waiter's Acquire returning with the key:
// the release, its NOTIFY, and the waiter's grant.
//
//	go test -run '^$' -bench Handoff -benchtime 200x ./lease/pglease
func BenchmarkHandoff(b *testing.B) {
	pool := benchPool(b)
	holder, err := pglease.New(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	other, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer other.Close()
	waiter, err := pglease.New(other, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type result struct {
		lease *aegis.Lease
		err   error
	}
	var rec latency.Recorder
	const key = "handoff"
	b.ResetTimer()
	for range b.N {
		held, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan result, 1)
		go func() {
			l, err := aegis.Acquire(ctx, waiter, key, time.Minute)
			got <- result{l, err}
		}()
		// The waiter subscribes before it enters the queue: queued, it
		// listens.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var queued bool
			if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM aegis_lease_waiter WHERE key = $1)", key).Scan(&queued); err != nil {
				b.Fatal(err)
			}
			if queued {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the waiter did not enter the queue within 10s")
			}
		}
		start := time.Now()
		if err := holder.Release(ctx, held); err != nil {
			b.Fatal(err)
		}
		select {
		case r := <-got:
			rec.Add(time.Since(start))
			if r.err != nil {
				b.Fatal(r.err)
			}
			if err := waiter.Release(ctx, r.lease); err != nil {
				b.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			b.Fatal("the waiter did not get the key within 10s of its release")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rec.Percentile(50))/1e3, "handoff-p50-µs")
	b.ReportMetric(float64(rec.Percentile(99))/1e3, "handoff-p99-µs")
}
