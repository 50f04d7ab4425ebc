package schedule_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// ranTable is where the tests' handler records each run it makes: the
// count of its rows is the count of runs, across every replica.
const ranTable = `CREATE TABLE IF NOT EXISTS ran (job text NOT NULL, fire_ms bigint NOT NULL, token bigint NOT NULL, node text NOT NULL)`

// recordRun is a handler that inserts its run into ran through db.
func recordRun(db *sql.DB, node string) schedule.Handler {
	return func(ctx context.Context, _ json.RawMessage) error {
		r, _ := schedule.RunFrom(ctx)
		_, err := db.ExecContext(ctx, `INSERT INTO ran (job, fire_ms, token, node) VALUES ($1, $2, $3, $4)`, r.Job, r.Fire.UnixMilli(), int64(r.Token), node)
		return err
	}
}

type ranRow struct {
	fire  time.Time
	token int64
	node  string
}

func ranRows(t *testing.T, db *sql.DB, job string) []ranRow {
	t.Helper()
	out, err := readRan(db, job)
	require.NoError(t, err)
	return out
}

// readRan reads the runs of job in ran; ranRows fails the test on an
// error, readRan returns it (for a condition polled on another goroutine).
func readRan(db *sql.DB, job string) ([]ranRow, error) {
	rows, err := db.Query(`SELECT fire_ms, token, node FROM ran WHERE job = $1 ORDER BY fire_ms`, job)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ranRow
	for rows.Next() {
		var r ranRow
		var ms int64
		if err := rows.Scan(&ms, &r.token, &r.node); err != nil {
			return nil, err
		}
		r.fire = time.UnixMilli(ms).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// waitRan polls the runs of job in ran until enough says they are
// enough, for at most 30s; a query error ends the wait with the error.
func waitRan(t *testing.T, db *sql.DB, job string, enough func([]ranRow) bool, what string) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		var rs []ranRow
		if rs, err = readRan(db, job); err != nil {
			return true
		}
		return enough(rs)
	}, 30*time.Second, 20*time.Millisecond, what)
	require.NoError(t, err, what)
}

// events collects the events of every replica.
type events struct {
	mu  sync.Mutex
	all []schedule.Event
}

func (l *events) on(e schedule.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, e)
}

// at returns the events of job at fire time f.
func (l *events) at(job string, f time.Time) []schedule.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []schedule.Event
	for _, e := range l.all {
		if e.Job == job && e.Fire.Equal(f) {
			out = append(out, e)
		}
	}
	return out
}

// settled reports whether each of nodes has fired the run now at f (an
// attempt that ran it, found it taken, or was refused) and the run that
// started has ended: no attempt at f is left.
func (l *events) settled(job string, f time.Time, nodes []string) bool {
	fired := map[string]bool{}
	runs, done := 0, 0
	for _, e := range l.at(job, f) {
		switch e.Kind {
		case schedule.EventRun:
			runs++
			fired[e.Node] = true
		case schedule.EventSkipped, schedule.EventRefused, schedule.EventMisfired:
			fired[e.Node] = true
		case schedule.EventDone:
			done++
		}
	}
	for _, n := range nodes {
		if !fired[n] {
			return false
		}
	}
	return runs == done
}

