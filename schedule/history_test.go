package schedule_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// A holder that stops past its run row's expiry (as SIGSTOP would stop
// it) and a successor that reclaims the tick leave two attempts of that
// tick on record: the successor's succeeded, the holder's lost and, once
// it ran to its end, refused; the holder's scheduler reports the tick ran
// twice.
func TestAttemptHistoryKeepsEveryAttempt(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db string, r *replica) {
		ctx := t.Context()
		clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		resume := make(chan struct{})
		var resumeOnce sync.Once
		t.Cleanup(func() { resumeOnce.Do(func() { close(resume) }) })
		started := make(chan struct{}, 1)
		holderLog := &runLog{}
		// The holder's run row expires after 300ms (no keep-alive, as a
		// stopped process renews nothing); its job goes on until resumed.
		holder := start(t, &schedule.Config{Node: "holder", Store: r.store, Clock: clock, ReapInterval: time.Hour, OnEvent: holderLog.onEvent}, schedule.Job{
			Name: "nightly", Every: time.Hour, LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true,
			Run: func(context.Context) error { started <- struct{}{}; block(resume, time.Minute); return nil },
		})
		advanceWhenWaiting(t, clock, time.Hour)
		testenv.Recv(t, started, 10*time.Second, "the holder's run")

		successorLog := &runLog{}
		start(t, &schedule.Config{Node: "successor", Store: r.store, Clock: clock, ReapInterval: 20 * time.Millisecond, OnEvent: successorLog.onEvent}, schedule.Job{
			Name: "nightly", Every: time.Hour, LockAtMostFor: 5 * time.Second,
			Run: func(ctx context.Context) error { successorLog.record(ctx); return nil },
		})
		reader, err := schedule.NewRunReader(ctx, r.db, nil)
		require.NoError(t, err)
		var as []schedule.Attempt
		waitFor(t, 10*time.Second, func() bool {
			as, err = reader.Attempts(ctx, "nightly", 10)
			return err == nil && len(as) == 2 && as[0].Outcome == "succeeded"
		}, "the successor's attempt succeeded: %+v %v", &as, &err)
		require.Equal(t, "successor", as[0].Node)
		require.Equal(t, 2, as[0].Attempt)
		require.Equal(t, "holder", as[1].Node)
		require.Equal(t, 1, as[1].Attempt)
		require.Equal(t, "lost", as[1].Outcome, "the holder's attempt, taken over while it went on")
		require.Contains(t, as[1].Error, "attempt 2 on successor took the tick")
		require.Equal(t, as[0].Fire, as[1].Fire, "one tick, two attempts")
		require.Greater(t, as[0].Token, as[1].Token)

		resumeOnce.Do(func() { close(resume) })
		waitFor(t, 10*time.Second, func() bool {
			as, err = reader.Attempts(ctx, "nightly", 10)
			return err == nil && len(as) == 2 && as[1].Outcome == "refused"
		}, "the holder's end, refused: %+v %v", &as, &err)
		require.Contains(t, as[1].Error, "the run ended succeeded")
		require.False(t, as[1].Ended.IsZero())
		waitFor(t, 5*time.Second, func() bool { return len(holderLog.eventsOf(schedule.EventTwice)) == 1 }, "EventTwice on the holder")
		stop(t, holder)

		runs, err := r.store.Runs(ctx, "nightly", 10)
		require.NoError(t, err)
		require.Len(t, runs, 1, "the run table keeps one row per tick")
		require.Equal(t, "succeeded", runs[0].State)
		require.Equal(t, "successor", runs[0].Node)
	})
}

