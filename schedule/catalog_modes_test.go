package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// requirePauseHolds pauses job and fails when a run of it starts after
// Pause returned, while its next ticks come.
func requirePauseHolds(t *testing.T, cat *schedule.Catalog, log *catalogLog, job string) {
	t.Helper()
	_, err := cat.Pause(context.Background(), job)
	require.NoError(t, err)
	paused := time.Now()
	time.Sleep(2500 * time.Millisecond) // the scenario: ticks come and must not run
	for _, r := range log.snapshot() {
		require.False(t, r.run.Job == job && r.started.After(paused), "run %+v started after Pause returned", r.run)
	}
}

// requireOncePerTick fails when a tick of job ran more than once.
func requireOncePerTick(t *testing.T, log *catalogLog, job string) map[time.Time]int {
	t.Helper()
	ticks := log.perTick(job)
	for _, f := range sortedTicks(ticks) {
		require.Equal(t, 1, ticks[f], "tick %s of %s ran %d times", f, job, ticks[f])
	}
	return ticks
}

// Lease mode runs catalog schedules under the row's LockAtMostFor and
// LockAtLeastFor, the lease's token in the context; a pause is seen by
// the claim.
func TestCatalogLeaseMode(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	log := &catalogLog{}
	var admin *schedule.Catalog
	for i := range 2 {
		r := pgReplica(t, url)
		cat := openCatalog(t, r, nil)
		admin = cat
		node := fmt.Sprintf("node-%d", i)
		s, err := schedule.New(&schedule.Config{Node: node, Locker: r.locker, Catalog: cat})
		require.NoError(t, err)
		require.NoError(t, s.Handle("echo", log.handler(node)))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
	}
	_, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo", LockAtMostFor: 5 * time.Second, LockAtLeastFor: 500 * time.Millisecond})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return len(log.perTick("tick")) >= 3 }, "three ticks run in lease mode")
	requireOncePerTick(t, log, "tick")
	for _, r := range log.snapshot() {
		require.Positive(t, r.run.Token, "the lease's token is in the context")
		require.Positive(t, r.run.Version)
	}
	requirePauseHolds(t, admin, log, "tick")
}

// Leader mode: the leader enqueues the catalog's ticks, a worker runs
// them with the row's args; a paused schedule's enqueued run does not run.
func TestCatalogLeaderMode(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	log := &catalogLog{}
	var admin *schedule.Catalog
	for i := range 2 {
		node := fmt.Sprintf("node-%d", i)
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close(); pool.Close() })
		cat, err := schedule.NewCatalog(ctx, db, nil)
		require.NoError(t, err)
		admin = cat
		locker, err := pglease.New(pool, nil)
		require.NoError(t, err)
		e, err := elect.New(locker, "catalog-leader", &elect.Config{Node: node, TTL: 2 * time.Second})
		require.NoError(t, err)
		s, err := schedule.New(&schedule.Config{Node: node, Leader: &schedule.LeaderConfig{Election: e, Pool: pool}, Catalog: cat})
		require.NoError(t, err)
		require.NoError(t, s.Handle("echo", log.handler(node)))
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
	_, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo", Args: json.RawMessage(`{"leader":true}`)})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return len(log.perTick("tick")) >= 3 }, "three ticks run in leader mode")
	requireOncePerTick(t, log, "tick")
	for _, r := range log.snapshot() {
		require.JSONEq(t, `{"leader":true}`, string(r.run.Args))
		require.Positive(t, r.run.Token)
	}
	requirePauseHolds(t, admin, log, "tick")
}

// Two services on one database: each sees only its own schedules and
// runs, though their schedules have the same name.
func TestCatalogNamespaces(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	log := &catalogLog{}
	cats := map[string]*schedule.Catalog{}
	stores := map[string]*schedule.Store{}
	for _, ns := range []string{"billing", "shipping"} {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close(); pool.Close() })
		st, err := schedule.NewStore(ctx, db, &schedule.StoreConfig{Namespace: ns})
		require.NoError(t, err)
		cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: ns})
		require.NoError(t, err)
		cats[ns], stores[ns] = cat, st
		s, err := schedule.New(&schedule.Config{Node: ns + "-node", Store: st, Catalog: cat})
		require.NoError(t, err)
		require.NoError(t, s.Handle("echo", log.handler(ns+"-node")))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
		_, err = cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo", Args: json.RawMessage(fmt.Sprintf(`{"ns":%q}`, ns))})
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, func() bool {
		n := map[string]int{}
		for _, r := range log.snapshot() {
			n[r.run.Namespace]++
		}
		return n["billing"] >= 2 && n["shipping"] >= 2
	}, "both namespaces' ticks run")
	for _, r := range log.snapshot() {
		require.Equal(t, r.run.Namespace+"-node", r.node, "a namespace's schedule runs on its own replica: %+v", r.run)
		require.JSONEq(t, fmt.Sprintf(`{"ns":%q}`, r.run.Namespace), string(r.run.Args))
	}
	for ns, cat := range cats {
		list, err := cat.List(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, ns, list[0].Namespace)
		require.Equal(t, []string{ns + "-node"}, list[0].Replicas, "only the namespace's replica is live in it")
		runs, err := stores[ns].Runs(ctx, "tick", 100)
		require.NoError(t, err)
		require.NotEmpty(t, runs)
		for _, r := range runs {
			require.Equal(t, ns+"-node", r.Node, "%s's runs only: %+v", ns, r)
		}
	}
	require.NoError(t, cats["billing"].Delete(ctx, "tick"))
	_, err := cats["shipping"].Get(ctx, "tick")
	require.NoError(t, err, "a delete in one namespace leaves the other's schedule of the same name")
}