// One RunNow runs the handler once across three replicas, in every mode
// whose replicas all fire it, recorded with its node and token; the
// schedule (every hour) keeps its version and its ticks.
func TestRunNowOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, db, mode string }{
		{"run-key/postgres", "postgres", "run-key"},
		{"run-key/sqlite", "sqlite", "run-key"},
		{"lease/postgres", "postgres", "lease"},
		{"lease/sqlite", "sqlite", "lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var open func() *replica
			if tc.db == "postgres" {
				url := pgURL(t)
				open = func() *replica { return pgReplica(t, url) }
			} else {
				path := sqlitePath(t)
				open = func() *replica { return sqliteReplica(t, path) }
			}
			ctx := context.Background()
			ev := &events{}
			var (
				admin *schedule.Catalog
				store *schedule.Store
				db    *sql.DB
				nodes []string
			)
			for i := range 3 {
				r := open()
				if i == 0 {
					_, err := r.db.Exec(ranTable)
					require.NoError(t, err)
					admin, store, db = openCatalog(t, r, nil), r.store, r.db
					_, err = admin.Put(ctx, schedule.Entry{Name: "report", Every: time.Hour, Handler: "report"})
					require.NoError(t, err)
				}
				node := fmt.Sprintf("node-%d", i)
				nodes = append(nodes, node)
				cfg := &schedule.Config{Node: node, Catalog: openCatalog(t, r, nil), OnEvent: ev.on}
				if tc.mode == "run-key" {
					cfg.Store = r.store
				} else {
					cfg.Locker = r.locker
				}
				s, err := schedule.New(cfg)
				require.NoError(t, err)
				require.NoError(t, s.Handle("report", recordRun(r.db, node)))
				require.NoError(t, s.Start(ctx))
				t.Cleanup(func() { stop(t, s) })
				testenv.Recv(t, s.Ready(), 20*time.Second, node+" to read the catalog")
			}
			before, err := admin.Get(ctx, "report")
			require.NoError(t, err)

			e, err := admin.RunNow(ctx, "report")
			require.NoError(t, err)
			require.False(t, e.RunNow.IsZero(), "the row has the request")
			require.Equal(t, before.Version, e.Version, "a run now is no edit of the schedule")
			require.Equal(t, before.EffectiveAt, e.EffectiveAt)
			f := e.RunNow

			require.Eventually(t, func() bool { return ev.settled("report", f, nodes) }, 30*time.Second, 10*time.Millisecond,
				"every replica fires the run now at %s and its run ends: %+v", f, ev.at("report", f))
			var once []ranRow
			for _, r := range ranRows(t, db, "report") {
				if r.fire.Equal(f) {
					once = append(once, r)
				} else {
					require.Zero(t, r.fire.UnixMilli()%time.Hour.Milliseconds(), "run %+v is the hourly tick's", r)
				}
			}
			require.Len(t, once, 1, "the handler ran once for the run now: %+v", once)
			require.Positive(t, once[0].token, "the run has a fencing token")
			runs := 0
			for _, x := range ev.at("report", f) {
				if x.Kind == schedule.EventRun {
					runs++
					require.Equal(t, once[0].node, x.Node)
					require.Equal(t, once[0].token, int64(x.Token))
				}
			}
			require.Equal(t, 1, runs)
			if tc.mode == "run-key" {
				recs, err := store.Runs(ctx, "report", 10)
				require.NoError(t, err)
				var rec *schedule.RunRecord
				for i := range recs {
					if recs[i].Fire.Equal(f) {
						rec = &recs[i]
					}
				}
				require.NotNil(t, rec, "the run table records the run now: %+v", recs)
				require.Equal(t, "succeeded", rec.State)
				require.Equal(t, once[0].node, rec.Node)
				require.Equal(t, aegis.Token(once[0].token), rec.Token)
			}
			after, err := admin.Get(ctx, "report")
			require.NoError(t, err)
			require.Equal(t, before.Version, after.Version)
			require.Equal(t, f, after.RunNow)
		})
	}
}

