package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/actor"
	"github.com/aegislab/aegis/internal/testing/failpoint"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// pgStores are a test's PostgreSQL schema through pgx and database/sql,
// migrated.
func pgStores(t *testing.T) (*pgxpool.Pool, *sql.DB) {
	ctx, url := t.Context(), testenv.PostgresURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(); pool.Close() })
	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, fence.MigrateSQL(ctx, db))
	return pool, db
}

func sqliteStore(t *testing.T) *sql.DB {
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, fence.MigrateSQL(t.Context(), db))
	return db
}

// inRun is a context as a scheduler's handler has it (internal/actor),
// with a span: what a refusal's record names.
func inRun(ctx context.Context) (context.Context, actor.Writer, string) {
	w := actor.Writer{Node: "node-a", Schedule: "nightly", Fire: time.UnixMilli(1790000000000), Attempt: 2, Token: 3}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(actor.With(ctx, w), sc), w, sc.TraceID().String()
}

// sqlWrite runs check in a transaction of db and commits it.
func sqlWrite(ctx context.Context, t *testing.T, db *sql.DB, check func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	if err := check(tx); err != nil {
		rollback(t, tx)
		return err
	}
	return tx.Commit()
}

// Every form of the fence records its refusals itself, with nothing for
// the caller to call: the refusal log's entry (resource, refused and held
// tokens, the lease's key, the writer a scheduler's context names, the
// trace) and the refusal table's count. Through pgx and database/sql on
// PostgreSQL, and on SQLite.
func TestRefusalsRecordedByTheFence(t *testing.T) {
	t.Parallel()
	lease := func(token aegis.Token, owner string) aegis.Lease {
		return aegis.Lease{Key: "nightly-lease", Token: token, Owner: owner, TTL: time.Second}
	}
	type form struct {
		name   string
		db     func(t *testing.T) (*pgxpool.Pool, *sql.DB) // the pool is nil on SQLite
		write  func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, db *sql.DB, token aegis.Token) error
		key    string // the entry's lease key
		exec   bool   // Exec: no resource name, no held token
		sqlite bool
	}
	pg := pgStores
	lite := func(t *testing.T) (*pgxpool.Pool, *sql.DB) { return nil, sqliteStore(t) }
	execSetup := `CREATE TABLE IF NOT EXISTS export (period text PRIMARY KEY, token bigint NOT NULL)`
	const execUpdate = `UPDATE export SET token = $2 WHERE period = $1 AND token <= $2`
	forms := []form{
		{name: "Check", db: pg, write: func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, _ *sql.DB, token aegis.Token) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, "res", token) })
		}},
		{name: "CheckLease", db: pg, key: "nightly-lease", write: func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, _ *sql.DB, token aegis.Token) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.CheckLease(ctx, tx, "res", lease(token, fmt.Sprint("o", token))) })
		}},
		{name: "Exec in a transaction", db: pg, exec: true, write: func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, _ *sql.DB, token aegis.Token) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := fence.Exec(ctx, tx, execUpdate, "2026-10", int64(token))
				return err
			})
		}},
		{name: "Exec on the pool", db: pg, exec: true, write: func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, _ *sql.DB, token aegis.Token) error {
			_, err := fence.Exec(ctx, pool, execUpdate, "2026-10", int64(token))
			return err
		}},
		{name: "CheckSQL postgres", db: pg, write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			return sqlWrite(ctx, t, db, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "res", token) })
		}},
		{name: "CheckLeaseSQL postgres", db: pg, key: "nightly-lease", write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			return sqlWrite(ctx, t, db, func(tx *sql.Tx) error {
				return fence.CheckLeaseSQL(ctx, tx, "res", lease(token, fmt.Sprint("o", token)))
			})
		}},
		{name: "CheckSQL sqlite", db: lite, sqlite: true, write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			return sqlWrite(ctx, t, db, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "res", token) })
		}},
		{name: "CheckLeaseSQL sqlite", db: lite, sqlite: true, key: "nightly-lease", write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			return sqlWrite(ctx, t, db, func(tx *sql.Tx) error {
				return fence.CheckLeaseSQL(ctx, tx, "res", lease(token, fmt.Sprint("o", token)))
			})
		}},
		{name: "ExecSQL sqlite in a transaction", db: lite, sqlite: true, exec: true, write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			return sqlWrite(ctx, t, db, func(tx *sql.Tx) error {
				_, err := fence.ExecSQL(ctx, tx, execUpdate, "2026-10", int64(token))
				return err
			})
		}},
		{name: "ExecSQL postgres on the db", db: pg, exec: true, write: func(ctx context.Context, t *testing.T, _ *pgxpool.Pool, db *sql.DB, token aegis.Token) error {
			_, err := fence.ExecSQL(ctx, db, execUpdate, "2026-10", int64(token))
			return err
		}},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			pool, db := f.db(t)
			ctx := t.Context()
			if f.exec {
				_, err := db.ExecContext(ctx, execSetup)
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, `INSERT INTO export VALUES ('2026-10', 1)`)
				require.NoError(t, err)
			}
			require.NoError(t, f.write(ctx, t, pool, db, 5))
			before := time.Now()
			rctx, w, traceID := inRun(ctx)
			err := f.write(rctx, t, pool, db, 3)
			require.ErrorIs(t, err, aegis.ErrStale)
			se, ok := errors.AsType[*fence.StaleError](err)
			require.True(t, ok, "a *StaleError: %v", err)
			require.True(t, se.Recorded, "recorded by the fence: %v", se.RecordErr)
			require.NoError(t, se.RecordErr)

			want := fence.RefusalEntry{Resource: "res", Token: 3, Held: 5, Key: f.key, Node: w.Node, Schedule: w.Schedule, Fire: w.Fire, Attempt: w.Attempt, TraceID: traceID}
			if f.exec {
				want.Resource, want.Held = fence.ExecResource(execUpdate), 0 // the token is the run's (actor)
			}
			log, err := fence.RefusalLog(ctx, db, nil, 0)
			require.NoError(t, err)
			require.Len(t, log, 1)
			require.WithinRange(t, log[0].At, before.Add(-time.Millisecond), time.Now().Add(time.Millisecond))
			want.At = log[0].At
			require.Equal(t, want, log[0])
			rs, err := fence.Refusals(ctx, db, 0)
			require.NoError(t, err)
			require.Len(t, rs, 1)
			require.Equal(t, fence.Refusal{Resource: want.Resource, Refusals: 1, LastToken: want.Token, LastHeld: want.Held, Last: rs[0].Last}, rs[0])

			// Filters: by key, by resource, by time.
			byKey, err := fence.RefusalLog(ctx, db, &fence.RefusalFilter{Key: "other"}, 0)
			require.NoError(t, err)
			require.Empty(t, byKey)
			byRes, err := fence.RefusalLog(ctx, db, &fence.RefusalFilter{Key: f.key, Resource: want.Resource, Since: before.Add(-time.Second)}, 0)
			require.NoError(t, err)
			require.Len(t, byRes, 1)
			n, more, err := fence.CountRefusalsSince(ctx, db, before.Add(-time.Second))
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.False(t, more)
			n, more, err = fence.CountRefusalsSince(ctx, db, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.Zero(t, n)
			require.False(t, more)
		})
	}
}

