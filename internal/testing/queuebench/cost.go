package queuebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PerJob is what a run cost the server per job worked: statements run
// (pg_stat_statements' calls in the database, BEGIN and COMMIT included),
// transactions committed (pg_stat_database.xact_commit of the database)
// and WAL bytes written (the distance pg_current_wal_lsn() moved). The
// counters are the whole database's (WAL: the whole server's): they are
// the run's only when nothing else runs on the server. Statements is NaN when unknown
// (pg_stat_statements not loaded, or entries evicted during the run); all
// three are NaN when the run was not measured.
type PerJob struct {
	Statements, Commits, WALBytes float64
}

// UnknownCost is a run not measured.
var UnknownCost = PerJob{math.NaN(), math.NaN(), math.NaN()}

// Cost measures PerJob between StartCost and Stop. A backend keeps its
// counts of commits to itself until it flushes them (at most once a
// second while busy, 10 s after it went idle, or when it exits): Start and
// Stop make every idle connection of the run's pool flush first
// (pg_stat_force_next_flush), and the statements they run for it are
// subtracted, as are the polls the caller reports (Drain's). WAL is read
// from the WAL's position, which has no such delay.
type Cost struct {
	pool       *pgxpool.Pool
	statements string // pg_stat_statements' schema, quoted; empty: not loaded
	start      costCounters
	err        error // the start's: Stop reports it
}

type costCounters struct {
	calls, dealloc int64 // pg_stat_statements: the sum of calls, entries evicted
	commits        int64
	lsn            string
}

// StartCost begins a measure of the run whose connections are pool's: no
// other client of the run may hold one of its connections (Start makes
// them flush their counts). It creates the extension pg_stat_statements
// when the server loads it and the database has it not; without it
// statements are unknown.
func StartCost(ctx context.Context, pool *pgxpool.Pool) *Cost {
	c := &Cost{pool: pool}
	c.statements, c.err = statementsSchema(ctx, pool)
	if c.err == nil {
		c.start, _, c.err = c.snapshot(ctx)
	}
	return c
}

// statementsSchema returns the quoted schema of pg_stat_statements when
// the server loads it, creating the extension when the database has it
// not ("" when it is not loaded or cannot be created).
func statementsSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var libs string
	if err := pool.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&libs); err != nil {
		return "", fmt.Errorf("cost: %w", err)
	}
	if !strings.Contains(libs, "pg_stat_statements") {
		return "", nil
	}
	find := func() (string, error) {
		var schema string
		err := pool.QueryRow(ctx, `SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_stat_statements'`).Scan(&schema)
		return schema, err
	}
	schema, err := find()
	if errors.Is(err, pgx.ErrNoRows) {
		// Two runs at once may both create it: the loser's error is
		// harmless, the extension is there.
		_, _ = pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public`)
		schema, err = find()
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // not ours to create: statements unknown
	}
	if err != nil {
		return "", fmt.Errorf("cost: %w", err)
	}
	return schema, nil // regnamespace::text quotes it when it must be
}

// snapshot waits for the backends of the pool's closed connections to be
// gone (a backend flushes its counts when it exits), makes the pool's idle
// connections flush theirs, then reads the counters; it returns how many
// statements it ran before the read (each a statement and a commit counted
// before it; the read's own are counted after it).
func (c *Cost) snapshot(ctx context.Context) (costCounters, int64, error) {
	conns := c.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, conn := range conns {
			conn.Release()
		}
	}()
	if len(conns) == 0 {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			return costCounters{}, 0, fmt.Errorf("cost: %w", err)
		}
		conns = append(conns, conn)
	}
	// A connection closed on a cancelled query (a claimer stopped
	// mid-claim) leaves a backend that flushes as it exits, a moment
	// later: wait until the run's backends are the pool's.
	ran, err := waitBackends(ctx, conns[0], c.pool.Config().ConnConfig.RuntimeParams["application_name"], int(c.pool.Stat().TotalConns()))
	if err != nil {
		return costCounters{}, 0, err
	}
	for _, conn := range conns {
		// A backend that touched no table since its last flush skips
		// the flush, its commits with it: reading pg_database makes it
		// flush.
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush() FROM pg_database WHERE datname = current_database()`); err != nil {
			return costCounters{}, 0, fmt.Errorf("cost: flush: %w", err)
		}
	}
	calls := `0::bigint, 0::bigint`
	if c.statements != "" {
		calls = fmt.Sprintf(`(SELECT coalesce(sum(calls), 0)::bigint FROM %[1]s.pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
	(SELECT dealloc FROM %[1]s.pg_stat_statements_info)`, c.statements)
	}
	var s costCounters
	err = conns[0].QueryRow(ctx, `SELECT `+calls+`,
	(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
	pg_current_wal_lsn()::text, pg_stat_force_next_flush()`).Scan(&s.calls, &s.dealloc, &s.commits, &s.lsn, nil)
	if err != nil {
		return costCounters{}, 0, fmt.Errorf("cost: %w", err)
	}
	return s, ran + int64(len(conns)), nil
}