// Leader mode: the leader enqueues the run now under its run key, a worker
// runs it once.
func TestRunNowLeaderMode(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	ev := &events{}
	var (
		admin *schedule.Catalog
		store *schedule.Store
		db    *sql.DB
	)
	for i := range 2 {
		node := fmt.Sprintf("node-%d", i)
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		rdb := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { rdb.Close(); pool.Close() })
		cat, err := schedule.NewCatalog(ctx, rdb, nil)
		require.NoError(t, err)
		if i == 0 {
			_, err := rdb.Exec(ranTable)
			require.NoError(t, err)
			_, err = cat.Put(ctx, schedule.Entry{Name: "report", Every: time.Hour, Handler: "report"})
			require.NoError(t, err)
			admin, db = cat, rdb
			store, err = schedule.NewStore(ctx, rdb, nil)
			require.NoError(t, err)
		}
		locker, err := pglease.New(pool, nil)
		require.NoError(t, err)
		e, err := elect.New(locker, "run-now-leader", &elect.Config{Node: node, TTL: 2 * time.Second})
		require.NoError(t, err)
		s, err := schedule.New(&schedule.Config{Node: node, Leader: &schedule.LeaderConfig{Election: e, Pool: pool}, Catalog: cat, OnEvent: ev.on})
		require.NoError(t, err)
		require.NoError(t, s.Handle("report", recordRun(rdb, node)))
		ws := queue.NewWorkers()
		require.NoError(t, s.AddWorker(ws))
		qc, err := queue.New(pool, &queue.Config{ID: node, Workers: ws, Logger: slog.New(slog.DiscardHandler),
			Queues: map[string]queue.QueueConfig{schedule.DefaultLeaderQueue: {MaxWorkers: 2}}})
		require.NoError(t, err)
		require.NoError(t, s.Start(ctx))
		require.NoError(t, qc.Start(ctx))
		t.Cleanup(func() {
			stop(t, s)
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, qc.Stop(sctx))
		})
	}
	// The leader's binder has read the catalog: it bound the schedule.
	require.Eventually(t, func() bool {
		for _, e := range ev.at("report", time.Time{}) {
			if e.Kind == schedule.EventBound {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "a leader binds the schedule")
	e, err := admin.RunNow(ctx, "report")
	require.NoError(t, err)
	f := e.RunNow
	require.Eventually(t, func() bool {
		enq, done := false, false
		for _, x := range ev.at("report", f) {
			enq = enq || x.Kind == schedule.EventEnqueued
			done = done || x.Kind == schedule.EventDone
		}
		return enq && done
	}, 30*time.Second, 10*time.Millisecond, "the leader enqueues the run now and a worker runs it: %+v", ev.at("report", f))
	var once []ranRow
	for _, r := range ranRows(t, db, "report") {
		if r.fire.Equal(f) {
			once = append(once, r)
		}
	}
	require.Len(t, once, 1)
	require.Positive(t, once[0].token)
	recs, err := store.Runs(ctx, "report", 10)
	require.NoError(t, err)
	found := false
	for _, r := range recs {
		if r.Fire.Equal(f) {
			found = true
			require.Equal(t, "succeeded", r.State)
			require.Equal(t, aegis.Token(once[0].token), r.Token)
		}
	}
	require.True(t, found, "the run table records the run now: %+v", recs)
}

// A run now beside a schedule every second: the regular ticks keep their
// fire times, each runs once, and they go on after the run now.
func TestRunNowKeepsTheTicks(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	ev := &events{}
	var (
		admin *schedule.Catalog
		db    *sql.DB
	)
	for i := range 2 {
		r := pgReplica(t, url)
		if i == 0 {
			_, err := r.db.Exec(ranTable)
			require.NoError(t, err)
			admin, db = openCatalog(t, r, nil), r.db
			_, err = admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "tick"})
			require.NoError(t, err)
		}
		node := fmt.Sprintf("node-%d", i)
		s, err := schedule.New(&schedule.Config{Node: node, Store: r.store, Catalog: openCatalog(t, r, nil), OnEvent: ev.on})
		require.NoError(t, err)
		require.NoError(t, s.Handle("tick", recordRun(r.db, node)))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
	}
	waitRan(t, db, "tick", func(rs []ranRow) bool { return len(rs) >= 2 }, "two ticks run")
	e, err := admin.RunNow(ctx, "tick")
	require.NoError(t, err)
	f := e.RunNow
	waitRan(t, db, "tick", func(rs []ranRow) bool {
		after := 0
		for _, r := range rs {
			if r.fire.After(f.Add(time.Second)) {
				after++
			}
		}
		return after >= 2
	}, "two ticks after the run now run")
	seen := map[time.Time]int{}
	for _, r := range ranRows(t, db, "tick") {
		seen[r.fire]++
		if !r.fire.Equal(f) {
			require.Zero(t, r.fire.UnixMilli()%1000, "run %+v is on the schedule's second", r)
		}
	}
	require.Equal(t, 1, seen[f], "the run now ran once")
	for fire, n := range seen {
		require.Equal(t, 1, n, "tick %s ran %d times", fire, n)
	}
}

