package failpoint_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/aegislab/aegis/internal/testing/failpoint"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// dialects opens, per dialect, a plain handle and a handle through plan
// on the same database, with a table t (v text).
func dialects(t *testing.T, plan *failpoint.Plan) map[string][2]*sql.DB {
	cfg, err := pgx.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	pgPlain := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = pgPlain.Close() })
	pgFault := plan.DB(stdlib.GetConnector(*cfg), failpoint.PostgresDataError)
	t.Cleanup(func() { _ = pgFault.Close() })

	path := filepath.Join(t.TempDir(), "fp.db")
	litePlain, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = litePlain.Close() })
	liteFault := plan.DB(failpoint.DSN(&sqlite.Driver{}, sqlitelease.DSN(path)), failpoint.SQLiteDataError)
	t.Cleanup(func() { _ = liteFault.Close() })

	out := map[string][2]*sql.DB{"postgres": {pgPlain, pgFault}, "sqlite": {litePlain, liteFault}}
	for _, dbs := range out {
		_, err := dbs[0].Exec(`CREATE TABLE t (v text)`)
		require.NoError(t, err)
	}
	return out
}

func count(t *testing.T, db *sql.DB, v string) int {
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t WHERE v = $1`, v).Scan(&n))
	return n
}

// isData reports a real data error of the server.
func isData(err error) bool {
	var pe *pgconn.PgError
	var se *sqlite.Error
	return (errors.As(err, &pe) && pe.Code == "22021") || (errors.As(err, &se) && se.Code() == sqlite3.SQLITE_TOOBIG)
}

// TestFaults: each fault does what it says to an insert, alone and in a
// transaction (sent as text, as the scheduler does on SQLite, and through
// BeginTx), on both dialects: Before and Data write nothing, After writes
// and reports the reply lost.
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plan := failpoint.NewPlan()
	for name, dbs := range dialects(t, plan) {
		plain, db := dbs[0], dbs[1]
		t.Run(name, func(t *testing.T) {
			for _, f := range failpoint.Faults {
				for _, how := range []string{"autocommit", "text tx", "BeginTx", "query"} {
					v := name + "-" + f.String() + "-" + how
					plan.Arm(v, "INSERT INTO t", f, 1)
					var err error
					switch how {
					case "autocommit":
						_, err = db.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, v)
					case "query":
						var got string
						err = db.QueryRowContext(ctx, `INSERT INTO t VALUES ($1) RETURNING v`, v).Scan(&got)
						if err == nil {
							require.Equal(t, v, got)
						}
					case "text tx":
						err = func() error {
							c, err := db.Conn(ctx)
							require.NoError(t, err)
							defer c.Close()
							begin := "BEGIN"
							if name == "sqlite" {
								begin = "BEGIN IMMEDIATE"
							}
							_, err = c.ExecContext(ctx, begin)
							require.NoError(t, err)
							if _, err := c.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, v); err != nil {
								_, _ = c.ExecContext(ctx, "ROLLBACK")
								return err
							}
							_, err = c.ExecContext(ctx, "COMMIT")
							return err
						}()
					case "BeginTx":
						err = func() error {
							tx, err := db.BeginTx(ctx, nil)
							require.NoError(t, err)
							if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, v); err != nil {
								_ = tx.Rollback()
								return err
							}
							return tx.Commit()
						}()
					}
					require.Equal(t, 1, plan.Fired(v), v)
					var fe *failpoint.Error
					switch f {
					case failpoint.Before:
						require.ErrorAs(t, err, &fe, v)
						require.True(t, fe.SafeToRetry())
						require.Equal(t, 0, count(t, plain, v), "%s: nothing was sent", v)
					case failpoint.After:
						require.ErrorAs(t, err, &fe, v)
						require.False(t, fe.SafeToRetry())
						require.Equal(t, 1, count(t, plain, v), "%s: the write landed", v)
					case failpoint.Data:
						require.True(t, isData(err), "%s: want the server's data error, got %v", v, err)
						require.Equal(t, 0, count(t, plain, v), "%s: nothing was written", v)
					}
					// The next statement, on a fresh or the same connection, runs.
					_, err = db.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, v+"-next")
					require.NoError(t, err, v)
					require.Equal(t, 1, count(t, plain, v+"-next"))
				}
			}
		})
	}
}

// TestPgx: the pgx wrapper on a real pool, alone and in a transaction.
func TestPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE t (v text)`)
	require.NoError(t, err)
	plan := failpoint.NewPlan()
	db := plan.Pgx(pool)
	n := func(v string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM t WHERE v = $1`, v).Scan(&n))
		return n
	}
	for _, f := range failpoint.Faults {
		for _, how := range []string{"exec", "queryrow", "tx"} {
			v := f.String() + "-" + how
			plan.Arm(v, "INSERT INTO t", f, 1)
			switch how {
			case "exec":
				_, err = db.Exec(ctx, `INSERT INTO t VALUES ($1)`, v)
			case "queryrow":
				var got string
				err = db.QueryRow(ctx, `INSERT INTO t VALUES ($1) RETURNING v`, v).Scan(&got)
			case "tx":
				err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, v)
					return err
				})
			}
			require.Equal(t, 1, plan.Fired(v))
			switch f {
			case failpoint.Before:
				require.ErrorAs(t, err, new(*failpoint.Error), v)
				require.True(t, pgconn.SafeToRetry(err), v)
				require.Equal(t, 0, n(v), v)
			case failpoint.After:
				require.ErrorAs(t, err, new(*failpoint.Error), v)
				require.False(t, pgconn.SafeToRetry(err), v)
				require.Equal(t, 1, n(v), v)
			case failpoint.Data:
				require.True(t, isData(err), "%s: %v", v, err)
				require.Equal(t, 0, n(v), v)
			}
		}
	}
}