// A catalog schedule that no replica binds (none has its handler) is
// missed at every tick, each recorded once with cause unbound, whichever
// replica saw it first.
func TestMissedTicksOfAnUnboundSchedule(t *testing.T) {
	t.Parallel()
	path := sqlitePath(t)
	r1, r2 := sqliteReplica(t, path), sqliteReplica(t, path)
	ctx := t.Context()
	cat1, err := schedule.NewCatalog(ctx, r1.db, nil)
	require.NoError(t, err)
	cat2, err := schedule.NewCatalog(ctx, r2.db, nil)
	require.NoError(t, err)
	_, err = cat1.Put(ctx, schedule.Entry{Name: "orphan", Every: time.Minute, Handler: "absent"})
	require.NoError(t, err)
	// The clock starts at a minute after the schedule's effective time
	// (the store's, now): its ticks are the next minutes from there.
	t0 := time.Now().Truncate(time.Minute).Add(2 * time.Minute)
	clock := schedule.NewManualClock(t0)
	var mu sync.Mutex
	var missed []schedule.Event
	onEvent := func(e schedule.Event) {
		if e.Kind == schedule.EventMissed {
			mu.Lock()
			missed = append(missed, e)
			mu.Unlock()
		}
	}
	for i, rc := range []struct {
		r   *replica
		cat *schedule.Catalog
	}{{r1, cat1}, {r2, cat2}} {
		s, err := schedule.New(&schedule.Config{Node: []string{"r1", "r2"}[i], Store: rc.r.store, Catalog: rc.cat, Clock: clock, ReapInterval: 20 * time.Millisecond, OnEvent: onEvent})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
		testenv.Recv(t, s.Ready(), 10*time.Second, "the catalog read")
	}
	// Three ticks and their starting deadlines (10s) twice over, as a
	// replica without the schedule waits: the fourth is not yet due.
	clock.Advance(3*time.Minute + 30*time.Second)
	reader, err := schedule.NewRunReader(ctx, r1.db, nil)
	require.NoError(t, err)
	var ms []schedule.MissedTick
	waitFor(t, 10*time.Second, func() bool {
		ms, err = reader.Missed(ctx, "orphan", 10)
		return err == nil && len(ms) == 3
	}, "three missed ticks: %+v %v", &ms, &err)
	for i, m := range ms {
		require.Equal(t, t0.Add(time.Duration(3-i)*time.Minute).UTC(), m.Fire.UTC(), "tick %d", i)
		require.Equal(t, schedule.CauseUnbound, m.Cause)
		require.True(t, strings.HasPrefix(m.Detail, "no replica bound it: "), m.Detail)
		require.Contains(t, m.Detail, `has no handler "absent"`)
	}
	waitFor(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(missed) == 3 }, "one EventMissed per tick, from the replica that recorded it")
	as, err := reader.Attempts(ctx, "orphan", 10)
	require.NoError(t, err)
	require.Empty(t, as)
}

// missedOf waits until the reader has n missed ticks of job, and returns
// them, newest first.
func missedOf(t *testing.T, reader *schedule.RunReader, job string, n int) []schedule.MissedTick {
	t.Helper()
	var (
		ms  []schedule.MissedTick
		err error
	)
	waitFor(t, 10*time.Second, func() bool {
		ms, err = reader.Missed(t.Context(), job, 100)
		return err == nil && len(ms) >= n
	}, "%d missed ticks of %s: %+v %v", n, job, &ms, &err)
	require.Len(t, ms, n)
	return ms
}

