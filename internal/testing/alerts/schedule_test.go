package alerts_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/alerts"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// scheduleFaults are the alerts TestScheduleAlerts's faults fire.
var scheduleFaults = map[string][]labels{
	"AegisScheduleRunsFailing":     {{"namespace": "default", "schedule": "fails"}},
	"AegisScheduleRunLost":         {{"namespace": "default", "schedule": "lossy"}, {"namespace": "default", "schedule": "twice"}},
	"AegisScheduleStartsLate":      {{"namespace": "default", "schedule": "late"}},
	"AegisScheduleHandlersMissing": {{"namespace": "default"}},
	"AegisScheduleMissedTicks":     {{"namespace": "default", "schedule": "fails", "cause": "held"}},
	"AegisScheduleUnbound":         {{"namespace": "default", "schedule": "orphan"}},
	"AegisScheduleRanTwice":        {{"namespace": "default", "schedule": "twice"}},
}

// Two run-key replicas on one SQLite file, with a catalog, produce for
// real what the schedule's alerts watch: a job that fails, whose first run
// holds its key past the next ticks' deadline (overlap forbid: missed,
// held), a run whose run row is taken from it (as a reaper's reclaim after
// a pause would), a run that its own replica's reaper reclaims while it
// goes on to its end (the tick runs twice), a replica whose clock lags two
// minutes (its ticks start late by the real clock), and a catalog schedule
// whose handler no replica has (missed, unbound). Every job's starting
// deadline but the orphan's is 10s, so that a loaded machine does not make
// them miss. The registry is scraped before the faults (every series
// there; the jobs' faults start after it) and after: each alert fires on
// its schedule and no other alert fires. A healthy replica's two scrapes
// fire nothing.
func TestScheduleAlerts(t *testing.T) {
	t.Parallel()
	faulty := faultySchedules(t)
	healthy := healthySchedule(t)
	requireReadScraped(t, "aegis_schedule_", func(string) bool { return true }, faulty...)
	require.NoError(t, alerts.Test(rulesPath,
		alerts.Case{Name: "faults", Scrapes: faulty, Fire: scheduleFaults},
		alerts.Case{Name: "healthy", Scrapes: healthy},
	))
}

func faultySchedules(t *testing.T) [][]alerts.Sample {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "schedule.db")
	reg := prometheus.NewRegistry()
	events := &eventLog{}
	catalog, err := schedule.NewCatalog(ctx, openSQLite(t, path), nil)
	require.NoError(t, err)
	_, err = catalog.Put(ctx, schedule.Entry{Name: "orphan", Every: time.Second, Handler: "absent"})
	require.NoError(t, err)

	failing, releaseFail, releaseTwice := make(chan struct{}), make(chan struct{}), make(chan struct{})
	lossy := make(chan schedule.Run, 1)
	var failOnce, lossOnce, twiceOnce atomic.Bool
	// The faults start once the test has scraped the registry before them
	// (armed): a fault that came earlier, on a slow machine, would be in
	// both scrapes and fire nothing.
	armed := make(chan struct{})
	isArmed := func() bool {
		select {
		case <-armed:
			return true
		default:
			return false
		}
	}
	const deadline = 10 * time.Second
	n1 := startScheduler(t, &schedule.Config{Node: "n1", Store: newStore(t, path), Catalog: catalog, Registerer: reg, OnEvent: events.add},
		schedule.Job{Name: "ok", Every: time.Second, StartingDeadline: deadline, Run: func(context.Context) error { return nil }},
		schedule.Job{Name: "twice", Every: time.Second, StartingDeadline: deadline, Overlap: schedule.OverlapAllow, LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true,
			Run: func(context.Context) error {
				if isArmed() && !twiceOnce.Swap(true) {
					wait(releaseTwice) // stopped: it renews nothing, and its run row expires
				}
				return nil
			}},
		schedule.Job{Name: "fails", Every: time.Second, StartingDeadline: deadline, Overlap: schedule.OverlapForbid, Run: func(context.Context) error {
			if isArmed() && !failOnce.Swap(true) {
				close(failing)
				wait(releaseFail)
			}
			return errors.New("the export failed")
		}},
		schedule.Job{Name: "lossy", Every: time.Second, StartingDeadline: deadline, Overlap: schedule.OverlapAllow, LockAtMostFor: 900 * time.Millisecond, Run: func(ctx context.Context) error {
			if isArmed() && !lossOnce.Swap(true) {
				r, _ := schedule.RunFrom(ctx)
				lossy <- r
				<-ctx.Done() // cancelled once the keep-alive finds the run row lost
			}
			return nil // a job that ignores its cancellation: it ends well, its outcome is not recorded
		}},
	)
	// A second replica whose clock is two minutes behind.
	n2 := startScheduler(t, &schedule.Config{Node: "n2", Store: newStore(t, path), Catalog: catalog, Registerer: reg, OnEvent: events.add,
		Clock: schedule.OffsetClock(-2 * time.Minute)},
		schedule.Job{Name: "late", Every: time.Second, StartingDeadline: deadline, Run: func(context.Context) error { return nil }},
	)
	testenv.Recv(t, n1.Ready(), 30*time.Second, "n1 to bind the catalog")
	testenv.Recv(t, n2.Ready(), 30*time.Second, "n2 to bind the catalog")
	failed := func(e schedule.Event) bool { return e.Err != nil }
	events.wait(t, "a run of ok, twice, fails and lossy to end, one of late to start", func(count func(schedule.EventKind, string, func(schedule.Event) bool) int) bool {
		return count(schedule.EventDone, "ok", nil) >= 1 && count(schedule.EventRun, "late", nil) >= 1 &&
			count(schedule.EventDone, "twice", nil) >= 1 && count(schedule.EventDone, "fails", failed) >= 1 &&
			count(schedule.EventDone, "lossy", nil) >= 1 // their series are there before the faults
	})
	before, err := alerts.Scrape(reg)
	require.NoError(t, err)
	lateRuns := events.count(schedule.EventRun, "late", nil)
	failures := events.count(schedule.EventDone, "fails", failed)
	lossyDone := events.count(schedule.EventDone, "lossy", nil)
	close(armed)
	testenv.Recv(t, failing, 30*time.Second, "the failing job's first run after the scrape")
	run := testenv.Recv(t, lossy, 30*time.Second, "the lossy job's first run after the scrape")

	// The failing job's first run holds its key while the next ticks'
	// deadline passes; the "twice" job's first run is reclaimed by its
	// replica's reaper, then goes on to its end.
	events.wait(t, "a tick of fails missed, held, and twice's first run reclaimed", func(count func(schedule.EventKind, string, func(schedule.Event) bool) int) bool {
		return count(schedule.EventMissed, "fails", func(e schedule.Event) bool { return e.Cause == schedule.CauseHeld }) >= 1 &&
			count(schedule.EventReclaim, "twice", nil) >= 1
	})
	close(releaseFail)
	close(releaseTwice)
	_, err = openSQLite(t, path).ExecContext(ctx, `UPDATE aegis_schedule_run SET token = token + 1 WHERE job = 'lossy' AND token = ?`, int64(run.Token))
	require.NoError(t, err)
	events.wait(t, "the failure, the loss, and another late start", func(count func(schedule.EventKind, string, func(schedule.Event) bool) int) bool {
		return count(schedule.EventDone, "fails", failed) > failures && count(schedule.EventLost, "lossy", nil) >= 1 &&
			count(schedule.EventDone, "lossy", nil) > lossyDone && count(schedule.EventRun, "late", nil) > lateRuns &&
			count(schedule.EventTwice, "twice", nil) >= 1 && count(schedule.EventMissed, "orphan", nil) >= 1
	})
	after, err := alerts.Scrape(reg)
	require.NoError(t, err)
	return [][]alerts.Sample{before, after}
}

