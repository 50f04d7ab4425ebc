package schedule_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/testing/failpoint"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// The scheduler's failpoint table (run-key mode): every statement of the
// protocol made to fail in turn, three ways (internal/testing/failpoint), on
// real PostgreSQL and SQLite, with real schedulers. Each row asserts that
// every tick's effect (a fenced write of its job) is applied exactly once,
// that no tick is lost, and that the run, its attempts and the missed
// ticks say what happened; its result is the row of docs/failpoints.md.

// spText is the error of the failing jobs: a NUL and invalid UTF-8.
const spText = "boom \x00 \xff"

// spEnv is one row's database, twice: plain, and through the plan.
type spEnv struct {
	t       *testing.T
	dialect string
	plain   *sql.DB
	faulty  *sql.DB
	plan    *failpoint.Plan
	clock   *schedule.ManualClock
	log     *runLog
	fire    time.Time // the first tick
}

func newSPEnv(t *testing.T, dialect string) *spEnv {
	e := &spEnv{t: t, dialect: dialect, plan: failpoint.NewPlan(), log: &runLog{},
		clock: schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		fire:  time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)}
	if dialect == "postgres" {
		cfg, err := pgx.ParseConfig(pgURL(t))
		require.NoError(t, err)
		e.plain = stdlib.OpenDB(*cfg)
		e.faulty = e.plan.DB(stdlib.GetConnector(*cfg), failpoint.PostgresDataError)
	} else {
		path := sqlitePath(t)
		var err error
		e.plain, err = sqlitelease.Open(path)
		require.NoError(t, err)
		e.faulty = e.plan.DB(failpoint.DSN(&sqlite.Driver{}, sqlitelease.DSN(path)), failpoint.SQLiteDataError)
		e.faulty.SetMaxOpenConns(4)
	}
	t.Cleanup(func() { e.faulty.Close(); e.plain.Close() })
	require.NoError(t, fence.MigrateSQL(t.Context(), e.plain))
	_, err := e.plain.Exec(`CREATE TABLE sp_effect (fire_ms bigint NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)
	return e
}

// store is a Store on db.
func (e *spEnv) store(db *sql.DB) *schedule.Store {
	st, err := schedule.NewStore(e.t.Context(), db, nil)
	require.NoError(e.t, err)
	return st
}

// effect is a tick's business write, fenced by its run's token, on the
// plain handle.
func (e *spEnv) effect(ctx context.Context) error {
	run, _ := schedule.RunFrom(ctx)
	tx, err := e.plain.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fence.CheckSQL(ctx, tx, "tick-"+strconv.FormatInt(run.Fire.UnixMilli(), 10), run.Token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sp_effect VALUES ($1, $2)`, run.Fire.UnixMilli(), int64(run.Token)); err != nil {
		return err
	}
	return tx.Commit()
}

// job is the job of a row: it records its run and writes its effect (or
// fails with spText when fail).
func (e *spEnv) job(fail bool, more func(context.Context) error) schedule.Job {
	return schedule.Job{Name: "nightly", Every: time.Hour, LockAtMostFor: time.Minute, MaxAttempts: 2,
		Run: func(ctx context.Context) error {
			e.log.record(ctx)
			if more != nil {
				if err := more(ctx); err != nil {
					return err
				}
			}
			if fail {
				return errors.New(spText)
			}
			return e.effect(ctx)
		}}
}

// scheduler starts a scheduler named node on st.
func (e *spEnv) scheduler(node string, st *schedule.Store, j schedule.Job, cfg schedule.Config) *schedule.Scheduler {
	cfg.Node, cfg.Store, cfg.Clock, cfg.OnEvent = node, st, e.clock, e.log.onEvent
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = 50 * time.Millisecond
	}
	return start(e.t, &cfg, j)
}

// ended waits for the tick's run row to end, and asserts it ran runs
// times in all (attempt: the last), its effect landed once (none when
// state is failed), and its record: the run's state and error, its
// attempts' outcomes in order.
func (e *spEnv) ended(st *schedule.Store, runs, attempt int, state, text string, outcomes ...string) {
	e.t.Helper()
	rec := e.end(st, runs, attempt, state, outcomes...)
	require.Equal(e.t, text, rec.Error)
}

