package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// checkWith runs f.Check in its own transaction and commits.
func checkWith(ctx context.Context, f *fence.Fence, pool *pgxpool.Pool, resource string, token aegis.Token) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, token) })
}

// Two services on one PostgreSQL database and one schema, each with its
// own fence table (one named with its schema, one found on the
// search_path), next to the default tables: one resource name is fenced
// apart in each, each refusal is recorded in its own service's tables,
// and each service's readers see only its own.
func TestTwoFencesShareASchema(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	require.NoError(t, fence.Migrate(ctx, pool))
	billing, err := fence.New(&fence.Config{Table: "billing_fence"})
	require.NoError(t, err)
	mail, err := fence.New(&fence.Config{Table: schema + ".mail_fence"})
	require.NoError(t, err)
	require.Equal(t, "billing_fence", billing.Table())
	for _, f := range []*fence.Fence{billing, mail} {
		require.NoError(t, f.Migrate(ctx, pool))
		require.NoError(t, f.Migrate(ctx, pool), "Migrate is idempotent")
	}

	const res = "invoice/2026-11"
	require.NoError(t, checkWith(ctx, billing, pool, res, 5))
	require.NoError(t, checkWith(ctx, mail, pool, res, 2), "billing's token 5 is not mail's")
	require.NoError(t, checkPG(ctx, pool, res, 1), "nor the default table's")
	err = checkWith(ctx, billing, pool, res, 4)
	requireHeld(t, err, res, 4, 5)
	requireRecorded(t, err)
	err = checkWith(ctx, mail, pool, res, 1)
	requireHeld(t, err, res, 1, 2)
	requireRecorded(t, err)
	_, err = billing.Exec(ctx, pool, `SELECT 1 WHERE false`)
	requireRecorded(t, err)

	lease := aegis.Lease{Key: "k", Owner: "o", Token: 7}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return mail.CheckLease(ctx, tx, "leased", lease) }))
	landed, err := mail.Landed(ctx, pool, "leased", lease)
	require.NoError(t, err)
	require.True(t, landed)
	landed, err = billing.Landed(ctx, pool, "leased", lease)
	require.NoError(t, err)
	require.False(t, landed, "billing's table has no such record")

	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	type want struct {
		resources []fence.Resource
		refused   []aegis.Token // the refusal log's tokens, newest first
	}
	for name, c := range map[string]struct {
		f    *fence.Fence
		want want
	}{
		"billing": {billing, want{[]fence.Resource{{Resource: res, Token: 5}}, []aegis.Token{0, 4}}},
		"mail":    {mail, want{[]fence.Resource{{Resource: res, Token: 2}, {Resource: "leased", Token: 7}}, []aegis.Token{1}}},
		"default": {nil, want{[]fence.Resource{{Resource: res, Token: 1}}, nil}},
	} {
		resources, refusals, log := fence.Resources, fence.Refusals, fence.RefusalLog
		tables, logTable, since := fence.Tables, fence.LogTable, fence.CountRefusalsSince
		if c.f != nil {
			resources, refusals, log = c.f.Resources, c.f.Refusals, c.f.RefusalLog
			tables, logTable, since = c.f.Tables, c.f.LogTable, c.f.CountRefusalsSince
		}
		got, err := resources(ctx, db, 0)
		require.NoError(t, err, name)
		require.Equal(t, c.want.resources, got, name)
		entries, err := log(ctx, db, nil, 0)
		require.NoError(t, err, name)
		var tokens []aegis.Token
		for _, e := range entries {
			tokens = append(tokens, e.Token)
		}
		require.Equal(t, c.want.refused, tokens, "%s's refusal log", name)
		counts, err := refusals(ctx, db, 0)
		require.NoError(t, err, name)
		require.Len(t, counts, len(c.want.refused), "%s's refusal table", name)
		n, _, err := since(ctx, db, time.Now().Add(-time.Hour))
		require.NoError(t, err, name)
		require.EqualValues(t, len(c.want.refused), n, name)
		fenceTable, refusalTable, err := tables(ctx, db)
		require.NoError(t, err, name)
		require.True(t, fenceTable && refusalTable, name)
		ok, err := logTable(ctx, db)
		require.NoError(t, err, name)
		require.True(t, ok, name)
	}

	// An unmigrated table's check says which table is missing.
	other, err := fence.New(&fence.Config{Table: "other_fence"})
	require.NoError(t, err)
	err = checkWith(ctx, other, pool, res, 1)
	require.ErrorContains(t, err, `table other_fence does not exist: run Migrate (pgx) or MigrateSQL (database/sql) of the Fence of table "other_fence"`, "the hint names the Fence's own Migrate, not the package's (which makes the default table)")
	ok, _, err := other.Tables(ctx, db)
	require.NoError(t, err)
	require.False(t, ok)
}