// A replica that starts after the last run on record records the ticks
// in between as missed, cause down (none was running), and runs the tick
// that is on time.
func TestMissedTicksWhileNoReplicaRan(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := schedule.NewManualClock(t0)
	log := &runLog{}
	job := schedule.Job{Name: "report", Every: time.Minute, Misfire: schedule.MisfireSkip, Run: func(ctx context.Context) error { log.record(ctx); return nil }}
	first := start(t, &schedule.Config{Node: "first", Store: r.store, Clock: clock}, job)
	advanceWhenWaiting(t, clock, time.Minute)
	waitFor(t, 10*time.Second, func() bool { return log.count() == 1 }, "the first tick's run")
	stop(t, first)

	clock.Advance(5 * time.Minute) // no replica runs: t0+2m … t0+5m pass, t0+6m is now
	later := start(t, &schedule.Config{Node: "later", Store: r.store, Clock: clock, ReapInterval: 20 * time.Millisecond}, job)
	reader, err := schedule.NewRunReader(t.Context(), r.db, nil)
	require.NoError(t, err)
	ms := missedOf(t, reader, "report", 4)
	for i, m := range ms {
		require.Equal(t, t0.Add(time.Duration(5-i)*time.Minute), m.Fire.UTC())
		require.Equal(t, schedule.CauseDown, m.Cause, "tick %s", m.Fire)
		require.Equal(t, "later", m.Node)
	}
	waitFor(t, 10*time.Second, func() bool { return log.count() == 2 }, "the tick on time runs")
	stop(t, later)
}

