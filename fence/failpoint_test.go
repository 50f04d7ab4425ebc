package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/failpoint"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// The fence's failpoint table: its statements made to fail in turn, three
// ways (internal/testing/failpoint), through pgx and database/sql on
// PostgreSQL and through database/sql on SQLite, in the caller's
// transaction with a business write. Each row asserts that the business
// write is applied exactly once by a caller that does what the row says,
// and that a stale token is still refused; its result is the row of
// docs/failpoints.md.

// fpTarget is the fence reached through a plan: write runs one
// transaction of CheckLease and a ledger insert, landed is fence.Landed.
type fpTarget struct {
	name   string
	write  func(ctx context.Context, resource string, l aegis.Lease) error
	landed func(ctx context.Context, resource string, l aegis.Lease) (bool, error)
	rows   func(ctx context.Context, resource string) int
}

func fpTargets(t *testing.T, plan *failpoint.Plan) []fpTarget {
	ctx := t.Context()
	pool := testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	_, err := pool.Exec(ctx, `CREATE TABLE ledger (resource text, token bigint)`)
	require.NoError(t, err)
	pdb := plan.Pgx(pool)
	pgxT := fpTarget{
		name: "pgx",
		write: func(ctx context.Context, resource string, l aegis.Lease) error {
			return pgx.BeginFunc(ctx, pdb, func(tx pgx.Tx) error {
				if err := fence.CheckLease(ctx, tx, resource, l); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1, $2)`, resource, int64(l.Token))
				return err
			})
		},
		landed: func(ctx context.Context, resource string, l aegis.Lease) (bool, error) {
			return fence.Landed(ctx, pool, resource, l)
		},
		rows: func(ctx context.Context, resource string) int {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE resource = $1`, resource).Scan(&n))
			return n
		},
	}
	cfg, err := pgx.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	pgPlain := stdlib.OpenDB(*cfg)
	pgFaulty := plan.DB(stdlib.GetConnector(*cfg), failpoint.PostgresDataError)
	path := filepath.Join(t.TempDir(), "fence.db")
	litePlain, err := sqlitelease.Open(path)
	require.NoError(t, err)
	liteFaulty := plan.DB(failpoint.DSN(&sqlite.Driver{}, sqlitelease.DSN(path)), failpoint.SQLiteDataError)
	t.Cleanup(func() { pgFaulty.Close(); pgPlain.Close(); liteFaulty.Close(); litePlain.Close() })
	return []fpTarget{pgxT, sqlFPTarget(t, "postgres sql", pgPlain, pgFaulty), sqlFPTarget(t, "sqlite", litePlain, liteFaulty)}
}

func sqlFPTarget(t *testing.T, name string, plain, faulty *sql.DB) fpTarget {
	require.NoError(t, fence.MigrateSQL(t.Context(), plain))
	_, err := plain.Exec(`CREATE TABLE ledger (resource text, token bigint)`)
	require.NoError(t, err)
	return fpTarget{
		name: name,
		write: func(ctx context.Context, resource string, l aegis.Lease) error {
			tx, err := faulty.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fence.CheckLeaseSQL(ctx, tx, resource, l); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO ledger VALUES ($1, $2)`, resource, int64(l.Token)); err != nil {
				return err
			}
			return tx.Commit()
		},
		landed: func(ctx context.Context, resource string, l aegis.Lease) (bool, error) {
			return fence.LandedSQL(ctx, plain, resource, l)
		},
		rows: func(ctx context.Context, resource string) int {
			var n int
			require.NoError(t, plain.QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE resource = $1`, resource).Scan(&n))
			return n
		},
	}
}

var fenceFPResults = map[string]map[failpoint.Fault]string{
	"check (CheckLease's upsert, in the caller's transaction)": {
		failpoint.Before: "CheckLease fails, not with aegis.ErrStale; the caller rolls back; fence.Landed says false; writing again lands once",
		failpoint.After:  "the transaction's COMMIT lands and its reply is lost; fence.Landed says true: the caller writes nothing more, once (writing again would be accepted, the same holder's token, and apply it twice)",
		failpoint.Data:   "CheckLease fails with the server's refusal, not aegis.ErrStale; the caller rolls back; fence.Landed says false; writing again lands once",
	},
	"why a check was refused (the read after a refusal)": {
		failpoint.Before: "the check is still refused with aegis.ErrStale, its reason saying why could not be read; nothing is written",
		failpoint.After:  "the check is refused with aegis.ErrStale and its reason (the read ran; the caller rolls back, so no commit is lost); nothing is written",
		failpoint.Data:   "the check is still refused with aegis.ErrStale, its reason saying why could not be read; nothing is written",
	},
}

