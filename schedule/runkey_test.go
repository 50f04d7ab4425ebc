package schedule_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// Three schedulers started at random offsets run a 1s job that takes 10ms
// until it has run eight ticks: each tick runs exactly once, on PostgreSQL
// and on SQLite, and its run row records it.
//
// Nothing here depends on timing: the test waits for the ticks (not for
// 10s, in which a loaded machine ran seven), and it accounts for the rows
// a loaded machine leaves besides the runs: a tick whose claim found the
// previous run still going (overlap forbid: skipped), and a last tick
// claimed while its node stopped (handed back: its row stays running,
// expired, for a live replica's reaper). The second once made the count of
// rows one more than the count of runs: Stop cut the claim off after its
// commit had landed (see TestStopDuringClaim). A tick handed back while
// another node still runs is that node's reaper's: it ends abandoned when
// a later tick has started.
func TestRunKeyThreeSchedulers(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"postgres", "sqlite"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var open func() *replica
			if db == "postgres" {
				url := pgURL(t)
				open = func() *replica { return pgReplica(t, url) }
			} else {
				path := sqlitePath(t)
				open = func() *replica { return sqliteReplica(t, path) }
			}
			log := &runLog{}
			job := schedule.Job{Name: "tick", Every: time.Second, LockAtMostFor: 2 * time.Second, Run: func(ctx context.Context) error {
				log.record(ctx)
				time.Sleep(10 * time.Millisecond) // the work
				return nil
			}}
			var scheds []*schedule.Scheduler
			var r *replica
			for i := range 3 {
				time.Sleep(rand.N(time.Second)) // a random start offset: the scenario, not a synchronisation
				r = open()
				scheds = append(scheds, start(t, &schedule.Config{Node: fmt.Sprintf("node-%d", i), Store: r.store, OnEvent: log.onEvent}, job))
			}
			waitFor(t, 60*time.Second, func() bool { return len(log.perTick()) >= 8 }, "eight ticks run")
			for _, s := range scheds {
				stop(t, s)
			}
			ticks := log.perTick()
			for _, f := range sortedTicks(ticks) {
				require.Equal(t, 1, ticks[f], "tick %s ran %d times", f, ticks[f])
			}
			rows, err := r.store.Runs(context.Background(), "tick", 1000)
			require.NoError(t, err)
			var last time.Time
			for f := range ticks {
				if f.After(last) {
					last = f
				}
			}
			forbid, handedBack := map[time.Time]bool{}, map[time.Time]bool{}
			for _, e := range log.eventsOf(schedule.EventSkipped) {
				forbid[e.Fire.UTC()] = forbid[e.Fire.UTC()] || strings.HasPrefix(e.Reason, "overlap forbid")
				handedBack[e.Fire.UTC()] = handedBack[e.Fire.UTC()] || strings.HasPrefix(e.Reason, "stopping: the run is handed back")
			}
			succeeded := 0
			for _, row := range rows {
				switch row.State {
				case "succeeded":
					succeeded++
					require.Equal(t, 1, ticks[row.Fire], "row %+v: a run for each succeeded row", row)
					require.NotEmpty(t, row.Node)
					require.False(t, row.Ended.Before(row.Started))
				case "skipped":
					require.Zero(t, ticks[row.Fire], "row %+v", row)
					require.True(t, forbid[row.Fire], "row %+v: skipped by overlap forbid, and said so", row)
				case "running":
					require.Zero(t, ticks[row.Fire], "row %+v", row)
					require.False(t, row.Fire.Before(last), "row %+v: only a tick claimed while stopping, after the last run (%s), stays running", row, last)
					require.True(t, handedBack[row.Fire], "row %+v: handed back, and said so", row)
				case "abandoned":
					// Handed back by a node that stopped while the others
					// still ran: a live replica's reaper took it after a
					// later tick had started.
					require.Zero(t, ticks[row.Fire], "row %+v: the tick ran, but its row was left to expire and the reaper abandoned it (the run's outcome write did not land in time: %v)", row, errorsAt(log, row.Fire))
					require.True(t, handedBack[row.Fire], "row %+v: abandoned only after it was handed back, and said so", row)
				default:
					t.Fatalf("row %+v: unexpected state", row)
				}
			}
			require.Equal(t, len(ticks), succeeded, "a succeeded row for every run: rows %+v", rows)
			require.Empty(t, log.eventsOf(schedule.EventError))
		})
	}
}