// end is ended without the check of the error text: it returns the run.
func (e *spEnv) end(st *schedule.Store, runs, attempt int, state string, outcomes ...string) schedule.RunRecord {
	t := e.t
	var rec []schedule.RunRecord
	waitFor(t, 20*time.Second, func() bool {
		var err error
		rec, err = st.Runs(context.Background(), "nightly", 10)
		require.NoError(t, err)
		return len(rec) == 1 && rec[0].State != "running"
	}, "the tick's run ended")
	waitFor(t, 20*time.Second, func() bool { return len(e.log.eventsOf(schedule.EventDone)) >= runs }, "the runs done, their outcomes written")
	require.Equal(t, e.fire, rec[0].Fire)
	require.Equal(t, state, rec[0].State)
	require.Equal(t, attempt, rec[0].Attempt)
	require.Equal(t, runs, e.log.count(), "the tick's runs")
	effects := 1
	if state == "failed" {
		effects = 0
	}
	var n int
	require.NoError(t, e.plain.QueryRow(`SELECT count(*) FROM sp_effect WHERE fire_ms = $1`, e.fire.UnixMilli()).Scan(&n))
	require.Equal(t, effects, n, "the tick's effect applied")
	rr, err := schedule.NewRunReader(context.Background(), e.plain, nil)
	require.NoError(t, err)
	var got []string
	waitFor(t, 10*time.Second, func() bool {
		as, err := rr.Attempts(context.Background(), "nightly", 10)
		require.NoError(t, err)
		got = got[:0]
		for i := len(as) - 1; i >= 0; i-- {
			got = append(got, as[i].Outcome)
		}
		return strings.Join(got, ",") == strings.Join(outcomes, ",")
	}, "the attempts %v", outcomes)
	require.Empty(t, e.log.eventsOf(schedule.EventTwice), "no tick ran twice")
	require.Empty(t, e.log.eventsOf(schedule.EventLost), "no run was told its outcome was refused")
	return rec[0]
}

// spCase is a row group of the table: one statement, three faults.
type spCase struct {
	stmt   string
	match  map[string]string // a fragment of its SQL, by dialect
	result map[failpoint.Fault]string
	run    func(e *spEnv, f failpoint.Fault)
}

func both(s string) map[string]string { return map[string]string{"postgres": s, "sqlite": s} }

