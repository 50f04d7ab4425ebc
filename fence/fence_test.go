package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// checkPG runs fence.Check in its own transaction and commits.
func checkPG(ctx context.Context, pool *pgxpool.Pool, resource string, token aegis.Token) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fence.Check(ctx, tx, resource, token)
	})
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, fence.Migrate(ctx, pool), "Migrate is idempotent")

	require.NoError(t, checkPG(ctx, pool, "r", 5))
	require.NoError(t, checkPG(ctx, pool, "r", 5), "one holder writes many times with one token")
	err := checkPG(ctx, pool, "r", 4)
	require.ErrorIs(t, err, aegis.ErrStale)
	require.ErrorContains(t, err, `resource "r" already accepted a token greater than 4`)
	requireHeld(t, err, "r", 4, 5)
	require.NoError(t, checkPG(ctx, pool, "other", 1), "resources are independent")
	require.NoError(t, checkPG(ctx, pool, "r", 9))
	err = checkPG(ctx, pool, "r", 8)
	require.ErrorIs(t, err, aegis.ErrStale)
	requireHeld(t, err, "r", 8, 9)

	var token int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT token FROM aegis_fence WHERE resource = 'r'").Scan(&token))
	require.EqualValues(t, 9, token)
}

// requireHeld asserts err is a *fence.StaleError that names the resource,
// the token refused and the token the fence table held.
func requireHeld(t *testing.T, err error, resource string, token, held aegis.Token) {
	t.Helper()
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, resource, se.Resource)
	require.Equal(t, token, se.Token, "the token refused")
	require.Equal(t, held, se.Held, "the token the fence held")
}