// errorsAt returns the EventError events of the tick fired at f.
func errorsAt(log *runLog, f time.Time) []schedule.Event {
	var out []schedule.Event
	for _, e := range log.eventsOf(schedule.EventError) {
		if e.Fire.Equal(f) {
			out = append(out, e)
		}
	}
	return out
}

// A replica whose clock is ahead (or behind) by less than the period fires
// each tick at another real time, but with the same run key: no duplicate.
func TestRunKeyClockSkew(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	log := &runLog{}
	job := schedule.Job{Name: "skewed", Every: time.Second, LockAtMostFor: 2 * time.Second, Run: func(ctx context.Context) error {
		log.record(ctx)
		return nil
	}}
	nodes := []string{"node-0", "node-1", "node-2"}
	for i, skew := range []time.Duration{0, 700 * time.Millisecond, -400 * time.Millisecond} {
		start(t, &schedule.Config{Node: nodes[i], Store: pgReplica(t, url).store, Clock: schedule.OffsetClock(skew), OnEvent: log.onEvent}, job)
	}
	waitFor(t, 30*time.Second, func() bool { return len(log.perTick()) >= 4 }, "four ticks")
	// Wait until every replica has fired the last tick run so far (the one
	// behind last): it ran it or found it taken, and fired the earlier ones
	// before it.
	fires := sortedTicks(log.perTick())
	latest := fires[len(fires)-1]
	waitFor(t, 30*time.Second, func() bool {
		fired := map[string]bool{}
		for _, kind := range []schedule.EventKind{schedule.EventRun, schedule.EventSkipped} {
			for _, e := range log.eventsOf(kind) {
				if !e.Fire.Before(latest) {
					fired[e.Node] = true
				}
			}
		}
		return len(fired) == len(nodes)
	}, "every replica fired the tick %s", latest)
	ticks := log.perTick()
	for _, f := range sortedTicks(ticks) {
		require.Equal(t, 1, ticks[f], "tick %s ran %d times", f, ticks[f])
	}
	skippers := map[string]bool{}
	for _, e := range log.eventsOf(schedule.EventSkipped) {
		skippers[e.Node] = true
	}
	require.GreaterOrEqual(t, len(skippers), 2, "the replicas fired the same ticks and found them taken: %v", skippers)
}

// The same setup with a naive lock — a lease taken at fire time and
// released after the job, ShedLock without lockAtLeastFor — runs ticks
// more than once when clocks differ: the lease is free again by the time
// the replica whose clock is behind fires the same tick. This is why run
// keys exist. Clock offsets of 250ms and 500ms, against a 10ms job, make it
// happen on every tick, not by luck. lockAtLeastFor longer than the skew
// (800ms) removes the duplicates.
func TestNaiveLockDuplicates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		atLeast time.Duration
	}{{"naive", 0}, {"lockAtLeastFor", 800 * time.Millisecond}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := pgURL(t)
			log := &runLog{}
			job := schedule.Job{Name: "naive", Every: time.Second, LockAtMostFor: 900 * time.Millisecond, LockAtLeastFor: tt.atLeast,
				Run: func(ctx context.Context) error {
					log.record(ctx)
					time.Sleep(10 * time.Millisecond)
					return nil
				}}
			var scheds []*schedule.Scheduler
			for i, skew := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond} {
				scheds = append(scheds, start(t, &schedule.Config{Node: fmt.Sprintf("node-%d", i), Locker: pgReplica(t, url).locker, Clock: schedule.OffsetClock(skew)}, job))
			}
			waitFor(t, 10*time.Second, func() bool { return len(log.perTick()) >= 5 }, "five ticks")
			for _, s := range scheds {
				stop(t, s)
			}
			ticks := log.perTick()
			fs := sortedTicks(ticks)
			fs = fs[1 : len(fs)-1] // the first and last ticks may be cut by start and stop
			dup := 0
			for _, f := range fs {
				if ticks[f] > 1 {
					dup++
				}
			}
			if tt.atLeast == 0 {
				require.Equal(t, len(fs), dup, "every complete tick ran more than once: %v", ticks)
			} else {
				require.Zero(t, dup, "lockAtLeastFor longer than the skew: %v", ticks)
			}
		})
	}
}