var spCases = []spCase{
	{
		stmt:  "claim",
		match: both(", owner)"),
		result: map[failpoint.Fault]string{
			failpoint.Before: "the claim is tried again while the tick is on time; it runs once, attempt 1",
			failpoint.After:  "the row landed: the next try reads it back by its owner and runs it; once, attempt 1, not left to expire",
			failpoint.Data:   "the claim is tried again while the tick is on time; it runs once, attempt 1",
		},
		run: func(e *spEnv, f failpoint.Fault) {
			st := e.store(e.faulty)
			e.scheduler("a", st, e.job(false, nil), schedule.Config{})
			advanceWhenWaiting(e.t, e.clock, time.Hour)
			e.ended(st, 1, 1, "succeeded", "", "succeeded")
		},
	},
	{
		stmt:   "renew (the run row's heartbeat)",
		match:  map[string]string{"postgres": "SET expires_at = now() + $4", "sqlite": "SET expires_ms = CAST(unixepoch('subsec') * 1000 AS INTEGER) + $4"},
		result: all("sent again while the lease allows: the run is not cancelled; it succeeds once, attempt 1"),
		run: func(e *spEnv, f failpoint.Fault) {
			st := e.store(e.faulty)
			j := e.job(false, func(ctx context.Context) error {
				// Runs until the armed heartbeat failed and two more landed.
				var fired int
				for {
					if fired == 0 && e.plan.Fired("fault") > 0 {
						fired = e.plan.Ran("fault")
					}
					if fired > 0 && e.plan.Ran("fault") >= fired+2 {
						return nil
					}
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			j.LockAtMostFor = 3 * time.Second // renewed every second: a loaded machine is no lost lease
			e.scheduler("a", st, j, schedule.Config{})
			advanceWhenWaiting(e.t, e.clock, time.Hour)
			e.ended(st, 1, 1, "succeeded", "", "succeeded")
		},
	},
	{
		stmt:  "finish (a failed run's outcome)",
		match: map[string]string{"postgres": "SET state = $4, ended_at = now(), error = $5", "sqlite": "SET state = $4, ended_ms ="},
		result: map[failpoint.Fault]string{
			failpoint.Before: "written on the next try, its text cleaned and noting the failed try; the tick ran once",
			failpoint.After:  "the next try is refused; reading the row shows this finish landed: recorded once, no lost or refused attempt",
			failpoint.Data:   "written again at once with the text as ASCII; the tick ran once",
		},
		run: func(e *spEnv, f failpoint.Fault) {
			st := e.store(e.faulty)
			e.scheduler("a", st, e.job(true, nil), schedule.Config{})
			advanceWhenWaiting(e.t, e.clock, time.Hour)
			rec := e.end(st, 1, 1, "failed", "failed")
			want := errtext.Clean(spText)
			switch f {
			case failpoint.Before:
				want += ` [recorded on try 2; try 1 failed: schedule: finish "nightly" at 2026-01-01T01:00:00Z: failpoint fault: connection broken before the statement was sent]`
			case failpoint.Data:
				require.True(e.t, strings.HasPrefix(rec.Error, "the error text was refused by the store (schedule: finish"), rec.Error)
				want = rec.Error
				require.True(e.t, strings.HasSuffix(want, strconv.QuoteToASCII(errtext.Clean(spText))), want)
			}
			require.Equal(e.t, want, rec.Error)
		},
	},
	{
		stmt:  "reclaim (the reaper takes an expired run)",
		match: both("owner = $7"),
		result: map[failpoint.Fault]string{
			failpoint.Before: "the next pass reclaims it; the tick runs once more, attempt 2; the crashed attempt is lost",
			failpoint.After:  "reclaimed: the reaper reads the row back by its owner and runs it at once, attempt 2 (not left to expire, nor abandoned)",
			failpoint.Data:   "the next pass reclaims it; the tick runs once more, attempt 2; the crashed attempt is lost",
		},
		run: func(e *spEnv, f failpoint.Fault) {
			crash(e)
			st := e.store(e.faulty)
			e.scheduler("reaper", st, e.job(false, nil), schedule.Config{})
			e.ended(st, 1, 2, "succeeded", "", "lost", "succeeded")
		},
	},
	{
		stmt:   "expired runs (the reaper's read)",
		match:  map[string]string{"postgres": "expires_at <= now() ORDER BY fire_at LIMIT 100", "sqlite": "ORDER BY fire_ms LIMIT 100"},
		result: all("the next pass reads them; the tick runs once more, attempt 2; the crashed attempt is lost"),
		run: func(e *spEnv, f failpoint.Fault) {
			crash(e)
			st := e.store(e.faulty)
			e.scheduler("reaper", st, e.job(false, nil), schedule.Config{})
			e.ended(st, 1, 2, "succeeded", "", "lost", "succeeded")
		},
	},
	{
		stmt:  "missed-tick sweep",
		match: both("_missed\" (namespace, job, fire_"),
		result: map[failpoint.Fault]string{
			failpoint.Before: "the next sweep records the missed ticks, once each, with their cause",
			failpoint.After:  "recorded (the reply lost: this replica's EventMissed with it); the next sweep adds nothing: once each",
			failpoint.Data:   "the next sweep records the missed ticks, once each, with their cause",
		},
		run: func(e *spEnv, f failpoint.Fault) {
			st := e.store(e.faulty)
			j := e.job(false, nil)
			j.Misfire = schedule.MisfireSkip
			e.scheduler("a", st, j, schedule.Config{})
			// Three ticks due at once: the first two are misfires (skipped),
			// the third runs.
			advanceWhenWaiting(e.t, e.clock, 3*time.Hour)
			e.fire = e.fire.Add(2 * time.Hour)
			e.ended(st, 1, 1, "succeeded", "", "succeeded")
			rr, err := schedule.NewRunReader(context.Background(), e.plain, nil)
			require.NoError(e.t, err)
			var missed []schedule.MissedTick
			waitFor(e.t, 20*time.Second, func() bool {
				missed, err = rr.Missed(context.Background(), "nightly", 10)
				require.NoError(e.t, err)
				return len(missed) == 2 && e.plan.Fired("fault") == 1
			}, "the two missed ticks recorded")
			for i, m := range missed {
				require.Equal(e.t, schedule.CauseMisfire, m.Cause)
				require.Equal(e.t, e.fire.Add(-time.Duration(i+1)*time.Hour), m.Fire.UTC())
			}
		},
	},
	{
		stmt:   "catalog bind (the binder's read of the schedules)",
		match:  both(`"aegis_schedule" WHERE namespace = $1 ORDER BY name`),
		result: all("the binder reads the catalog again at its next poll and binds the schedule; the tick runs once, attempt 1"),
		run: func(e *spEnv, f failpoint.Fault) {
			t := e.t
			// A catalog schedule takes effect when it is put, store time:
			// the clock starts after that, on the hour.
			now := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
			e.clock, e.fire = schedule.NewManualClock(now), now.Add(time.Hour)
			plain, err := schedule.NewCatalog(t.Context(), e.plain, nil)
			require.NoError(t, err)
			_, err = plain.Put(t.Context(), schedule.Entry{Name: "nightly", Every: time.Hour, Handler: "nightly", LockAtMostFor: time.Minute})
			require.NoError(t, err)
			cat, err := schedule.NewCatalog(t.Context(), e.faulty, nil)
			require.NoError(t, err)
			st := e.store(e.faulty)
			s, err := schedule.New(&schedule.Config{Node: "a", Store: st, Catalog: cat, Clock: e.clock, OnEvent: e.log.onEvent})
			require.NoError(t, err)
			j := e.job(false, nil)
			require.NoError(t, s.Handle("nightly", func(ctx context.Context, _ json.RawMessage) error { return j.Run(ctx) }))
			require.NoError(t, s.Start(t.Context()))
			t.Cleanup(func() { stop(t, s) })
			waitFor(t, 10*time.Second, func() bool { return len(e.log.eventsOf(schedule.EventBound)) > 0 }, "the schedule bound")
			advanceWhenWaiting(t, e.clock, time.Hour)
			e.ended(st, 1, 1, "succeeded", "", "succeeded")
		},
	},
	{
		stmt:  "hand back (a claim that lands while the scheduler stops)",
		match: map[string]string{"postgres": "SET expires_at = now() -- the reaper's at once", "sqlite": "SET expires_ms = CAST(unixepoch('subsec') * 1000 AS INTEGER)\nWHERE namespace = $4"},
		result: map[failpoint.Fault]string{
			failpoint.Before: "not handed back: the row expires after LockAtMostFor and a live replica's reaper runs the tick, attempt 2, once",
			failpoint.After:  "handed back (the reply lost): a live replica's reaper runs the tick at once, attempt 2, once",
			failpoint.Data:   "not handed back: the row expires after LockAtMostFor and a live replica's reaper runs the tick, attempt 2, once",
		},
		run: handBack,
	},
}

// crash leaves the first tick's run row claimed by a node that crashed:
// running, expired.
func crash(e *spEnv) {
	st := e.store(e.plain)
	s := e.scheduler("crashed", st, e.job(false, func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}), schedule.Config{ReapInterval: time.Hour})
	advanceWhenWaiting(e.t, e.clock, time.Hour)
	waitFor(e.t, 10*time.Second, func() bool { return e.log.count() == 1 }, "the crashing run started")
	stop(e.t, s)
	_, err := e.plain.Exec(`UPDATE aegis_schedule_run SET state = 'running', ended_` + map[string]string{"postgres": "at", "sqlite": "ms"}[e.dialect] + ` = NULL, expires_` + map[string]string{"postgres": "at = now()", "sqlite": "ms = 0"}[e.dialect])
	require.NoError(e.t, err)
	e.log = &runLog{}
}

// handBack stops a scheduler while its claim waits for a lock another
// transaction holds, then lets the claim land: the run is handed back.
func handBack(e *spEnv, f failpoint.Fault) {
	t := e.t
	st := e.store(e.faulty)
	j := e.job(false, nil)
	j.LockAtMostFor = 2 * time.Second
	// No sweep or reaper pass writes meanwhile: the claim is the only
	// statement that waits.
	s, err := schedule.New(&schedule.Config{Node: "stopping", Store: st, Clock: e.clock, OnEvent: e.log.onEvent, ReapInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Add(j))
	ctx, end := context.WithCancel(context.Background())
	defer end()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })

	conn, err := e.plain.Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	if e.dialect == "postgres" {
		// Another transaction holds the tick's key: the claim's insert waits.
		_, err = conn.ExecContext(t.Context(), `BEGIN`)
		require.NoError(t, err)
		_, err = conn.ExecContext(t.Context(), `INSERT INTO aegis_schedule_run (job, fire_at, token, node, attempt, state, started_at, expires_at)
			VALUES ('nightly', $1, 1, 'x', 1, 'running', now(), now())`, e.fire)
		require.NoError(t, err)
	} else {
		_, err = conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`) // the write lock: the claim's BEGIN IMMEDIATE waits
		require.NoError(t, err)
	}
	e.plan.Watch("claim", ", owner)")
	e.plan.Watch("begin", "BEGIN IMMEDIATE")
	begun := e.plan.Ran("begin")
	advanceWhenWaiting(t, e.clock, time.Hour)
	waitFor(t, 10*time.Second, func() bool {
		if e.dialect == "sqlite" {
			return e.plan.Ran("begin") > begun
		}
		var n int
		require.NoError(t, e.plain.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`).Scan(&n))
		return n > 0
	}, "the claim waits for the other transaction")
	end() // the scheduler stops while its claim waits
	_, err = conn.ExecContext(t.Context(), `ROLLBACK`)
	require.NoError(t, err)
	stop(t, s)
	require.Zero(t, e.log.count(), "nothing runs while stopping")

	live := e.store(e.plain)
	e.scheduler("live", live, j, schedule.Config{ReapInterval: 20 * time.Millisecond})
	e.ended(live, 1, 2, "succeeded", "", "lost", "succeeded")
	require.Equal(t, "live", e.log.snapshot()[0].Node)
}