// Stop returns the cost per job of the jobs worked since StartCost. polls
// is how many statements the bench itself ran on the run's server in the
// meantime, each in a transaction of its own (Drain's polls), to subtract.
// The run's clients must have stopped (their connections idle or closed).
func (c *Cost) Stop(ctx context.Context, jobs int, polls int64) (PerJob, error) {
	if c.err != nil {
		return UnknownCost, c.err
	}
	end, flushes, err := c.snapshot(ctx)
	if err != nil {
		return UnknownCost, err
	}
	if jobs <= 0 {
		return UnknownCost, nil
	}
	var walBytes float64
	if err := c.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, end.lsn, c.start.lsn).Scan(&walBytes); err != nil {
		return UnknownCost, fmt.Errorf("cost: %w", err)
	}
	// The bench's own statements in the window: the start's read (its
	// call and commit counted after it), the end's flushes and the polls.
	own := 1 + flushes + polls
	n := float64(jobs)
	out := PerJob{
		Statements: math.NaN(),
		Commits:    float64(end.commits-c.start.commits-own) / n,
		WALBytes:   walBytes / n,
	}
	if c.statements != "" && end.dealloc == c.start.dealloc {
		out.Statements = float64(end.calls-c.start.calls-own) / n
	}
	return out, nil
}

// MarshalJSON writes the three figures per job, null when unknown:
// {"statements_per_job": 2.1, "commits_per_job": 0.02, "wal_bytes_per_job": 310.5}.
func (p PerJob) MarshalJSON() ([]byte, error) {
	f := func(v float64) any {
		if math.IsNaN(v) {
			return nil
		}
		return math.Round(v*1000) / 1000
	}
	return json.Marshal(map[string]any{
		"statements_per_job": f(p.Statements),
		"commits_per_job":    f(p.Commits),
		"wal_bytes_per_job":  f(p.WALBytes),
	})
}

// WaitBackendsGone waits (up to 10 s) until no backend of the server has
// the application_name app: a backend flushes its counts as it exits, so
// a run of another process (graphile-worker's) is counted once its
// backends are gone. It returns how many statements it ran on pool, to
// subtract when they ran in a Cost's window.
func WaitBackendsGone(ctx context.Context, pool *pgxpool.Pool, app string) (int64, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("cost: %w", err)
	}
	defer conn.Release()
	return waitBackends(ctx, conn, app, 0)
}

// waitBackends polls until at most n backends have the application_name
// app (none to wait for when app is empty), up to 10 s; it returns how
// many polls it ran.
func waitBackends(ctx context.Context, conn *pgxpool.Conn, app string, n int) (int64, error) {
	if app == "" {
		return 0, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for polls := int64(1); ; polls++ {
		var got int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&got)
		if err != nil {
			return polls, fmt.Errorf("cost: %w", err)
		}
		if got <= n {
			return polls, nil
		}
		if time.Now().After(deadline) {
			return polls, fmt.Errorf("cost: %d backends of %s still run after 10s, want at most %d", got, app, n)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return polls, ctx.Err()
		}
	}
}
