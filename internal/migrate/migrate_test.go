package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

var ms = []migrate.Migration{
	{Version: 1, SQL: "CREATE TABLE IF NOT EXISTS m (id integer PRIMARY KEY)"},
	{Version: 2, SQL: "ALTER TABLE m ADD COLUMN name text"},
}

func TestApply(t *testing.T) {
	t.Parallel()
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "m.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	for name, db := range map[string]*sql.DB{"postgres": testenv.PostgresSQL(t), "sqlite": sqlite} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			d, err := migrate.Detect(ctx, db)
			require.NoError(t, err)
			require.Equal(t, map[string]migrate.Dialect{"postgres": migrate.Postgres, "sqlite": migrate.SQLite}[name], d)
			// Many processes starting at once: every Apply succeeds, and
			// the non-idempotent version 2 runs once.
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() { errs <- migrate.Apply(ctx, db, d, "test", ms) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			_, err = db.ExecContext(ctx, "INSERT INTO m (id, name) VALUES (1, 'x')")
			require.NoError(t, err)
			require.ErrorContains(t, migrate.Apply(ctx, db, d, "test", ms[:1]), "newer than this program's 1")
			require.ErrorContains(t, migrate.Apply(ctx, db, d, "other", ms[1:]), "has version 2")
			require.ErrorContains(t, migrate.Apply(ctx, db, d, "bad", []migrate.Migration{{Version: 1, SQL: "NOT SQL"}}), "migrate bad to version 1")
		})
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{"aegis_lease": `"aegis_lease"`, "billing.lease": `"billing"."lease"`} {
		got, err := migrate.Table("Config.Table", name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "a b", `x"; DROP TABLE y; --`, "a.b.c", "1abc"} {
		_, err := migrate.Table("Config.Table", bad)
		require.ErrorContains(t, err, "Config.Table", bad)
		require.ErrorIs(t, err, aegis.ErrInvalid, bad)
	}
}

// TestRollback: a connection whose transaction was rolled back goes back to
// the pool; one on which ROLLBACK failed (here: no transaction was open) is
// discarded, since nothing proves it is not inside a transaction still.
func TestRollback(t *testing.T) {
	t.Parallel()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "r.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	ctx := t.Context()
	marked := func() bool {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) FROM temp.sqlite_master WHERE name = 'marker'").Scan(&n))
		return n == 1
	}
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "CREATE TEMP TABLE marker (x)") // lives as long as the connection
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	migrate.Rollback(ctx, conn)
	require.NoError(t, conn.Close())
	require.True(t, marked(), "a connection rolled back was not reused")

	conn, err = db.Conn(ctx)
	require.NoError(t, err)
	migrate.Rollback(ctx, conn) // no transaction: ROLLBACK fails
	_ = conn.Close()            // already closed by Rollback
	require.False(t, marked(), "a connection whose ROLLBACK failed went back to the pool")
}

// A read-only server (a hot standby) refuses every DDL, even CREATE TABLE
// IF NOT EXISTS: Apply on an up-to-date schema writes nothing, so its
// replicas open their tables there.
func TestApplyUpToDateOnReadOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	u := testenv.PostgresURL(t)
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	rw := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { rw.Close() })
	require.NoError(t, migrate.Apply(ctx, rw, migrate.Postgres, "test", ms))
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	ro := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { ro.Close() })
	require.NoError(t, migrate.Apply(ctx, ro, migrate.Postgres, "test", ms), "up to date: nothing to write")
	require.ErrorContains(t, migrate.Apply(ctx, ro, migrate.Postgres, "other", ms), "read-only", "a migration to apply fails on a read-only server")
}

// Exists finds a table where the statements that use it would, and not
// one that is missing, on both dialects; a bad name is the caller's
// mistake.
func TestExists(t *testing.T) {
	t.Parallel()
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "e.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	pg := testenv.PostgresSQL(t)
	for name, c := range map[string]struct {
		db *sql.DB
		d  migrate.Dialect
	}{"postgres": {pg, migrate.Postgres}, "sqlite": {sqlite, migrate.SQLite}} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			// Unique: a second suite may run this test on the same server.
			table := fmt.Sprintf("exists_%s_%d", name, time.Now().UnixNano())
			ok, err := migrate.Exists(ctx, c.db, c.d, table)
			require.NoError(t, err)
			require.False(t, ok, "before it is created")
			_, err = c.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (id integer)")
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = c.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
			schema := "main"
			if c.d == migrate.Postgres {
				require.NoError(t, c.db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema))
			}
			for _, n := range []string{table, schema + "." + table} {
				ok, err = migrate.Exists(ctx, c.db, c.d, n)
				require.NoError(t, err)
				require.True(t, ok, "%s, once created", n)
			}
			_, err = migrate.Exists(ctx, c.db, c.d, `x"; DROP TABLE m; --`)
			require.ErrorIs(t, err, aegis.ErrInvalid)
		})
	}
}
