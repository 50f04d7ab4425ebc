// Package historytest makes, with real schedulers, the attempt history and
// the missed ticks an operator looks for in the console and in `aegis
// inspect`: a tick that ran twice and a schedule no replica runs. It
// imports package testing: only tests import it.
package historytest

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// startScheduler starts a run-key scheduler on its own connection db with
// jobs, and returns its stop, which waits (bounded) and runs once; the
// test's end calls it too.
func startScheduler(t *testing.T, db *sql.DB, cfg schedule.Config, jobs ...schedule.Job) (*schedule.Scheduler, func()) {
	t.Helper()
	st, err := schedule.NewStore(t.Context(), db, nil)
	require.NoError(t, err)
	cfg.Store = st
	s, err := schedule.New(&cfg)
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, s.Add(j))
	}
	require.NoError(t, s.Start(context.Background()))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			done := make(chan struct{})
			go func() { s.Stop(); close(done) }()
			testenv.Recv(t, done, 30*time.Second, cfg.Node+" to stop")
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// AdvanceWhenWaiting advances clock by d once a scheduler waits on it; the
// test fails when none waits within 10 s.
func AdvanceWhenWaiting(t testing.TB, clock *schedule.ManualClock, d time.Duration) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		n, changed := clock.Waiters()
		if n > 0 {
			clock.Advance(d)
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("no scheduler waited on the clock within 10s")
		}
	}
}

// History is what Make leaves on record, as schedule.RunReader reads it.
type History struct {
	Successor, Holder schedule.Attempt      // nightly's tick's two attempts
	Missed            []schedule.MissedTick // orphan's, newest first
	// AllMissed counts every schedule's missed ticks: the catalog's other
	// schedules without a handler too, when the test ran long enough.
	AllMissed int
}

// Make runs real schedulers, each on a connection of its own from open,
// until the store has the attempt history and the missed ticks an
// operator looks for, then stops them (what the store holds stays as it
// is). Every wait is bounded; the schedulers stop by the test's end.
//
//   - "nightly" (code, every hour on a manual clock): its holder stops past
//     its run row's expiry (no keep-alive, as a SIGSTOPped process renews
//     nothing), a successor reclaims the tick and succeeds, then the holder
//     runs to its end: two attempts of one tick, the holder's refused (the
//     tick ran twice), the successor's succeeded.
//   - "orphan" (catalog, every second, handler "absent" that no replica
//     has): missed at each tick, cause unbound, recorded by "watcher".
func Make(t *testing.T, open func() *sql.DB) History {
	t.Helper()
	ctx := t.Context()
	wdb := open()
	cat, err := schedule.NewCatalog(ctx, wdb, nil)
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "orphan", Every: time.Second, Handler: "absent"})
	require.NoError(t, err)
	watcher, stopWatcher := startScheduler(t, wdb, schedule.Config{Node: "watcher", Catalog: cat, ReapInterval: 50 * time.Millisecond})
	testenv.Recv(t, watcher.Ready(), 20*time.Second, "the watcher to read the catalog")

	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	resume := make(chan struct{})
	var resumeOnce sync.Once
	release := func() { resumeOnce.Do(func() { close(resume) }) }
	started := make(chan struct{}, 1)
	_, stopHolder := startScheduler(t, open(), schedule.Config{Node: "holder", Clock: clock, ReapInterval: time.Hour}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true,
		// It ignores its context, as a stopped process would; bounded.
		Run: func(context.Context) error {
			started <- struct{}{}
			select {
			case <-resume:
			case <-time.After(time.Minute):
			}
			return nil
		},
	})
	t.Cleanup(release) // before the holder's stop: cleanups run last first
	AdvanceWhenWaiting(t, clock, time.Hour)
	testenv.Recv(t, started, 20*time.Second, "the holder's run")
	_, stopSuccessor := startScheduler(t, open(), schedule.Config{Node: "successor", Clock: clock, ReapInterval: 20 * time.Millisecond}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 5 * time.Second, Run: func(context.Context) error { return nil },
	})

	reader, err := schedule.NewRunReader(ctx, wdb, nil)
	require.NoError(t, err)
	var as []schedule.Attempt
	require.Eventually(t, func() bool {
		as, err = reader.Attempts(ctx, "nightly", 10)
		return err == nil && len(as) == 2 && as[0].Outcome == "succeeded"
	}, 20*time.Second, 10*time.Millisecond, "the successor reclaims nightly's tick and succeeds")
	release()
	require.Eventually(t, func() bool {
		as, err = reader.Attempts(ctx, "nightly", 10)
		return err == nil && len(as) == 2 && as[1].Outcome == "refused"
	}, 20*time.Second, 10*time.Millisecond, "the holder runs to its end, refused")
	stopHolder()
	stopSuccessor()
	require.Equal(t, "successor", as[0].Node)
	require.Equal(t, "holder", as[1].Node)

	require.Eventually(t, func() bool {
		ms, err := reader.Missed(ctx, "orphan", 10)
		return err == nil && len(ms) >= 2
	}, 20*time.Second, 10*time.Millisecond, "the watcher records two of orphan's ticks missed")
	stopWatcher()
	ms, err := reader.Missed(ctx, "orphan", 100)
	require.NoError(t, err)
	all, err := reader.Missed(ctx, "", 100)
	require.NoError(t, err)
	return History{Successor: as[0], Holder: as[1], Missed: ms, AllMissed: len(all)}
}

