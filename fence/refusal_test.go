package fence_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/tool/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// A refusal counted after its rollback stays counted, with the tokens; an
// error that is no refusal is not counted; a missing resource is the
// caller's mistake.
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
	// A business table's own check (Exec) names no resource: the caller does.
	_, err := pool.Exec(ctx, `CREATE TABLE export (period text PRIMARY KEY, token bigint NOT NULL); INSERT INTO export VALUES ('2026-10', 9)`)
	require.NoError(t, err)
	_, err = fence.Exec(ctx, pool, `UPDATE export SET token = $2 WHERE period = $1 AND token = $2`, "2026-10", 8)
	require.ErrorIs(t, err, aegis.ErrStale)
	_, cerr := fence.CountRefusal(ctx, pool, "", err)
	require.ErrorIs(t, cerr, aegis.ErrInvalid, "no resource")
	counted, cerr := fence.CountRefusal(ctx, pool, "export/2026-10", err)
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
	require.Len(t, rs, 2)
	require.Equal(t, "ledger/2026-10", rs[0].Resource)
	require.EqualValues(t, 2, rs[0].Refusals)
	require.EqualValues(t, 7, rs[0].LastToken)
	require.EqualValues(t, 9, rs[0].LastHeld)
	require.Equal(t, fence.Refusal{Resource: "export/2026-10", Refusals: 1, Last: rs[1].Last}, rs[1])
	require.False(t, rs[1].Last.IsZero())
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM aegis_fence WHERE resource = 'ledger/2026-10'`).Scan(&token))
	require.EqualValues(t, 9, token, "the counting wrote nothing to the fence")
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
			require.NoError(t, tx.Rollback())
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