// write is what a caller of the fence does: write; when the commit's
// reply was lost, ask fence.Landed before writing again.
func (tg fpTarget) writeOnce(t *testing.T, resource string, l aegis.Lease) {
	ctx := t.Context()
	err := tg.write(ctx, resource, l)
	if err == nil {
		return
	}
	require.NotErrorIs(t, err, aegis.ErrStale, "a failed write is no stale token")
	ok, lerr := tg.landed(ctx, resource, l)
	require.NoError(t, lerr)
	var fe *failpoint.Error
	require.Equal(t, errors.As(err, &fe) && fe.Fault == failpoint.After, ok, "fence.Landed says whether the transaction committed: %v", err)
	if !ok {
		require.NoError(t, tg.write(ctx, resource, l), "writing again")
	}
}

func TestFailpoints(t *testing.T) {
	t.Parallel()
	for _, f := range failpoint.Faults {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			plan := failpoint.NewPlan()
			for _, tg := range fpTargets(t, plan) {
				t.Run(tg.name, func(t *testing.T) {
					a := aegis.Lease{Key: "k", Token: 5, Owner: ownerA}
					plan.Arm("check", "INSERT INTO aegis_fence AS f", f, 1)
					tg.writeOnce(t, "invoice", a)
					require.Equal(t, 1, plan.Fired("check"))
					require.Equal(t, 1, tg.rows(ctx, "invoice"), "the business write applied once")
					ok, err := tg.landed(ctx, "invoice", a)
					require.NoError(t, err)
					require.True(t, ok)
					if f == failpoint.After {
						// What Landed prevents: the same holder writing again is let through.
						require.NoError(t, tg.write(ctx, "invoice", a))
						require.Equal(t, 2, tg.rows(ctx, "invoice"), "the fence does not tell a retry from a second write")
					}

					// A stale token is refused whatever happens to the read of why.
					plan.Arm("why", "SELECT token, owner_hash FROM aegis_fence WHERE resource = $1", f, 1)
					before := tg.rows(ctx, "invoice")
					err = tg.write(ctx, "invoice", aegis.Lease{Key: "k", Token: 4, Owner: ownerB})
					require.ErrorIs(t, err, aegis.ErrStale)
					require.Equal(t, 1, plan.Fired("why"), "the read of why ran")
					if f != failpoint.After {
						require.Contains(t, err.Error(), "reading why")
					} else {
						require.Contains(t, err.Error(), "already accepted a token greater than 4")
					}
					require.Equal(t, before, tg.rows(ctx, "invoice"), "nothing written")
					plan.Disarm()
				})
			}
		})
	}
}

// TestLanded: fence.Landed reads the record of a lease's check: true for
// the token and owner that committed, false for another owner of the same
// token, another token, a bare record, a resource never checked.
func TestLanded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tg := range fpTargets(t, failpoint.NewPlan()) {
		t.Run(tg.name, func(t *testing.T) {
			a := aegis.Lease{Key: "k", Token: 5, Owner: ownerA}
			ok, err := tg.landed(ctx, "never", a)
			require.NoError(t, err)
			require.False(t, ok, "a resource never checked")
			require.NoError(t, tg.write(ctx, "r", a))
			for _, tc := range []struct {
				l    aegis.Lease
				want bool
			}{
				{a, true},
				{aegis.Lease{Key: "k", Token: 5, Owner: ownerB}, false},
				{aegis.Lease{Key: "k", Token: 4, Owner: ownerA}, false},
				{aegis.Lease{Key: "k", Token: 5}, false}, // bare: the record has an owner
			} {
				ok, err := tg.landed(ctx, "r", tc.l)
				require.NoError(t, err)
				require.Equal(t, tc.want, ok, "%+v", tc.l)
			}
			_, err = tg.landed(ctx, "r", aegis.Lease{Token: 0})
			require.ErrorIs(t, err, aegis.ErrInvalid)
			_, err = tg.landed(ctx, "", a)
			require.ErrorIs(t, err, aegis.ErrInvalid)
		})
	}
}

// TestFailpointTableInDocs: docs/failpoints.md lists the fence's rows.
func TestFailpointTableInDocs(t *testing.T) {
	t.Parallel()
	var want []string
	for _, stmt := range []string{"check (CheckLease's upsert, in the caller's transaction)", "why a check was refused (the read after a refusal)"} {
		for _, f := range failpoint.Faults {
			want = append(want, failpoint.Row("fence", stmt, f, fenceFPResults[stmt][f]))
		}
	}
	for _, f := range failpoint.Faults {
		want = append(want, failpoint.Row("fence", "the record of a refusal (the fence's own write, on another connection)", f, recordFPResults[f]))
	}
	failpoint.CheckDoc(t, "../docs/failpoints.md", "fence", want)
}