// all is a result that does not depend on the fault.
func all(s string) map[failpoint.Fault]string {
	return map[failpoint.Fault]string{failpoint.Before: s, failpoint.After: s, failpoint.Data: s}
}

func TestFailpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range spCases {
		for _, dialect := range []string{"postgres", "sqlite"} {
			for _, f := range failpoint.Faults {
				t.Run(tc.stmt+"/"+dialect+"/"+f.String(), func(t *testing.T) {
					t.Parallel()
					e := newSPEnv(t, dialect)
					e.plan.Arm("fault", tc.match[dialect], f, 1)
					e.plan.Watch("fault", tc.match[dialect])
					tc.run(e, f)
					require.Equal(t, 1, e.plan.Fired("fault"), "the fault fired once")
				})
			}
		}
	}
}

// TestFailpointTableInDocs: docs/failpoints.md lists the scheduler's rows
// of the table exactly as spCases assert them.
func TestFailpointTableInDocs(t *testing.T) {
	t.Parallel()
	var want []string
	for _, tc := range spCases {
		for _, f := range failpoint.Faults {
			want = append(want, failpoint.Row("schedule", tc.stmt, f, tc.result[f]))
		}
	}
	failpoint.CheckDoc(t, "../docs/failpoints.md", "schedule", want)
}