// Lease loss mid-run cancels the job within a third of the TTL (the
// keep-alive renews every TTL/3 and the first failed renewal cancels), and
// the successor's token is greater.
func TestLeaseLossCancelsJob(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	for _, mode := range []string{"lease", "run-key"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			url := pgURL(t)
			r := pgReplica(t, url)
			running := make(chan aegis.Token, 1)
			cancelled := make(chan time.Time, 1)
			job := schedule.Job{Name: "lossy", Every: time.Hour, LockAtMostFor: ttl, Run: func(ctx context.Context) error {
				tok, _ := schedule.TokenFrom(ctx)
				running <- tok
				select {
				case <-ctx.Done():
				case <-time.After(30 * time.Second): // the test's receive of cancelled fails first
				}
				cancelled <- time.Now()
				return ctx.Err()
			}}
			clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := &schedule.Config{Node: "n", Clock: clock}
			if mode == "lease" {
				cfg.Locker = r.locker
			} else {
				cfg.Store = r.store
			}
			log := &runLog{}
			cfg.OnEvent = log.onEvent
			start(t, cfg, job)
			advanceWhenWaiting(t, clock, time.Hour)
			token := testenv.Recv(t, running, 10*time.Second, "the run to start")
			// Take the lease (or run row) away, as an expiry during a pause
			// followed by a successor's grant would.
			var successor aegis.Token
			var stolen time.Time
			if mode == "lease" {
				_, err := r.pool.Exec(t.Context(), `UPDATE aegis_lease SET expires_at = now() WHERE key = 'lossy'`)
				require.NoError(t, err)
				stolen = time.Now()
				l, err := r.locker.TryAcquire(t.Context(), "lossy", time.Second)
				require.NoError(t, err)
				successor = l.Token
			} else {
				stolen = time.Now()
				var tok int64
				require.NoError(t, r.pool.QueryRow(t.Context(),
					`UPDATE aegis_schedule_run SET token = token + 1 WHERE job = 'lossy' RETURNING token`).Scan(&tok))
				successor = aegis.Token(tok)
			}
			at := testenv.Recv(t, cancelled, 10*time.Second, "the job's context to be cancelled after the loss")
			took := at.Sub(stolen)
			t.Logf("%s: the job was cancelled %s after its lease was lost (TTL %s)", mode, took, ttl)
			// The renewal every TTL/3 finds the loss; at the latest, the
			// lease's local deadline (one TTL after the last renewal) ends
			// the job. A loaded machine may delay the renewal, never the
			// bound: the deadline timer is the job's guarantee.
			require.Less(t, took, ttl+time.Second, "cancelled within the lease's TTL of the loss (plus a second for a loaded machine)")
			require.Greater(t, successor, token)
			waitFor(t, 10*time.Second, func() bool { return len(log.eventsOf(schedule.EventLost)) > 0 }, "a lost event")
		})
	}
}

// advanceWhenWaiting advances clock by d once a scheduler waits on it.
var advanceWhenWaiting = historytest.AdvanceWhenWaiting

// A job longer than LockAtMostFor stays exclusive with keep-alive; without
// it the lease expires mid-run, a second runner appears, and its writes win
// the fence: the first runner's late write (it ignores its context, like a
// job that cannot be interrupted) is rejected.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	for _, keepAlive := range []bool{true, false} {
		t.Run(fmt.Sprintf("keepAlive=%v", keepAlive), func(t *testing.T) {
			t.Parallel()
			url := pgURL(t)
			r := pgReplica(t, url)
			require.NoError(t, fence.MigrateSQL(t.Context(), r.db))
			log := &runLog{}
			stale := make(chan aegis.Token, 10)
			// LockAtMostFor 2s, renewed every few hundred ms with
			// keep-alive: a renewal would have to be over a second late
			// for the lease to lapse (300ms lapsed on a loaded machine).
			job := schedule.Job{Name: "long", Every: 400 * time.Millisecond, LockAtMostFor: 2 * time.Second, DisableKeepAlive: !keepAlive,
				Run: func(ctx context.Context) error {
					log.record(ctx)
					log.enter()
					defer log.exit()
					tok, _ := schedule.TokenFrom(ctx)
					write := func() error {
						tx, err := r.db.BeginTx(context.Background(), nil)
						if err != nil {
							return err
						}
						defer tx.Rollback()
						if err := fence.CheckSQL(context.Background(), tx, "long-result", tok); err != nil {
							select {
							case stale <- tok:
							default: // enough recorded
							}
							return err
						}
						return tx.Commit()
					}
					if err := write(); err != nil {
						return err
					}
					time.Sleep(3 * time.Second) // longer than LockAtMostFor; ignores ctx
					return write()
				}}
			var scheds []*schedule.Scheduler
			for i := range 2 {
				scheds = append(scheds, start(t, &schedule.Config{Node: fmt.Sprintf("node-%d", i), Locker: pgReplica(t, url).locker}, job))
			}
			waitFor(t, 30*time.Second, func() bool { return log.count() >= 2 }, "two runs")
			for _, s := range scheds {
				stop(t, s)
			}
			log.mu.Lock()
			peak := log.peak
			log.mu.Unlock()
			if keepAlive {
				require.Equal(t, 1, peak, "exclusive with keep-alive")
				require.Empty(t, stale, "no write was fenced out")
				return
			}
			require.Equal(t, 2, peak, "a second runner appeared without keep-alive")
			require.NotEmpty(t, stale, "the first runner's late write lost to the second's token")
			var final int64
			require.NoError(t, r.db.QueryRow(`SELECT token FROM aegis_fence WHERE resource = 'long-result'`).Scan(&final))
			require.Greater(t, final, int64(testenv.Recv(t, stale, time.Second, "a fenced-out token")))
		})
	}
}