// healthySchedule scrapes a replica whose job succeeds, after its first
// and its second run.
func healthySchedule(t *testing.T) [][]alerts.Sample {
	path := filepath.Join(t.TempDir(), "schedule.db")
	reg := prometheus.NewRegistry()
	events := &eventLog{}
	startScheduler(t, &schedule.Config{Node: "n3", Store: newStore(t, path), Registerer: reg, OnEvent: events.add},
		schedule.Job{Name: "ok", Every: time.Second, Run: func(context.Context) error { return nil }})
	var scrapes [][]alerts.Sample
	for n := 1; n <= 2; n++ {
		events.wait(t, "a run of ok to end", func(count func(schedule.EventKind, string, func(schedule.Event) bool) int) bool {
			return count(schedule.EventDone, "ok", nil) >= n
		})
		s, err := alerts.Scrape(reg)
		require.NoError(t, err)
		scrapes = append(scrapes, s)
	}
	return scrapes
}

func openSQLite(t *testing.T, path string) *sql.DB {
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// newStore is a replica's run store on the SQLite file: its own
// connections, as another process would have.
func newStore(t *testing.T, path string) *schedule.Store {
	st, err := schedule.NewStore(t.Context(), openSQLite(t, path), nil)
	require.NoError(t, err)
	return st
}

func startScheduler(t *testing.T, cfg *schedule.Config, jobs ...schedule.Job) *schedule.Scheduler {
	s, err := schedule.New(cfg)
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, s.Add(j))
	}
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { s.Stop(); close(done) }()
		testenv.Recv(t, done, 30*time.Second, "the scheduler to stop")
	})
	return s
}

// wait waits for ch to be closed, at most 30s: a job held by the test
// returns even when the test fails before releasing it.
func wait(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
	}
}

// eventLog records a scheduler's events.
type eventLog struct {
	mu     sync.Mutex
	events []schedule.Event
}

func (l *eventLog) add(e schedule.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// count counts the events of kind and job that match (all when match is
// nil).
func (l *eventLog) count(kind schedule.EventKind, job string, match func(schedule.Event) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Kind == kind && e.Job == job && (match == nil || match(e)) {
			n++
		}
	}
	return n
}

// wait polls cond for 30s at most; the test fails, naming what it waited
// for.
func (l *eventLog) wait(t *testing.T, what string, cond func(count func(schedule.EventKind, string, func(schedule.Event) bool) int) bool) {
	t.Helper()
	require.Eventually(t, func() bool { return cond(l.count) }, 30*time.Second, 10*time.Millisecond, "waited 30s for %s", what)
}
