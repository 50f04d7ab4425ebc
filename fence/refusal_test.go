package fence_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// A refusal is counted by the fence itself, with the tokens, and stays
// counted after its rollback; CountRefusal after it, as callers from
// before call it, reports it counted and counts it no second time. An error
// that is no refusal is not counted; a bare aegis.ErrStale without a
// resource is the caller's mistake.
func TestCountRefusal(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, checkPG(ctx, pool, "ledger/2026-10", 9))
	for range 2 {
		err := checkPG(ctx, pool, "ledger/2026-10", 7)
		require.ErrorIs(t, err, aegis.ErrStale)
		counted, cerr := fence.CountRefusal(ctx, pool, "", err)
		require.NoError(t, cerr)
		require.True(t, counted)
	}
	// A business table's own check (Exec) names no resource: the fence
	// records it under its statement's.
	_, err := pool.Exec(ctx, `CREATE TABLE export (period text PRIMARY KEY, token bigint NOT NULL); INSERT INTO export VALUES ('2026-10', 9)`)
	require.NoError(t, err)
	const update = `UPDATE export SET token = $2
		WHERE period = $1 AND token = $2`
	_, err = fence.Exec(ctx, pool, update, "2026-10", 8)
	require.ErrorIs(t, err, aegis.ErrStale)
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok, "Exec's refusal is a *StaleError: %v", err)
	require.True(t, se.Recorded, "recorded: %v", se.RecordErr)
	require.Equal(t, "exec: UPDATE export SET token = $2 WHERE period = $1 AND token = $2", se.Resource)
	counted, cerr := fence.CountRefusal(ctx, pool, "", err)
	require.NoError(t, cerr)
	require.True(t, counted)
	_, cerr = fence.CountRefusal(ctx, pool, "", aegis.ErrStale)
	require.ErrorIs(t, cerr, aegis.ErrInvalid, "no resource")
	// A bare aegis.ErrStale (a caller's own check) is counted as before.
	counted, cerr = fence.CountRefusal(ctx, pool, "export/2026-10", aegis.ErrStale)
	require.NoError(t, cerr)
	require.True(t, counted)

	counted, cerr = fence.CountRefusal(ctx, pool, "ledger/2026-10", errors.New("connection reset"))
	require.NoError(t, cerr)
	require.False(t, counted, "not a refusal")
	counted, cerr = fence.CountRefusal(ctx, pool, "ledger/2026-10", nil)
	require.NoError(t, cerr)
	require.False(t, counted)
	_, cerr = fence.CountRefusal(ctx, nil, "x", aegis.ErrStale)
	require.ErrorIs(t, cerr, aegis.ErrInvalid)

	sdb := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { sdb.Close() })
	rs, err := fence.Refusals(ctx, sdb, 0)
	require.NoError(t, err)
	require.Len(t, rs, 3)
	require.Equal(t, "ledger/2026-10", rs[0].Resource)
	require.EqualValues(t, 2, rs[0].Refusals, "two refusals, each counted once: by the fence, not again by CountRefusal")
	require.EqualValues(t, 7, rs[0].LastToken)
	require.EqualValues(t, 9, rs[0].LastHeld)
	require.Equal(t, fence.Refusal{Resource: "exec: UPDATE export SET token = $2 WHERE period = $1 AND token = $2", Refusals: 1, Last: rs[1].Last}, rs[1], "outside a run, Exec knows no token")
	require.Equal(t, fence.Refusal{Resource: "export/2026-10", Refusals: 1, Last: rs[2].Last}, rs[2])
	require.False(t, rs[2].Last.IsZero())
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM aegis_fence WHERE resource = 'ledger/2026-10'`).Scan(&token))
	require.EqualValues(t, 9, token, "the counting wrote nothing to the fence")
}

// rollback rolls a refused transaction back: on SQLite the fence rolled it
// back already (to record the refusal), and its Rollback says so.
func rollback(t *testing.T, tx *sql.Tx) {
	t.Helper()
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		require.NoError(t, err)
	}
}

// The same on SQLite, through database/sql.
func TestCountRefusalSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "f.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, fence.MigrateSQL(ctx, db))
	check := func(token aegis.Token) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		if err := fence.CheckSQL(ctx, tx, "r", token); err != nil {
			rollback(t, tx)
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, check(5))
	err = check(4)
	require.ErrorIs(t, err, aegis.ErrStale)
	counted, cerr := fence.CountRefusalSQL(ctx, db, "", err)
	require.NoError(t, cerr)
	require.True(t, counted)
	rs, err := fence.Refusals(ctx, db, 10)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.EqualValues(t, 1, rs[0].Refusals)
	require.EqualValues(t, 4, rs[0].LastToken)
	require.EqualValues(t, 5, rs[0].LastHeld)
}