// The reaper retries a crashed run with a bumped token, re-checking expiry
// at write time; after MaxAttempts it abandons the run. On PostgreSQL and
// SQLite.
func TestReaper(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db string, r *replica) {
		clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		// A node claims the tick and crashes: its row stays running.
		crashed := start(t, &schedule.Config{Node: "crashed", Store: r.store, Clock: clock}, schedule.Job{
			Name: "nightly", Every: time.Hour, LockAtMostFor: 200 * time.Millisecond, DisableKeepAlive: true, MaxAttempts: 2,
			Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		})
		advanceWhenWaiting(t, clock, time.Hour)
		var first []schedule.RunRecord
		waitFor(t, 5*time.Second, func() bool {
			first, _ = r.store.Runs(t.Context(), "nightly", 10)
			return len(first) == 1
		}, "the claim")
		stop(t, crashed) // its finish lands; make the row look crashed again:
		_, err := r.db.Exec(`UPDATE aegis_schedule_run SET state = 'running'`)
		require.NoError(t, err)

		log := &runLog{}
		start(t, &schedule.Config{Node: "reaper", Store: r.store, Clock: clock, ReapInterval: 50 * time.Millisecond, OnEvent: log.onEvent}, schedule.Job{
			Name: "nightly", Every: time.Hour, LockAtMostFor: 200 * time.Millisecond, MaxAttempts: 2,
			Run: func(ctx context.Context) error { log.record(ctx); return nil },
		})
		waitFor(t, 5*time.Second, func() bool { return log.count() == 1 }, "the retry")
		run := log.snapshot()[0]
		require.Equal(t, first[0].Fire, run.Fire.UTC())
		require.Equal(t, first[0].Token+1, run.Token, "the reaper bumped the token")
		require.Equal(t, 2, run.Attempt)
		var rows []schedule.RunRecord
		waitFor(t, 5*time.Second, func() bool {
			rows, _ = r.store.Runs(t.Context(), "nightly", 10)
			return len(rows) == 1 && rows[0].State == "succeeded"
		}, "the retry succeeded")
		require.Equal(t, "reaper", rows[0].Node)
		require.Equal(t, run.Token, rows[0].Token)

		// Crash again at the last attempt: the reaper abandons it.
		_, err = r.db.Exec(`UPDATE aegis_schedule_run SET state = 'running'`)
		require.NoError(t, err)
		waitFor(t, 5*time.Second, func() bool {
			rows, _ = r.store.Runs(t.Context(), "nightly", 10)
			return rows[0].State == "abandoned"
		}, "abandoned after MaxAttempts")
		require.Equal(t, run.Token+1, rows[0].Token, "abandoning bumps the token too: the crashed runner is fenced")
		require.Equal(t, 1, log.count())
	})
}