// RunNow refuses a paused schedule and an unknown one; a pause after the
// request cancels it, and a second request before any claim replaces the
// first: the replica that starts then runs nothing of the first.
func TestRunNowRefusedAndReplaced(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, _ string, r *replica) {
		ctx := context.Background()
		_, err := r.db.Exec(ranTable)
		require.NoError(t, err)
		admin := openCatalog(t, r, nil)

		_, err = admin.RunNow(ctx, "report")
		require.ErrorIs(t, err, schedule.ErrNotFound)
		require.ErrorContains(t, err, `"report"`)
		_, err = admin.RunNow(ctx, "")
		require.ErrorIs(t, err, aegis.ErrInvalid)

		for _, name := range []string{"report", "cancelled"} {
			_, err = admin.Put(ctx, schedule.Entry{Name: name, Every: time.Hour, Handler: "report"})
			require.NoError(t, err)
		}
		_, err = admin.RunNow(ctx, "missing")
		require.ErrorIs(t, err, schedule.ErrNotFound)
		require.ErrorContains(t, err, `no schedule "missing" in namespace "default"`)

		_, err = admin.Pause(ctx, "report")
		require.NoError(t, err)
		_, err = admin.RunNow(ctx, "report")
		require.ErrorIs(t, err, schedule.ErrPaused)
		require.ErrorContains(t, err, `"report"`)
		e, err := admin.Get(ctx, "report")
		require.NoError(t, err)
		require.True(t, e.RunNow.IsZero(), "a refused RunNow writes nothing")
		e, err = admin.Resume(ctx, "report")
		require.NoError(t, err)

		// Two requests while no replica runs: the second replaces the first.
		first, err := admin.RunNow(ctx, "report")
		require.NoError(t, err)
		// Fire times are the store's milliseconds: wait for the next.
		require.Eventually(t, func() bool {
			e, err = admin.RunNow(ctx, "report")
			return err != nil || e.RunNow.After(first.RunNow)
		}, 10*time.Second, time.Millisecond, "a second RunNow gets a later fire time")
		require.NoError(t, err)
		// Cancelled: a pause and a resume after the request.
		c, err := admin.RunNow(ctx, "cancelled")
		require.NoError(t, err)
		_, err = admin.Pause(ctx, "cancelled")
		require.NoError(t, err)
		_, err = admin.Resume(ctx, "cancelled")
		require.NoError(t, err)

		ev := &events{}
		s, err := schedule.New(&schedule.Config{Node: "late", Store: r.store, Catalog: openCatalog(t, r, nil), OnEvent: ev.on})
		require.NoError(t, err)
		require.NoError(t, s.Handle("report", recordRun(r.db, "late")))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
		nodes := []string{"late"}
		require.Eventually(t, func() bool { return ev.settled("report", e.RunNow, nodes) && ev.settled("cancelled", c.RunNow, nodes) },
			30*time.Second, 10*time.Millisecond, "the replica fires both requests it sees")
		require.Empty(t, ev.at("report", first.RunNow), "the replaced request is not fired")
		var ran []time.Time
		for _, x := range ranRows(t, r.db, "report") {
			ran = append(ran, x.fire)
		}
		require.Equal(t, []time.Time{e.RunNow}, ran, "the second request ran, once")
		require.Empty(t, ranRows(t, r.db, "cancelled"), "a pause cancels the request")
		refused := false
		for _, x := range ev.at("cancelled", c.RunNow) {
			refused = refused || x.Kind == schedule.EventRefused
		}
		require.True(t, refused, "the claim was refused: %+v", ev.at("cancelled", c.RunNow))
	})
}