// The refusal log keeps the newest LogKept refusals of each resource; the
// refusal table counts them all.
func TestRefusalLogKeepsTheNewest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqliteStore(t)
	write := func(resource string, token aegis.Token) error {
		return sqlWrite(ctx, t, db, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, resource, token) })
	}
	require.NoError(t, write("busy", 1000))
	require.NoError(t, write("quiet", 1000))
	const n = fence.LogKept + 5
	for i := range n {
		require.ErrorIs(t, write("busy", aegis.Token(i+1)), aegis.ErrStale)
	}
	require.ErrorIs(t, write("quiet", 7), aegis.ErrStale)
	busy, err := fence.RefusalLog(ctx, db, &fence.RefusalFilter{Resource: "busy"}, 1000)
	require.NoError(t, err)
	require.Len(t, busy, fence.LogKept)
	tokens := map[aegis.Token]bool{}
	for _, e := range busy {
		tokens[e.Token] = true
	}
	for i := range 5 {
		require.False(t, tokens[aegis.Token(i+1)], "the oldest refusals are pruned: token %d kept", i+1)
	}
	require.True(t, tokens[n], "the newest is kept")
	quiet, err := fence.RefusalLog(ctx, db, &fence.RefusalFilter{Resource: "quiet"}, 0)
	require.NoError(t, err)
	require.Len(t, quiet, 1, "another resource's refusals are kept apart")
	rs, err := fence.Refusals(ctx, db, 0)
	require.NoError(t, err)
	require.EqualValues(t, n, rs[0].Refusals)
	// The count of a window the pruning cut says it may be short.
	count, more, err := fence.CountRefusalsSince(ctx, db, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, fence.LogKept+1, count, "busy's kept and quiet's")
	require.True(t, more, "busy's older refusals of the hour were pruned")
}

// FuzzExecResource: the resource Exec records a refusal under is a name
// the fence takes (UTF-8, no NUL, at most MaxResource bytes), whatever the
// statement.
func FuzzExecResource(f *testing.F) {
	for _, s := range []string{"UPDATE t SET x = 1 WHERE token = $1", "", "\x00\xff", strings.Repeat("é", 300), "a\n\tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, statement string) {
		r := fence.ExecResource(statement)
		require.True(t, utf8.ValidString(r), "%q", r)
		require.NotContains(t, r, "\x00")
		require.LessOrEqual(t, len(r), fence.MaxResource)
		require.True(t, strings.HasPrefix(r, "exec: "))
	})
}