// Every caller mistake is an error that matches aegis.ErrInvalid and names
// the field (or the value) that is wrong.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	run := func(context.Context) error { return nil }
	invalid := func(t *testing.T, err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid, want)
		require.ErrorContains(t, err, want)
	}
	for _, tc := range []struct {
		cfg  *schedule.Config
		want string
	}{
		{nil, "schedule: Config is nil"},
		{&schedule.Config{}, "none of Config.Store (run-key mode), Config.Locker (lease mode) and Config.Leader (leader mode) is set"},
		{&schedule.Config{Store: r.store, Locker: r.locker}, "not several"},
		{&schedule.Config{Store: r.store, Node: strings.Repeat("n", 101)}, `schedule: Config.Node "` + strings.Repeat("n", 40) + `"… is 101 bytes`},
		{&schedule.Config{Store: r.store, Node: "a\x00b"}, "schedule: Config.Node"},
		{&schedule.Config{Store: r.store, ReapInterval: -time.Second}, "Config.ReapInterval -1s is shorter than 1ms"},
		{&schedule.Config{Store: r.store, ReapInterval: time.Nanosecond}, "Config.ReapInterval 1ns is shorter than 1ms"},
		{&schedule.Config{Store: r.store, Retention: -time.Second}, "Config.Retention -1s is negative"},
	} {
		_, err := schedule.New(tc.cfg)
		invalid(t, err, tc.want)
	}
	_, err := schedule.NewStore(t.Context(), r.db, &schedule.StoreConfig{Table: "x y"})
	invalid(t, err, "schedule: StoreConfig.Table")
	_, err = schedule.NewStore(t.Context(), nil, nil)
	invalid(t, err, "schedule: NewStore: db is nil")
	_, err = r.store.Runs(t.Context(), "j", 0)
	invalid(t, err, "limit 0 is not positive")

	tests := []struct {
		job  schedule.Job
		want string
	}{
		{schedule.Job{Every: time.Second, Run: run}, `job "": Job.Name: aegis: invalid argument: key is empty`},
		{schedule.Job{Name: strings.Repeat("j", 151), Every: time.Second, Run: run}, "Job.Name is 151 bytes, at most 150"},
		{schedule.Job{Name: "j", Run: run}, "exactly one of Job.Cron, Job.Every and Job.Schedule must be set, got 0"},
		{schedule.Job{Name: "j", Cron: "* * * * * *", Every: time.Second, Run: run}, "got 2"},
		{schedule.Job{Name: "j", Cron: "61 * * * * *", Run: run}, `Job.Cron: cron spec "61 * * * * *": second field "61": 61 is out of range 0-59`},
		{schedule.Job{Name: "j", Cron: "@every 0s", Run: run}, `Job.Cron: cron spec "@every 0s": @every: period 0s is not positive`},
		{schedule.Job{Name: "j", Every: -time.Second, Run: run}, "Job.Every: period -1s is not positive"},
		{schedule.Job{Name: "j", Every: time.Microsecond, Run: run}, "Job.Every: period 1µs is not a whole number of milliseconds"},
		{schedule.Job{Name: "j", Schedule: schedule.Interval{}, Run: run}, "Job.Schedule: period 0s is not positive"},
		{schedule.Job{Name: "j", Schedule: &schedule.Interval{Period: time.Second, Offset: time.Second}, Run: run}, "Job.Schedule: offset 1s is not in [0, period 1s)"},
		{schedule.Job{Name: "j", Schedule: (*schedule.Interval)(nil), Run: run}, "Job.Schedule: a nil *Interval"},
		{schedule.Job{Name: "j", Schedule: &schedule.Cron{}, Run: run}, "Job.Schedule: a Cron that ParseCron did not return"},
		{schedule.Job{Name: "j", Every: time.Second}, "Job.Run is nil"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtMostFor: -time.Second}, "Job.LockAtMostFor -1s is not positive"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtMostFor: time.Millisecond}, "Job.LockAtMostFor 1ms is shorter than 10ms"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtMostFor: 25 * time.Hour}, "Job.LockAtMostFor 25h0m0s is longer than 24h"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtLeastFor: -time.Second}, "Job.LockAtLeastFor -1s is negative"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtLeastFor: time.Second}, "Job.LockAtLeastFor is for lease mode"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, StartingDeadline: -1}, "Job.StartingDeadline -1ns is negative"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, Misfire: 7}, "Job.Misfire 7 is not a misfire policy"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, CatchUpMax: 1001}, "Job.CatchUpMax 1001 is not in 1..1000"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, Overlap: 9}, "Job.Overlap 9 is not an overlap policy"},
		{schedule.Job{Name: "j", Every: time.Second, Run: run, MaxAttempts: -1}, "Job.MaxAttempts -1 is not in 1..1000"},
	}
	s, err := schedule.New(&schedule.Config{Store: r.store})
	require.NoError(t, err)
	for _, tt := range tests {
		err := s.Add(tt.job)
		invalid(t, err, tt.want)
		require.ErrorContains(t, err, "schedule: job ")
	}
	require.NoError(t, s.Add(schedule.Job{Name: "j", Every: time.Second, Run: run}))
	invalid(t, s.Add(schedule.Job{Name: "j", Every: time.Second, Run: run}), `job "j": Job.Name is already added`)
	invalid(t, s.AddWorker(nil), "AddWorker is for leader mode (Config.Leader)")

	ls, err := schedule.New(&schedule.Config{Locker: r.locker})
	require.NoError(t, err)
	invalid(t, ls.Add(schedule.Job{Name: "j", Every: time.Second, Run: run, LockAtMostFor: time.Second, LockAtLeastFor: 2 * time.Second}),
		"Job.LockAtLeastFor 2s is longer than Job.LockAtMostFor 1s")
}