// TestCheckRace races writers with different tokens on one resource, many
// times. Each writer's business row is inserted after its check, in the
// same transaction; the committed rows, in commit order, must never go back
// in token, and the fence must end at the greatest committed token.
func TestCheckRace(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	_, err := pool.Exec(ctx, `CREATE TABLE ledger (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)

	const rounds, writers = 100, 4
	var stale int
	for round := range rounds {
		resource := fmt.Sprintf("r%d", round)
		var wg sync.WaitGroup
		results := make(chan error, writers)
		for _, token := range rand.Perm(writers) {
			wg.Go(func() {
				results <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := fence.Check(ctx, tx, resource, aegis.Token(token+1)); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO ledger (resource, token) VALUES ($1, $2)", resource, token+1)
					return err
				})
			})
		}
		wg.Wait()
		close(results)
		for err := range results {
			if errors.Is(err, aegis.ErrStale) {
				stale++
				continue
			}
			require.NoError(t, err)
		}
	}
	// seq is drawn after the fence row lock is taken, so it orders commits.
	rows, err := pool.Query(ctx, "SELECT resource, token FROM ledger ORDER BY seq")
	require.NoError(t, err)
	last := map[string]int64{}
	var committed int
	for rows.Next() {
		var r string
		var tok int64
		require.NoError(t, rows.Scan(&r, &tok))
		require.GreaterOrEqual(t, tok, last[r], "resource %s: token %d committed after %d", r, tok, last[r])
		last[r] = tok
		committed++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, rounds*writers, committed+stale)
	require.Positive(t, stale, "the race never produced a stale writer: the test proves nothing")
	for r, tok := range last {
		var fenced int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT token FROM aegis_fence WHERE resource = $1", r).Scan(&fenced))
		require.Equal(t, tok, fenced)
	}
}

// checkSQL runs fence.CheckSQL in its own transaction and commits.
func checkSQL(ctx context.Context, db *sql.DB, resource string, token aegis.Token) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fence.CheckSQL(ctx, tx, resource, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func TestCheckSQL(t *testing.T) {
	t.Parallel()
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	for name, db := range map[string]*sql.DB{"postgres": testenv.PostgresSQL(t), "sqlite": sqlite} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			require.NoError(t, fence.MigrateSQL(ctx, db))
			require.NoError(t, fence.MigrateSQL(ctx, db))
			require.NoError(t, checkSQL(ctx, db, "r", 2))
			require.NoError(t, checkSQL(ctx, db, "r", 2))
			require.ErrorIs(t, checkSQL(ctx, db, "r", 1), aegis.ErrStale)
			require.NoError(t, checkSQL(ctx, db, "r", 3))
			var token int64
			require.NoError(t, db.QueryRowContext(ctx, "SELECT token FROM aegis_fence WHERE resource = 'r'").Scan(&token))
			require.EqualValues(t, 3, token)
		})
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE export (period text PRIMARY KEY, status text NOT NULL, token bigint NOT NULL);
		INSERT INTO export VALUES ('2026-10', 'RUNNING', 8)`)
	require.NoError(t, err)
	const finish = `UPDATE export SET status = 'FINISHED' WHERE period = $1 AND token = $2`
	_, err = fence.Exec(ctx, pool, finish, "2026-10", 7)
	require.ErrorIs(t, err, aegis.ErrStale)
	var status string
	require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM export").Scan(&status))
	require.Equal(t, "RUNNING", status, "the stale finish changed nothing")
	n, err := fence.Exec(ctx, pool, finish, "2026-10", 8)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = fence.Exec(ctx, pool, "UPDATE missing SET x = 1")
	require.Error(t, err)
	require.NotErrorIs(t, err, aegis.ErrStale, "a failing statement is not stale")

	db := testenv.PostgresSQL(t)
	_, err = db.ExecContext(ctx, `CREATE TABLE export (period text PRIMARY KEY, token bigint NOT NULL); INSERT INTO export VALUES ('p', 3)`)
	require.NoError(t, err)
	_, err = fence.ExecSQL(ctx, db, "UPDATE export SET period = period WHERE period = $1 AND token = $2", "p", 2)
	require.ErrorIs(t, err, aegis.ErrStale)
	n, err = fence.ExecSQL(ctx, db, "UPDATE export SET period = period WHERE period = $1 AND token = $2", "p", 3)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// invalidChecks are the resources and tokens no Check may send to the
// store, with what the error must name.
var invalidChecks = []struct {
	name     string
	resource string
	token    aegis.Token
	want     string
}{
	{"token zero", "r", 0, "token 0 is not positive"},
	{"negative token", "r", -7, "token -7 is not positive"},
	{"empty resource", "", 1, "resource is empty"},
	{"resource over the limit", strings.Repeat("r", 100<<10), 1, "resource is 102400 bytes, more than 1024"},
	{"resource one byte over", strings.Repeat("r", fence.MaxResource+1), 1, "resource is 1025 bytes, more than 1024"},
	{"NUL in resource", "a\x00b", 1, `resource "a\x00b" contains NUL`},
	{"resource not UTF-8", "a\xffb", 1, `resource "a\xffb" is not valid UTF-8`},
}

// TestCheckInvalid: each bad argument is refused before any SQL is sent.
// The schema has no fence table, so a statement that reached the server
// would fail with another error, and in PostgreSQL it would abort the
// transaction: the statement after the refusal proves the tx is intact.
func TestCheckInvalid(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	dbs := map[string]*sql.DB{"postgres": testenv.PostgresSQL(t), "sqlite": sqlite}
	for _, tc := range invalidChecks {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				err := fence.Check(ctx, tx, tc.resource, tc.token)
				require.ErrorIs(t, err, aegis.ErrInvalid)
				require.ErrorContains(t, err, tc.want)
				require.Less(t, len(err.Error()), 300, "the error quotes a bounded part of the resource")
				_, err = tx.Exec(ctx, "SELECT 1")
				return err
			})
			require.NoError(t, err, "the refused check sent nothing: the transaction is intact")
			for name, db := range dbs {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				err = fence.CheckSQL(ctx, tx, tc.resource, tc.token)
				require.ErrorIs(t, err, aegis.ErrInvalid, name)
				require.ErrorContains(t, err, tc.want, name)
				_, err = tx.ExecContext(ctx, "SELECT 1")
				require.NoError(t, err, "%s: the transaction is intact", name)
				require.NoError(t, tx.Rollback())
			}
		})
	}
	t.Run("nil tx", func(t *testing.T) {
		require.ErrorIs(t, fence.Check(t.Context(), nil, "r", 1), aegis.ErrInvalid)
		require.ErrorIs(t, fence.CheckSQL(t.Context(), nil, "r", 1), aegis.ErrInvalid)
	})
	t.Run("limit", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, fence.Migrate(ctx, pool))
		require.NoError(t, checkPG(ctx, pool, strings.Repeat("r", fence.MaxResource), 1), "a resource of exactly MaxResource bytes is accepted")
		require.NoError(t, checkPG(ctx, pool, "ünïcode/résumé", 1))
	})
}

// TestCheckMissingTable: the first thing a new user meets without Migrate
// is an error that says to run it, with the driver's error still wrapped.
func TestCheckMissingTable(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	err := checkPG(ctx, pool, "r", 1)
	require.ErrorContains(t, err, "run fence.Migrate")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42P01", pgErr.Code)
	require.NotErrorIs(t, err, aegis.ErrStale)

	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	for name, db := range map[string]*sql.DB{"postgres": testenv.PostgresSQL(t), "sqlite": sqlite} {
		err := checkSQL(ctx, db, "r", 1)
		require.ErrorContains(t, err, "run fence.Migrate", name)
		require.ErrorContains(t, err, "fence.MigrateSQL", name)
	}

	// Another failure is not reported as a missing table.
	require.NoError(t, fence.Migrate(ctx, pool))
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
			return errors.New("division by zero succeeded")
		}
		return fence.Check(ctx, tx, "r", 1) // in an aborted transaction
	})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "run fence.Migrate")
}

func TestExecInvalid(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	for _, q := range []string{"", "  \n\t"} {
		_, err := fence.Exec(ctx, pool, q)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "the statement is empty")
		_, err = fence.ExecSQL(ctx, testenv.PostgresSQL(t), q)
		require.ErrorIs(t, err, aegis.ErrInvalid)
	}
	_, err := fence.Exec(ctx, nil, "SELECT 1")
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = fence.ExecSQL(ctx, nil, "SELECT 1")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}