// A tick skipped because a run of an earlier tick was still going (overlap
// forbid) is missed, cause held; a paused catalog schedule's ticks are
// missed, cause paused.
func TestMissedTicksHeldAndPaused(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	ctx := t.Context()
	cat, err := schedule.NewCatalog(ctx, r.db, nil)
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "paused", Every: time.Minute, Handler: "noop"})
	require.NoError(t, err)
	_, err = cat.Pause(ctx, "paused")
	require.NoError(t, err)
	t0 := time.Now().Truncate(time.Minute).Add(2 * time.Minute)
	clock := schedule.NewManualClock(t0)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{}, 1)
	s, err := schedule.New(&schedule.Config{Node: "n1", Store: r.store, Catalog: cat, Clock: clock, ReapInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Handle("noop", func(context.Context, json.RawMessage) error { return nil }))
	require.NoError(t, s.Add(schedule.Job{Name: "slow", Every: time.Minute, LockAtMostFor: time.Hour, Overlap: schedule.OverlapForbid,
		Run: func(ctx context.Context) error {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })
	testenv.Recv(t, s.Ready(), 10*time.Second, "the catalog read")
	advanceWhenWaiting(t, clock, time.Minute)
	testenv.Recv(t, started, 10*time.Second, "the first tick's run")
	advanceWhenWaiting(t, clock, time.Minute+30*time.Second) // the second tick, skipped, and its deadline twice over

	reader, err := schedule.NewRunReader(ctx, r.db, nil)
	require.NoError(t, err)
	held := missedOf(t, reader, "slow", 1)
	require.Equal(t, t0.Add(2*time.Minute).UTC(), held[0].Fire.UTC())
	require.Equal(t, schedule.CauseHeld, held[0].Cause)
	require.Contains(t, held[0].Detail, "a run of an earlier tick was still going")
	paused := missedOf(t, reader, "paused", 2)
	for _, m := range paused {
		require.Equal(t, schedule.CausePaused, m.Cause)
	}
}

// A tick its replica's loop has yet to settle is not the sweep's to
// record, even past its deadline: a loop catching up (MisfireCatchUp, one
// tick after the other) fires its second tick only once the first's run
// ends, and runs it; the sweep, which meanwhile records another job's
// missed ticks twice over, does not record it missed (down) first.
func TestMissedTicksLeaveTheLoopItsTicks(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := schedule.NewManualClock(t0)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	started := make(chan struct{}, 1)
	log, events := &runLog{}, &runLog{}
	start(t, &schedule.Config{Node: "n1", Store: r.store, Clock: clock, ReapInterval: 20 * time.Millisecond, OnEvent: events.onEvent},
		schedule.Job{Name: "catchup", Every: time.Minute, Misfire: schedule.MisfireCatchUp, CatchUpMax: 2,
			Run: func(ctx context.Context) error {
				log.record(ctx)
				if run, _ := schedule.RunFrom(ctx); run.Fire.Equal(t0.Add(time.Minute)) {
					started <- struct{}{}
					block(release, time.Minute)
				}
				return nil
			}},
		// marker's ticks are all missed (misfire): its records show the
		// sweep's passes.
		schedule.Job{Name: "marker", Every: 10 * time.Second, StartingDeadline: time.Second, Misfire: schedule.MisfireSkip,
			Run: func(context.Context) error { return nil }})
	waitFor(t, 10*time.Second, func() bool { n, _ := clock.Waiters(); return n == 2 }, "both loops wait on the clock")
	markerMissed := func(f time.Time) bool {
		for _, e := range events.eventsOf(schedule.EventMissed) {
			if e.Job == "marker" && e.Fire.Equal(f) {
				return true
			}
		}
		return false
	}
	// catchup's ticks t0+1m and t0+2m are late: the first runs (held by
	// the test), the second waits for it to end.
	clock.Advance(2*time.Minute + 35*time.Second)
	testenv.Recv(t, started, 10*time.Second, "the first tick's run")
	waitFor(t, 10*time.Second, func() bool { return markerMissed(t0.Add(2*time.Minute + 30*time.Second)) }, "a sweep records marker's ticks")
	clock.Advance(10 * time.Second) // catchup's next tick (t0+3m) is not yet due
	waitFor(t, 10*time.Second, func() bool { return markerMissed(t0.Add(2*time.Minute + 40*time.Second)) }, "a later sweep records marker's next tick")

	releaseOnce.Do(func() { close(release) })
	waitFor(t, 10*time.Second, func() bool { return log.count() == 2 }, "the second tick's run")
	require.Equal(t, map[time.Time]int{t0.Add(time.Minute): 1, t0.Add(2 * time.Minute): 1}, log.perTick())
	reader, err := schedule.NewRunReader(t.Context(), r.db, nil)
	require.NoError(t, err)
	ms, err := reader.Missed(t.Context(), "catchup", 10)
	require.NoError(t, err)
	require.Empty(t, ms, "catchup's ticks ran: none is missed")
}

// lateLoopClock is a ManualClock that moves by late right after its first
// reading, Start's: the job loops, which read it next, start late, as
// goroutines do on a loaded machine.
type lateLoopClock struct {
	*schedule.ManualClock
	late time.Duration
	once sync.Once
}

func (c *lateLoopClock) Now() time.Time {
	now := c.ManualClock.Now()
	c.once.Do(func() { c.ManualClock.Advance(c.late) })
	return now
}

// A tick due between Start and its loop's start (the loop's goroutine run
// late) is the loop's: it runs, and the sweep, which walks the ticks from
// Start, does not record it missed (down, as none ran).
func TestMissedTicksNoneBetweenStartAndTheLoop(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &lateLoopClock{ManualClock: schedule.NewManualClock(t0), late: time.Minute + time.Second}
	log := &runLog{}
	start(t, &schedule.Config{Node: "n1", Store: r.store, Clock: clock, ReapInterval: 20 * time.Millisecond},
		schedule.Job{Name: "report", Every: time.Minute, Run: func(ctx context.Context) error { log.record(ctx); return nil }})
	waitFor(t, 10*time.Second, func() bool { n, _ := clock.Waiters(); return n == 1 }, "the loop waits on the clock")
	clock.Advance(20 * time.Second) // past t0+1m's deadline (10s) and a sweep's wait; t0+2m is not yet due
	reader, err := schedule.NewRunReader(t.Context(), r.db, nil)
	require.NoError(t, err)
	var ms []schedule.MissedTick
	waitFor(t, 10*time.Second, func() bool {
		ms, err = reader.Missed(t.Context(), "report", 10)
		return err == nil && (log.count() > 0 || len(ms) > 0)
	}, "t0+1m runs or is recorded missed: %v", &err)
	require.Equal(t, map[time.Time]int{t0.Add(time.Minute): 1}, log.perTick(), "t0+1m ran; missed: %+v", ms)
	require.Empty(t, ms)
}