// Outside a run there is no token: TokenFrom says so (ok false) and
// returns 0, never a run's token (every run's is positive).
func TestTokenFromOutsideARun(t *testing.T) {
	t.Parallel()
	tok, ok := schedule.TokenFrom(context.Background())
	require.False(t, ok)
	require.Zero(t, tok)
	_, ok = schedule.RunFrom(t.Context())
	require.False(t, ok)

	// `token, _ := TokenFrom(ctx)` outside a run writes nothing: the fence
	// refuses token 0.
	r := sqliteReplica(t, sqlitePath(t))
	require.NoError(t, fence.MigrateSQL(t.Context(), r.db))
	tx, err := r.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	require.ErrorIs(t, fence.CheckSQL(t.Context(), tx, "outside-a-run", tok), aegis.ErrInvalid)
	require.NoError(t, tx.Rollback())

	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	got := make(chan aegis.Token, 1)
	start(t, &schedule.Config{Node: "n", Store: r.store, Clock: clock}, schedule.Job{Name: "tok", Every: time.Hour, Run: func(ctx context.Context) error {
		tok, ok := schedule.TokenFrom(ctx)
		if !ok {
			tok = -1
		}
		got <- tok
		return nil
	}})
	advanceWhenWaiting(t, clock, time.Hour)
	require.Positive(t, testenv.Recv(t, got, 10*time.Second, "the run's token"), "a run's token is positive")
}

