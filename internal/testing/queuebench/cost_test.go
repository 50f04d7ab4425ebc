package queuebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// ownDatabase returns a pool on a database of the test's own (dropped at
// its end), so that the database's counters are the test's alone.
func ownDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	base := testenv.PostgresURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "aegis_cost_" + hex.EncodeToString(b[:])
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	u.RawQuery = "sslmode=disable"
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = name // Cost waits for the run's exited backends by it
	// Preparing a statement (Parse, Sync) commits a transaction of its
	// own: the simple protocol keeps the counts to the statements run.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestCostCountsExactly runs a known number of statements and commits on
// several connections (some pending in their backends' unflushed counts
// when Stop reads, one closed just before Stop: its backend flushes as it
// exits) and polls to subtract: the cost per job is exact.
func TestCostCountsExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := ownDatabase(t)
	_, err := pool.Exec(ctx, `CREATE TABLE t (n int) WITH (autovacuum_enabled = false)`) // no autoanalyze commit in the window
	require.NoError(t, err)
	// Busy connections: warm all eight, so that the run spreads over them.
	conns := make([]*pgxpool.Conn, 8)
	for i := range conns {
		conns[i], err = pool.Acquire(ctx)
		require.NoError(t, err)
		_, err = conns[i].Exec(ctx, `INSERT INTO t VALUES (0)`) // before the window: not counted
		require.NoError(t, err)
	}
	for _, c := range conns {
		c.Release()
	}

	cost := StartCost(ctx, pool)
	const jobs = 200
	for i := range jobs {
		// One statement and one commit per job, and the job's
		// transaction block: BEGIN, INSERT, COMMIT, three statements
		// (and one more insert below).
		_, err := pool.Exec(ctx, `INSERT INTO t VALUES ($1)`, i)
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, i)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	// A connection taken from the pool and closed: what its backend did
	// is counted when it exits, a moment after the close.
	gone, err := pool.Acquire(ctx)
	require.NoError(t, err)
	conn := gone.Hijack()
	for i := range jobs {
		_, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, i)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close(ctx))
	const polls = 7
	for range polls {
		_, err := pool.Exec(ctx, `SELECT EXISTS (SELECT 1 FROM t)`)
		require.NoError(t, err)
	}
	got, err := cost.Stop(ctx, jobs, polls)
	require.NoError(t, err)

	// The database's commits are every backend's: an autovacuum worker
	// visiting the new database commits in it too, outside this test's
	// hands (3.07 per job once, beside a second suite at load 13). The
	// errors this test is for are whole commits per job: a backend's
	// counts not flushed (fewer), a prepare's transaction per statement
	// (4), the closed connection's backend not waited for (2).
	require.InDelta(t, 3.0, got.Commits, 0.1, "commits per job")
	require.Greater(t, got.WALBytes, 50.0, "WAL bytes per job: two inserted rows")
	var libs string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&libs))
	if libs == "" {
		require.True(t, math.IsNaN(got.Statements), "pg_stat_statements is not loaded: statements must be unknown, got %v", got.Statements)
	} else {
		require.Contains(t, libs, "pg_stat_statements")
		require.Equal(t, 5.0, got.Statements, "statements per job")
	}

	b, err := json.Marshal(UnknownCost)
	require.NoError(t, err)
	require.JSONEq(t, `{"statements_per_job": null, "commits_per_job": null, "wal_bytes_per_job": null}`, string(b))
}
