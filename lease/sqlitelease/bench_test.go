package sqlitelease_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aegislab/aegis/internal/testing/latency"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// BenchmarkAcquireRelease measures one TryAcquire plus one Release on a
// free key, against two floors in the same run on the same database file:
// the same statements sent raw, each in BEGIN IMMEDIATE (the library's
// overhead), and two read statements (the driver's floor).
//
//	make bench   (or: go test -run '^$' -bench . ./lease/sqlitelease)
func BenchmarkAcquireRelease(b *testing.B) {
	db, err := sqlitelease.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	l, err := sqlitelease.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) { benchAcquireRelease(b, l, db, n) })
	}
}

func benchAcquireRelease(b *testing.B, l *sqlitelease.Locker, db *sql.DB, goroutines int) {
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
		const now = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
		const acquire = `INSERT INTO aegis_lease AS l (key, owner, token, expires_ms, granted_ms)
VALUES ($1, $2, 1, ` + now + ` + $3, ` + now + `)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = l.token + 1,
  expires_ms = excluded.expires_ms, granted_ms = excluded.granted_ms
WHERE l.expires_ms <= ` + now + ` AND l.queue_ms <= ` + now + `
RETURNING token`
		const release = `UPDATE aegis_lease SET expires_ms = 0
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_ms > ` + now
		// Open's DSN makes BeginTx issue BEGIN IMMEDIATE.
		run(b, func(key string) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			var token int64
			if err := tx.QueryRowContext(ctx, acquire, key, "raw", 60000).Scan(&token); err != nil {
				tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, release, key, "raw", token); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("select1", func(b *testing.B) {
		run(b, func(string) error {
			var one int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				return err
			}
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
		})
	})
}