// A Stop that comes while a claim waits on the store does not cut the
// claim off (a cancelled commit can land and still report an error: the
// row then said the node ran a tick it never started, until its expiry).
// The claim completes, and the won tick is handed back: its row expires at
// once, and a live replica's reaper runs it.
func TestStopDuringClaim(t *testing.T) {
	t.Parallel()
	r := pgReplica(t, pgURL(t))
	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fire := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	log := &runLog{}
	job := schedule.Job{Name: "stopping", Every: time.Hour, LockAtMostFor: time.Minute, Run: func(ctx context.Context) error {
		log.record(ctx)
		return nil
	}}
	s, err := schedule.New(&schedule.Config{Node: "stopping", Store: r.store, Clock: clock, OnEvent: log.onEvent})
	require.NoError(t, err)
	require.NoError(t, s.Add(job))
	ctx, end := context.WithCancel(context.Background())
	defer end()
	require.NoError(t, s.Start(ctx)) // ending ctx stops it, as Stop does
	t.Cleanup(func() { stop(t, s) })

	// Another transaction holds the tick's key: the claim's insert waits.
	tx, err := r.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(t.Context(), `INSERT INTO aegis_schedule_run (job, fire_at, token, node, attempt, state, started_at, expires_at)
		VALUES ('stopping', $1, 1, 'x', 1, 'running', now(), now())`, fire)
	require.NoError(t, err)
	advanceWhenWaiting(t, clock, time.Hour)
	waitFor(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, r.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`).Scan(&n))
		return n > 0
	}, "the claim waits for the other transaction")
	end()                                        // the scheduler stops while its claim waits
	require.NoError(t, tx.Rollback(t.Context())) // the claim's insert lands
	stop(t, s)

	require.Zero(t, log.count(), "nothing runs while stopping")
	skipped := log.eventsOf(schedule.EventSkipped)
	require.Len(t, skipped, 1)
	require.Equal(t, "stopping: the run is handed back to the reapers", skipped[0].Reason)
	var state string
	var expired bool
	require.NoError(t, r.pool.QueryRow(t.Context(), `SELECT state, expires_at <= now() FROM aegis_schedule_run WHERE job = 'stopping'`).Scan(&state, &expired))
	require.Equal(t, "running", state)
	require.True(t, expired, "handed back: the reapers' at once, not after LockAtMostFor")

	// A live replica's reaper runs it, with a greater token.
	start(t, &schedule.Config{Node: "live", Store: pgReplica(t, pgURL(t)).store, Clock: clock, ReapInterval: 20 * time.Millisecond, OnEvent: log.onEvent}, job)
	waitFor(t, 10*time.Second, func() bool { return log.count() == 1 }, "the live replica's reaper runs the tick")
	run := log.snapshot()[0]
	require.Equal(t, fire, run.Fire.UTC())
	require.Equal(t, "live", run.Node)
	require.Equal(t, 2, run.Attempt)
	require.Equal(t, skipped[0].Token+1, run.Token)
}

// LeaseFrom gives a lease-mode run its lease (what fence.CheckLease
// takes): the job's key, the run's token and the lease's owner; a run-key
// run has none.
func TestLeaseFrom(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"lease", "run-key"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := pgReplica(t, pgURL(t))
			type seen struct {
				lease aegis.Lease
				ok    bool
				token aegis.Token
			}
			got := make(chan seen, 1)
			job := schedule.Job{Name: "leased", Every: time.Hour, Run: func(ctx context.Context) error {
				l, ok := schedule.LeaseFrom(ctx)
				tok, _ := schedule.TokenFrom(ctx)
				got <- seen{l, ok, tok}
				return nil
			}}
			clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := &schedule.Config{Node: "n", Clock: clock}
			if mode == "lease" {
				cfg.Locker = r.locker
			} else {
				cfg.Store = r.store
			}
			start(t, cfg, job)
			advanceWhenWaiting(t, clock, time.Hour)
			s := testenv.Recv(t, got, 10*time.Second, "the run to start")
			if mode == "run-key" {
				require.False(t, s.ok, "a run-key run has no lease")
				return
			}
			require.True(t, s.ok, "a lease-mode run has its lease")
			require.Equal(t, "leased", s.lease.Key)
			require.Equal(t, s.token, s.lease.Token)
			require.NotEmpty(t, s.lease.Owner)
			_, ok := schedule.LeaseFrom(t.Context())
			require.False(t, ok, "outside a run")
		})
	}
}

// A lease granted after the tick's starting deadline is not run: the
// grant may follow another replica's whole run of the tick (its lease
// released after LockAtLeastFor), and running it would run the tick twice.
// The grant is held up here by a row lock on the job's lease row, as a
// paused replica's open transaction would.
func TestLeaseGrantPastDeadlineIsMisfire(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := pgReplica(t, pgURL(t))
	l, err := r.locker.TryAcquire(ctx, "late", time.Second)
	require.NoError(t, err)
	require.NoError(t, r.locker.Release(ctx, l))
	tx, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, err = tx.Exec(ctx, `SELECT 1 FROM aegis_lease WHERE key = 'late' FOR UPDATE`)
	require.NoError(t, err)

	ran := make(chan struct{}, 1)
	job := schedule.Job{Name: "late", Every: time.Hour, StartingDeadline: time.Second, Run: func(context.Context) error {
		ran <- struct{}{}
		return nil
	}}
	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := &runLog{}
	start(t, &schedule.Config{Node: "n", Clock: clock, Locker: r.locker, OnEvent: log.onEvent}, job)
	advanceWhenWaiting(t, clock, time.Hour)
	waitFor(t, 10*time.Second, func() bool {
		var waiting int
		err := r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%aegis_lease%'`).Scan(&waiting)
		return err == nil && waiting > 0
	}, "the grant waits on the row lock")
	clock.Advance(2 * time.Second) // past the starting deadline
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, func() bool { return len(log.eventsOf(schedule.EventMisfired)) > 0 }, "a misfired event for the late grant")
	select {
	case <-ran:
		t.Fatal("the job ran on a grant past its starting deadline")
	default:
	}
	l, err = r.locker.TryAcquire(ctx, "late", time.Second)
	require.NoError(t, err, "the late grant was released")
	require.NoError(t, r.locker.Release(ctx, l))
}