// OpenPostgres returns an opener of connection pools, each of its own, to
// the test's schema (testenv.PostgresURL).
func OpenPostgres(t *testing.T) func() *sql.DB {
	u := testenv.PostgresURL(t)
	return func() *sql.DB {
		pool, err := pgxpool.New(t.Context(), u)
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close(); pool.Close() })
		return db
	}
}

// OpenSQLite returns an opener of connections to the SQLite file path.
func OpenSQLite(t *testing.T, path string) func() *sql.DB {
	return func() *sql.DB {
		db, err := sqlitelease.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
}

// Row is an attempt WriteAttempts writes beside what real schedulers
// leave: what a fenced store never shows (a tick applied twice), a
// failure, trouble older than an hour. Fire and Claimed are before the
// store's now; the attempt ends a second after its claim.
type Row struct {
	Job            string
	Fire, Claimed  time.Duration
	Token, Attempt int64
	Outcome, Error string
}

// Rows are the attempts the triage tests write: ledger's tick 10m ago
// applied twice and its tick 20m ago failed ("disk full"); report's tick
// 2h ago with its first attempt lost and its second succeeded.
var Rows = []Row{
	{Job: "ledger", Fire: 10 * time.Minute, Claimed: 10 * time.Minute, Token: 2, Attempt: 1, Outcome: "succeeded"},
	{Job: "ledger", Fire: 10 * time.Minute, Claimed: 9 * time.Minute, Token: 3, Attempt: 2, Outcome: "succeeded"},
	{Job: "ledger", Fire: 20 * time.Minute, Claimed: 20 * time.Minute, Token: 1, Attempt: 1, Outcome: "failed", Error: "disk full"},
	{Job: "report", Fire: 2 * time.Hour, Claimed: 2 * time.Hour, Token: 1, Attempt: 1, Outcome: "lost", Error: "its run row expired"},
	{Job: "report", Fire: 2 * time.Hour, Claimed: 2*time.Hour - time.Minute, Token: 2, Attempt: 2, Outcome: "succeeded"},
}

// Now is the store's clock: PostgreSQL's now(); SQLite's is this
// process's.
func Now(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	d, err := migrate.Detect(t.Context(), db)
	require.NoError(t, err)
	if d == migrate.SQLite {
		return time.Now()
	}
	var now time.Time
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT now()`).Scan(&now))
	return now
}

// WriteAttempts inserts rows into the default attempt table (NewStore's),
// their times before now.
func WriteAttempts(t *testing.T, db *sql.DB, now time.Time, rows []Row) {
	t.Helper()
	d, err := migrate.Detect(t.Context(), db)
	require.NoError(t, err)
	q := `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_at, token, attempt, node, outcome, claimed_at, ended_at, error)
		VALUES ('default', $1, to_timestamp($2 / 1000.0), $3, $4, 'n1', $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0), nullif($8, ''))`
	if d == migrate.SQLite {
		q = `INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, error)
		VALUES ('default', $1, $2, $3, $4, 'n1', $5, $6, $7, nullif($8, ''))`
	}
	for _, r := range rows {
		claimed := now.Add(-r.Claimed).UnixMilli()
		_, err := db.ExecContext(t.Context(), q, r.Job, now.Add(-r.Fire).UnixMilli(), r.Token, r.Attempt, r.Outcome, claimed, claimed+1000, r.Error)
		require.NoError(t, err)
	}
}