// TestRunTextIsStored: whatever text a run's error has (a NUL, invalid
// UTF-8, 5 MB, a panic's), its tick runs once and its run row ends failed
// with the text cleaned (internal/errtext), on both dialects.
func TestRunTextIsStored(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 5<<20) + "the end"
	for _, dialect := range []string{"postgres", "sqlite"} {
		for _, tc := range []struct{ name, text string }{
			{"NUL", "failed: \x00"},
			{"invalid UTF-8", "failed: \xff\xfe"},
			{"5 MB", huge},
			{"panic", ""},
		} {
			t.Run(dialect+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				e := newSPEnv(t, dialect)
				st := e.store(e.plain)
				j := e.job(false, func(ctx context.Context) error {
					if tc.text == "" {
						panic("bad \x00 state")
					}
					return errors.New(tc.text)
				})
				j.MaxAttempts = 3
				e.scheduler("a", st, j, schedule.Config{})
				advanceWhenWaiting(t, e.clock, time.Hour)
				rec := e.end(st, 1, 1, "failed", "failed")
				if tc.text != "" {
					require.Equal(t, errtext.Clean(tc.text), rec.Error)
					return
				}
				require.True(t, strings.HasPrefix(rec.Error, "schedule: job \"nightly\" panicked: bad \\x00 state\n"), rec.Error)
				require.Contains(t, rec.Error, "TestRunTextIsStored", "the first frames name the job")
				require.LessOrEqual(t, strings.Count(rec.Error, "\n"), 10)
			})
		}
	}
}