// recordFPResults are the rows of the fence's own write of a refusal.
var recordFPResults = map[failpoint.Fault]string{
	failpoint.Before: "the write is still refused with aegis.ErrStale; StaleError.RecordErr says the record failed and why; nothing is recorded; CountRefusal counts it",
	failpoint.After:  "the record commits and its reply is lost; the fence reads its row back by its id: Recorded, counted once (CountRefusal counts nothing more)",
	failpoint.Data:   "the write is still refused with aegis.ErrStale; StaleError.RecordErr carries the store's refusal; nothing is recorded; CountRefusal counts it",
}

// TestRecordFailpoints: the record of a refusal, the fence's own write on
// another connection, made to fail three ways through pgx and database/sql
// on PostgreSQL and on SQLite: the refusal stands, and the StaleError says
// whether the refusal was recorded, or why not. Not parallel: the pgx
// records' connections go through the plan for its length.
func TestRecordFailpoints(t *testing.T) {
	for _, f := range failpoint.Faults {
		t.Run(f.String(), func(t *testing.T) {
			plan := failpoint.NewPlan()
			defer fence.RecordPgxThrough(plan)()
			ctx := t.Context()
			pool, pgDB := pgStores(t)
			lite := sqliteStore(t)
			pgCfg, err := pgx.ParseConfig(testenv.PostgresURL(t))
			require.NoError(t, err)
			pgFaulty := plan.DB(stdlib.GetConnector(*pgCfg), failpoint.PostgresDataError)
			var file string
			require.NoError(t, lite.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file))
			liteFaulty := plan.DB(failpoint.DSN(&sqlite.Driver{}, sqlitelease.DSN(file)), failpoint.SQLiteDataError)
			t.Cleanup(func() { pgFaulty.Close(); liteFaulty.Close() })
			// The records of database/sql go through the faulty handles:
			// the newest of their databases the fence was given.
			require.NoError(t, fence.RecordRefusalsOn(ctx, pgFaulty))
			require.NoError(t, fence.RecordRefusalsOn(ctx, liteFaulty))

			for _, tg := range []struct {
				name  string
				db    *sql.DB
				res   string
				write func(token aegis.Token) error
			}{
				{"pgx", pgDB, "rec-pgx", func(token aegis.Token) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "rec-pgx", token) })
				}},
				{"postgres sql", pgDB, "rec-sql", func(token aegis.Token) error {
					return sqlWrite(ctx, t, pgDB, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "rec-sql", token) })
				}},
				{"sqlite", lite, "rec-sqlite", func(token aegis.Token) error {
					return sqlWrite(ctx, t, lite, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "rec-sqlite", token) })
				}},
			} {
				t.Run(tg.name, func(t *testing.T) {
					require.NoError(t, tg.write(5))
					plan.Arm("record", "INSERT INTO aegis_fence_refusal_log", f, 1)
					err := tg.write(4)
					require.Equal(t, 1, plan.Fired("record"), "the record was made to fail")
					require.ErrorIs(t, err, aegis.ErrStale, "the refusal stands")
					se, ok := errors.AsType[*fence.StaleError](err)
					require.True(t, ok)
					require.EqualValues(t, 5, se.Held)
					log, lerr := fence.RefusalLog(ctx, tg.db, &fence.RefusalFilter{Resource: tg.res}, 0)
					require.NoError(t, lerr)
					counted, cerr := fence.CountRefusalSQL(ctx, tg.db, "", err)
					require.NoError(t, cerr)
					require.True(t, counted)
					rs, rerr := fence.Refusals(ctx, tg.db, 0)
					require.NoError(t, rerr)
					i := slices.IndexFunc(rs, func(r fence.Refusal) bool { return r.Resource == tg.res })
					require.GreaterOrEqual(t, i, 0, "counted: %v", rs)
					require.EqualValues(t, 1, rs[i].Refusals, "counted once, by the fence or by CountRefusal")
					if f == failpoint.After {
						require.True(t, se.Recorded, "read back: %v", se.RecordErr)
						require.NoError(t, se.RecordErr)
						require.Len(t, log, 1)
					} else {
						require.False(t, se.Recorded)
						require.ErrorIs(t, se.RecordErr, fence.ErrNotRecorded)
						require.Contains(t, err.Error(), "refusal not recorded", "the error says so")
						require.Empty(t, log, "nothing recorded")
					}
					plan.Disarm()
				})
			}
		})
	}
}