// A *sql.Tx of a database the process gave the fence no handle of: the
// refusal stands, the StaleError says why it was not recorded, and on
// SQLite the transaction is left to its caller (nothing to record through,
// so no reason to free the write lock).
func TestRefusalNotRecordedWithoutAHandle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "f.db")
	setup, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { setup.Close() })
	require.NoError(t, fence.MigrateSQL(ctx, setup))
	require.NoError(t, sqlWrite(ctx, t, setup, func(tx *sql.Tx) error { return fence.CheckSQL(ctx, tx, "r", 5) }))
	require.NoError(t, setup.Close()) // the fence's only handle of the file, closed

	db, err := sqlitelease.Open(path) // never given to the fence
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	err = fence.CheckSQL(ctx, tx, "r", 4)
	require.ErrorIs(t, err, aegis.ErrStale)
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok)
	require.False(t, se.Recorded)
	require.ErrorIs(t, se.RecordErr, fence.ErrNotRecorded)
	require.ErrorContains(t, err, "no open *sql.DB of this database was given to fence.MigrateSQL or fence.RecordRefusalsOn")
	var held int64
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT token FROM aegis_fence WHERE resource = 'r'`).Scan(&held), "the transaction is still the caller's")
	require.EqualValues(t, 5, held)
	require.NoError(t, tx.Rollback())
}

// At most 4 records are in flight in the process: a fifth refusal, while
// four records wait for their connections, is not recorded, and says
// why, within the record's bound (2s); so are the four, held past theirs;
// and the next refusal is recorded.
// Not parallel: the records' connections are the process's.
func TestRecordsInFlightAreBounded(t *testing.T) {
	ctx := t.Context()
	_, db := pgStores(t)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 8 // five refused transactions open at once
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// One resource each: refusals of one resource wait for each other on
	// its fence row.
	refuse := func(i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, fmt.Sprint("r", i), 1) })
	}
	for i := range 5 {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, fmt.Sprint("r", i), 10) }))
	}
	entered, release := make(chan struct{}, 5), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer fence.HoldRecordPgxDials(entered, release)()
	defer let() // a failed test lets the held records go on
	errs := make(chan error, 4)
	for i := range 4 {
		go func() { errs <- refuse(i) }()
	}
	for range 4 {
		testenv.Recv(t, entered, time.Minute, "a record holding its slot")
	}
	err = refuse(4)
	require.ErrorIs(t, err, aegis.ErrStale, "the refusal stands")
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok, "%v", err)
	require.ErrorIs(t, se.RecordErr, fence.ErrNotRecorded)
	require.ErrorContains(t, err, "4 refusals were being recorded already")
	let()
	// The four held past their own bound (it began before the fifth's):
	// not recorded either, each saying why.
	for range 4 {
		err := testenv.Recv(t, errs, time.Minute, "a held record")
		require.ErrorIs(t, err, aegis.ErrStale)
		se, ok := errors.AsType[*fence.StaleError](err)
		require.True(t, ok, "%v", err)
		require.ErrorIs(t, se.RecordErr, fence.ErrNotRecorded)
		require.ErrorIs(t, se.RecordErr, context.DeadlineExceeded)
	}
	log, err := fence.RefusalLog(ctx, db, nil, 0)
	require.NoError(t, err)
	require.Empty(t, log)
	// The slots are free again.
	err = refuse(0)
	se, ok = errors.AsType[*fence.StaleError](err)
	require.True(t, ok, "%v", err)
	require.True(t, se.Recorded, "%v", se.RecordErr)
}

// Exec given a handle the fence cannot reach the database from (a wrapper
// of a pool): the refusal stands and says why it was not recorded.
func TestExecRefusalThroughAnUnknownHandle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := pgStores(t)
	_, err := pool.Exec(ctx, `CREATE TABLE export (period text PRIMARY KEY, token bigint NOT NULL); INSERT INTO export VALUES ('p', 9)`)
	require.NoError(t, err)
	_, err = fence.Exec(ctx, failpoint.NewPlan().Pgx(pool), `UPDATE export SET token = $2 WHERE period = $1 AND token <= $2`, "p", 8)
	require.ErrorIs(t, err, aegis.ErrStale)
	se, ok := errors.AsType[*fence.StaleError](err)
	require.True(t, ok, "%v", err)
	require.False(t, se.Recorded)
	require.ErrorIs(t, se.RecordErr, fence.ErrNotRecorded)
	require.ErrorContains(t, err, "the fence cannot reach the database from a *failpoint.pgxDB")
}

// The log's readers refuse a nil db as the caller's mistake.
func TestRefusalLogNilDB(t *testing.T) {
	t.Parallel()
	_, err := fence.RefusalLog(t.Context(), nil, nil, 0)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, _, err = fence.CountRefusalsSince(t.Context(), nil, time.Now())
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = fence.LogTable(t.Context(), nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorIs(t, fence.RecordRefusalsOn(t.Context(), nil), aegis.ErrInvalid)
}