// An edit rebinds the schedule on every replica; a run already going is
// not cancelled by it, and records its outcome.
func TestCatalogEditKeepsRunningRun(t *testing.T) {
	t.Parallel()
	r := pgReplica(t, pgURL(t))
	ctx := context.Background()
	cat := openCatalog(t, r, nil)
	started := make(chan schedule.Run, 1)
	release := make(chan struct{})
	ended := make(chan error, 1)
	s, err := schedule.New(&schedule.Config{Node: "node-0", Store: r.store, Catalog: cat})
	require.NoError(t, err)
	require.NoError(t, s.Handle("slow", func(ctx context.Context, _ json.RawMessage) error {
		run, _ := schedule.RunFrom(ctx)
		select {
		case started <- run:
		default:
			return nil // a later tick
		}
		select {
		case <-release:
			ended <- ctx.Err()
		case <-ctx.Done():
			ended <- context.Cause(ctx)
		case <-time.After(30 * time.Second):
			ended <- fmt.Errorf("not released within 30s")
		}
		return nil
	}))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })
	_, err = cat.Put(ctx, schedule.Entry{Name: "slow", Every: time.Second, Handler: "slow", Overlap: schedule.OverlapAllow})
	require.NoError(t, err)
	var run schedule.Run
	select {
	case run = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no run within 30s")
	}
	e, err := cat.Put(ctx, schedule.Entry{Name: "slow", Every: time.Second, Handler: "slow", Overlap: schedule.OverlapAllow, Args: json.RawMessage(`{"v":2}`)})
	require.NoError(t, err)
	require.Greater(t, e.Version, run.Version)
	waitFor(t, 10*time.Second, func() bool {
		for _, r := range runsOf(t, r.store, "slow") {
			if r.Fire.After(run.Fire) && r.State == "succeeded" {
				return true
			}
		}
		return false
	}, "a tick after the edit runs (the schedule was rebound)")
	close(release)
	select {
	case err := <-ended:
		require.NoError(t, err, "the run going during the edit was not cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end within 30s")
	}
	waitFor(t, 10*time.Second, func() bool {
		for _, rr := range runsOf(t, r.store, "slow") {
			if rr.Fire.Equal(run.Fire) {
				return rr.State == "succeeded"
			}
		}
		return false
	}, "the run going during the edit recorded its outcome")
}

func runsOf(t *testing.T, st *schedule.Store, job string) []schedule.RunRecord {
	t.Helper()
	rows, err := st.Runs(context.Background(), job, 1000)
	require.NoError(t, err)
	return rows
}

// A replica without a schedule's handler leaves it to the others and says
// so once per version: an event, a gauge, and the catalog's MissingOn.
func TestCatalogUnhandled(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	ctx := context.Background()
	log := &catalogLog{}
	var events runLog
	reg := prometheus.NewRegistry()
	var admin *schedule.Catalog
	for _, node := range []string{"node-a", "node-b"} {
		r := pgReplica(t, url)
		cat := openCatalog(t, r, nil)
		admin = cat
		cfg := &schedule.Config{Node: node, Store: r.store, Catalog: cat}
		if node == "node-b" {
			cfg.OnEvent, cfg.Registerer = events.onEvent, reg
		}
		s, err := schedule.New(cfg)
		require.NoError(t, err)
		if node == "node-a" {
			require.NoError(t, s.Handle("echo", log.handler(node)))
		}
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { stop(t, s) })
	}
	_, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo"})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return len(log.perTick("tick")) >= 3 }, "three ticks run on the replica with the handler")
	e, err := admin.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo", Args: json.RawMessage(`{"v":2}`)})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, func() bool { return len(events.eventsOf(schedule.EventUnhandled)) >= 2 }, "the edit reported again")
	time.Sleep(1500 * time.Millisecond) // the scenario: polls come, and must not report again
	un := events.eventsOf(schedule.EventUnhandled)
	require.Len(t, un, 2, "once per version, not per poll: %+v", un)
	require.Contains(t, un[1].Reason, `no handler "echo"`)
	require.Equal(t, float64(1), metricValue(t, reg, "aegis_schedule_unhandled"), "the gauge")
	for _, r := range log.snapshot() {
		require.Equal(t, "node-a", r.node)
	}
	requireOncePerTick(t, log, "tick")
	got, err := admin.Get(ctx, "tick")
	require.NoError(t, err)
	require.Equal(t, e.Version, got.Version)
	require.Equal(t, []string{"node-a"}, got.Replicas)
	require.Equal(t, []string{"node-b"}, got.MissingOn)
}