// requireRecorded asserts err is a refusal the fence recorded.
func requireRecorded(t *testing.T, err error) {
	t.Helper()
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok, "a *StaleError: %v", err)
	require.True(t, se.Recorded, "recorded: %v", se.RecordErr)
}

// On SQLite through database/sql: two fence tables in one file, and the
// default one, apart; a schema-qualified table is refused with a clear
// error (SQLite names an index with its schema, not its table).
func TestTwoFencesShareSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	a, err := fence.New(&fence.Config{Table: "a_fence"})
	require.NoError(t, err)
	b, err := fence.New(&fence.Config{Table: "b_fence"})
	require.NoError(t, err)
	require.NoError(t, fence.MigrateSQL(ctx, db))
	require.NoError(t, a.MigrateSQL(ctx, db))
	require.NoError(t, b.MigrateSQL(ctx, db))
	checkIn := func(f *fence.Fence, token aegis.Token) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		if err := f.CheckSQL(ctx, tx, "r", token); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, checkIn(a, 3))
	require.NoError(t, checkIn(b, 1))
	err = checkIn(a, 2)
	requireHeld(t, err, "r", 2, 3)
	requireRecorded(t, err)
	for f, want := range map[*fence.Fence]aegis.Token{a: 3, b: 1} {
		got, err := f.Resources(ctx, db, 0)
		require.NoError(t, err)
		require.Equal(t, []fence.Resource{{Resource: "r", Token: want}}, got, f.Table())
	}
	got, err := fence.Resources(ctx, db, 0)
	require.NoError(t, err)
	require.Empty(t, got, "the default table")
	counts, err := b.Refusals(ctx, db, 0)
	require.NoError(t, err)
	require.Empty(t, counts, "a's refusal is not b's")
	counts, err = a.Refusals(ctx, db, 0)
	require.NoError(t, err)
	require.Len(t, counts, 1)

	q, err := fence.New(&fence.Config{Table: "main.q_fence"})
	require.NoError(t, err)
	err = q.MigrateSQL(ctx, db)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "schema-qualified")
}

// The default tables keep their names and their migrations' key: a
// database migrated by the package's Migrate, as before Config.Table, is
// the database of fence.New(nil).
func TestDefaultFenceTablesUnchanged(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	f, err := fence.New(nil)
	require.NoError(t, err)
	require.Equal(t, fence.DefaultTable, f.Table())
	require.NoError(t, f.Migrate(ctx, pool))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM aegis_migrations WHERE component = 'fence'`).Scan(&n))
	require.Equal(t, 6, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM aegis_migrations WHERE component <> 'fence'`).Scan(&n))
	require.Zero(t, n, "one key")
	var names []string
	rows, err := pool.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace
		AND relname LIKE 'aegis\_fence%' AND relname NOT LIKE '%pkey' ORDER BY 1`)
	require.NoError(t, err)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"aegis_fence", "aegis_fence_refusal", "aegis_fence_refusal_log", "aegis_fence_refusal_log_at", "aegis_fence_refusal_log_resource"}, names)
	require.NoError(t, checkWith(ctx, f, pool, "r", 2))
	require.ErrorIs(t, checkPG(ctx, pool, "r", 1), aegis.ErrStale, "the package's functions and New(nil) are one fence")
}

// Config.Table is checked by New.
func TestFenceConfigTable(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"bad-name", "a.b.c", strings.Repeat("x", 43), "1fence"} {
		_, err := fence.New(&fence.Config{Table: bad})
		require.ErrorIs(t, err, aegis.ErrInvalid, bad)
		require.ErrorContains(t, err, "Config.Table", bad)
	}
	_, err := fence.New(&fence.Config{Table: strings.Repeat("x", 42)})
	require.NoError(t, err)
}