// metricValue is the value of the one gauge or counter called name in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A pause and a resume while an edit is pending: the old spec's ticks
// between the resume and the edit's instant run, then the new spec's; the
// paused time's ticks do not.
func TestCatalogResumeBeforePendingEdit(t *testing.T) {
	t.Parallel()
	r := pgReplica(t, pgURL(t))
	ctx := context.Background()
	cat := openCatalog(t, r, &schedule.CatalogConfig{EditDelay: 3 * time.Second})
	log := &catalogLog{}
	s, err := schedule.New(&schedule.Config{Node: "node-0", Store: r.store, Catalog: cat})
	require.NoError(t, err)
	require.NoError(t, s.Handle("echo", log.handler("node-0")))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })
	_, err = cat.Put(ctx, schedule.Entry{Name: "tick", Every: time.Second, Handler: "echo"})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return len(log.perTick("tick")) >= 1 }, "the schedule runs")
	edit, err := cat.Put(ctx, schedule.Entry{Name: "tick", Every: 2 * time.Second, Handler: "echo"})
	require.NoError(t, err)
	_, err = cat.Pause(ctx, "tick")
	require.NoError(t, err)
	resumed, err := cat.Resume(ctx, "tick")
	require.NoError(t, err)
	require.Equal(t, edit.EffectiveAt, resumed.EffectiveAt, "the pending edit keeps its instant")
	require.Equal(t, "@every 1s", resumed.Previous)
	require.False(t, resumed.Resumed.IsZero())
	waitFor(t, 30*time.Second, func() bool {
		for f := range log.perTick("tick") {
			if f.After(edit.EffectiveAt.Add(2 * time.Second)) {
				return true
			}
		}
		return false
	}, "the new spec's ticks run")
	ticks := requireOncePerTick(t, log, "tick")
	var want []time.Time // the old spec's ticks from the resume to the edit's instant
	for f := resumed.Resumed.Truncate(time.Second).Add(time.Second); f.Before(edit.EffectiveAt); f = f.Add(time.Second) {
		want = append(want, f)
	}
	require.NotEmpty(t, want)
	for _, f := range want {
		require.Equal(t, 1, ticks[f.UTC()], "the old spec's tick %s, after the resume and before the edit's instant %s", f, edit.EffectiveAt)
	}
	for f := range ticks {
		if !f.Before(edit.EffectiveAt) {
			require.Zero(t, f.UnixMilli()%2000, "tick %s follows the new spec", f)
		}
	}
}

// A crashed run of a paused schedule is not retried after the pause: the
// reaper ends its row abandoned, with a greater token.
func TestCatalogPausedCrashedRunAbandoned(t *testing.T) {
	t.Parallel()
	r := pgReplica(t, pgURL(t))
	ctx := context.Background()
	cat := openCatalog(t, r, nil)
	s, err := schedule.New(&schedule.Config{Node: "node-0", Store: r.store, Catalog: cat, ReapInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	ran := make(chan schedule.Run, 100)
	require.NoError(t, s.Handle("echo", func(ctx context.Context, _ json.RawMessage) error {
		run, _ := schedule.RunFrom(ctx)
		ran <- run
		return nil
	}))
	_, err = cat.Put(ctx, schedule.Entry{Name: "tick", Cron: "0 0 3 * * *", Handler: "echo"})
	require.NoError(t, err)
	_, err = cat.Pause(ctx, "tick")
	require.NoError(t, err)
	// A run a crashed replica left: claimed before the pause, expired since.
	_, err = r.db.ExecContext(ctx, `INSERT INTO aegis_schedule_run (namespace, job, fire_at, token, node, attempt, state, started_at, expires_at)
VALUES ('default', 'tick', now() - interval '1 minute', 7, 'crashed', 1, 'running', now() - interval '1 minute', now() - interval '1 second')`)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })
	waitFor(t, 10*time.Second, func() bool {
		runs := runsOf(t, r.store, "tick")
		return len(runs) == 1 && runs[0].State == "abandoned"
	}, "the crashed run of the paused schedule is abandoned")
	runs := runsOf(t, r.store, "tick")
	require.Equal(t, "crashed", runs[0].Node, "not reclaimed")
	require.Equal(t, 1, runs[0].Attempt)
	require.Greater(t, runs[0].Token, aegis.Token(7), "the crashed runner is fenced")
	require.Empty(t, ran, "nothing ran")
}
