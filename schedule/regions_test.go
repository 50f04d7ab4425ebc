package schedule_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

// regionRun is one run of the export handler, as a region saw it.
type regionRun struct {
	run     schedule.Run
	started time.Time
}

// regionLog is what one region's scheduler did: its handler's runs and its
// events. A region on a standby cannot write its own server, so its runs
// are recorded here (the run table on the writer is the other record).
type regionLog struct {
	mu     sync.Mutex
	runs   []regionRun
	events []schedule.Event
}

func (l *regionLog) handler(ctx context.Context, _ json.RawMessage) error {
	r, _ := schedule.RunFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, regionRun{run: r, started: time.Now()})
	return nil
}

func (l *regionLog) onEvent(e schedule.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *regionLog) snapshot() []regionRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]regionRun(nil), l.runs...)
}

func (l *regionLog) eventsOf(kind schedule.EventKind, job string) []schedule.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []schedule.Event
	for _, e := range l.events {
		if e.Kind == kind && (job == "" || e.Job == job) {
			out = append(out, e)
		}
	}
	return out
}

// runsAfter counts the runs of job that fired after t.
func (l *regionLog) runsAfter(job string, t time.Time) int {
	n := 0
	for _, r := range l.snapshot() {
		if r.run.Job == job && r.run.Fire.After(t) {
			n++
		}
	}
	return n
}

// regionTick is a tick of a catalog schedule.
type regionTick struct {
	job  string
	fire time.Time
}

// region is one region's scheduler and its connections to its own server.
type region struct {
	store *schedule.Store
	reg   *prometheus.Registry
	log   *regionLog
	s     *schedule.Scheduler
}

// regionOpen opens a Store and a Catalog on url, as a region's process
// does at start (on a standby too, where the tables exist already).
func regionOpen(t *testing.T, url string) (*schedule.Store, *schedule.Catalog) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close(); pool.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err, "NewStore on %s", url)
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err, "NewCatalog on %s", url)
	return store, cat
}

// regionStart starts a region's run-key scheduler with the export handler.
func regionStart(t *testing.T, node, url string) *region {
	t.Helper()
	r := &region{reg: prometheus.NewRegistry(), log: &regionLog{}}
	store, cat := regionOpen(t, url)
	r.store = store
	s, err := schedule.New(&schedule.Config{Node: node, Store: store, Catalog: cat, Registerer: r.reg, OnEvent: r.log.onEvent})
	require.NoError(t, err)
	require.NoError(t, s.Handle("export", r.log.handler))
	require.NoError(t, s.Start(context.Background()), "Start of %s", node)
	t.Cleanup(func() { stop(t, s) })
	r.s = s
	return r
}

// regionMetric is the value of a counter or gauge of the region's registry.
func regionMetric(t *testing.T, r *region, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

// regionRows is the run table's rows of job on a server, oldest first.
func regionRows(t *testing.T, st *schedule.Store, job string) []schedule.RunRecord {
	t.Helper()
	rs, err := st.Runs(context.Background(), job, 1000)
	require.NoError(t, err)
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	return rs
}

// Seed 000, scenario 1: two regions run a scheduler on one catalog; region
// B's server is a streaming hot standby of region A's. Only the writer
// primary runs the export: region B's claims fail with
// read_only_sql_transaction, which it reports (an event and a metric per
// tick, no retry) and runs nothing. Region A goes down, B's server is
// promoted, and B runs every tick from then on; a pause on the promoted
// server reaches B's binder, which polls there since LISTEN was refused.
func TestRegionStandbyNeverRunsAndTakesOverWhenPromoted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	primary, err := servers.StartPostgres(ctx, filepath.Join(dir, "postgres-primary"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := servers.StartStandby(ctx, filepath.Join(dir, "postgres-standby"), primary, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	// The tables and the schedule, made on the primary, replayed on the
	// standby.
	_, admin := regionOpen(t, primary.URL())
	e, err := admin.Put(ctx, schedule.Entry{Name: "export", Every: time.Second, Handler: "export"})
	require.NoError(t, err)
	require.NoError(t, standby.WaitReplayed(ctx, primary))

	a := regionStart(t, "region-a", primary.URL())
	b := regionStart(t, "region-b", standby.URL())
	bStarted := time.Now()

	// Both regions see every tick: A runs it, B is refused by its server.
	waitFor(t, 30*time.Second, func() bool {
		return len(b.log.eventsOf(schedule.EventNotPrimary, "export")) >= 4 && a.log.runsAfter("export", bStarted.Add(time.Second)) >= 4
	}, "region A runs four ticks of the export and region B is refused four")
	// B's binder polls the catalog it reads on the standby (LISTEN is
	// refused there): a schedule put on the primary reaches it once
	// replayed.
	_, err = admin.Put(ctx, schedule.Entry{Name: "audit", Every: time.Second, Handler: "export"})
	require.NoError(t, err)
	waitFor(t, 20*time.Second, func() bool {
		return len(b.log.eventsOf(schedule.EventBound, "audit")) == 1 && len(b.log.eventsOf(schedule.EventNotPrimary, "audit")) >= 1 &&
			a.log.runsAfter("audit", time.Time{}) >= 1
	}, "region B binds the audit schedule put on the primary, and is refused its ticks; region A runs them")
	notPrimary := b.log.eventsOf(schedule.EventNotPrimary, "export")
	elapsed := time.Since(bStarted)
	aRuns := a.log.snapshot()
	aByTick := map[regionTick]schedule.Run{}
	for _, r := range aRuns {
		k := regionTick{r.run.Job, r.run.Fire.UTC()}
		_, dup := aByTick[k]
		require.False(t, dup, "region A ran %v twice", k)
		if r.run.Job == "export" {
			require.False(t, r.run.Fire.Before(e.EffectiveAt), "run %+v before the schedule took effect at %s", r.run, e.EffectiveAt)
		}
		aByTick[k] = r.run
	}
	for _, job := range []string{"export", "audit"} {
		rows := regionRows(t, a.store, job)
		require.NotEmpty(t, rows, "the primary's run rows of %s", job)
		for _, r := range rows {
			require.Equal(t, "region-a", r.Node, "run row %+v on the primary", r)
			// A row not yet in region A's log is a run just claimed.
			if run, ok := aByTick[regionTick{job, r.Fire}]; ok {
				require.Equal(t, r.Token, run.Token, "%s at %s", job, r.Fire)
			}
		}
	}
	require.Empty(t, b.log.snapshot(), "region B, on the standby, ran a schedule")
	require.Empty(t, b.log.eventsOf(schedule.EventRun, ""), "region B started a run")
	// No retry loop: one claim, so one event, per tick, for ticks since B
	// started (and one or two in flight at the edges).
	bTicks := map[regionTick]bool{}
	for _, ev := range b.log.eventsOf(schedule.EventNotPrimary, "") {
		k := regionTick{ev.Job, ev.Fire.UTC()}
		require.False(t, bTicks[k], "region B reported %v not primary twice: a retry", k)
		bTicks[k] = true
		require.Equal(t, "region-b", ev.Node)
		require.Zero(t, ev.Fire.UnixMilli()%1000, "event %+v is not of a tick of @every 1s", ev)
		require.ErrorContains(t, ev.Err, "read-only", "the event's error is the server's")
	}
	require.LessOrEqual(t, len(notPrimary), int(elapsed/time.Second)+2, "region B's not-primary events of the export in %s", elapsed)
	// No error either: the standby refuses LISTEN (B polls), the heartbeat
	// and the reaper's writes too, and only the claims' refusals are
	// reported, as not-primary.
	require.Empty(t, b.log.eventsOf(schedule.EventError, ""), "region B's errors")
	require.GreaterOrEqual(t, regionMetric(t, b, "aegis_schedule_not_primary_total"), float64(len(bTicks)))
	require.Zero(t, regionMetric(t, a, "aegis_schedule_not_primary_total"))
	require.Zero(t, regionMetric(t, b, "aegis_schedule_runs_total"))
	require.GreaterOrEqual(t, regionMetric(t, a, "aegis_schedule_runs_total"), float64(len(aRuns)))
	require.Equal(t, 2.0, regionMetric(t, b, "aegis_schedule_bound"), "region B binds both schedules: it is refused per tick, not unbound")

	// Failover: region A goes down with its server (every commit of its
	// replayed first: a tick committed on the old primary but not yet
	// streamed could run again after the promotion), and B's is promoted.
	stop(t, a.s)
	aStopped := time.Now()
	require.NoError(t, standby.WaitReplayed(ctx, primary))
	require.NoError(t, primary.Stop())
	require.NoError(t, standby.Promote(ctx))
	promoted := time.Now()
	waitFor(t, 20*time.Second, func() bool {
		for _, r := range regionRows(t, b.store, "export") {
			if r.Node == "region-b" {
				return true
			}
		}
		return false
	}, "region B runs a tick of the export on its promoted server")
	waitFor(t, 20*time.Second, func() bool { return b.log.runsAfter("export", promoted) >= 3 }, "region B runs three ticks of the export after the promotion")
	for _, r := range a.log.snapshot() {
		require.False(t, r.run.Fire.After(aStopped), "region A ran %+v after it stopped", r.run)
	}
	fired := map[regionTick]string{}
	for _, l := range []*regionLog{a.log, b.log} {
		for _, r := range l.snapshot() {
			k := regionTick{r.run.Job, r.run.Fire.UTC()}
			prev, dup := fired[k]
			require.False(t, dup, "%v ran on %s and on %s", k, prev, r.run.Node)
			fired[k] = r.run.Node
		}
	}
	bRows := map[regionTick]schedule.RunRecord{}
	for _, job := range []string{"export", "audit"} {
		for _, r := range regionRows(t, b.store, job) {
			bRows[regionTick{job, r.Fire}] = r
			if r.Fire.After(aStopped) {
				require.Equal(t, "region-b", r.Node, "run row %+v on the promoted server", r)
			}
		}
	}
	for _, r := range b.log.snapshot() {
		row, ok := bRows[regionTick{r.run.Job, r.run.Fire.UTC()}]
		require.True(t, ok, "region B's run %+v has no row on its server", r.run)
		require.Equal(t, "region-b", row.Node)
		require.Equal(t, row.Token, r.run.Token, "%s at %s", r.run.Job, r.run.Fire)
	}
	for _, ev := range b.log.eventsOf(schedule.EventNotPrimary, "") {
		require.False(t, ev.Fire.After(promoted), "region B reported %s at %s not primary after the promotion returned at %s", ev.Job, ev.Fire, promoted)
	}

	// Pause on the promoted server: B's binder unbinds the export, and no
	// run of it starts once Pause has returned, while the audit's two next
	// ticks run.
	_, cat := regionOpen(t, standby.URL())
	unbound := len(b.log.eventsOf(schedule.EventBound, "export"))
	_, err = cat.Pause(ctx, "export")
	require.NoError(t, err)
	paused := time.Now()
	waitFor(t, 10*time.Second, func() bool {
		for _, ev := range b.log.eventsOf(schedule.EventBound, "export")[unbound:] {
			if strings.HasPrefix(ev.Reason, "unbound") {
				return true
			}
		}
		return false
	}, "region B's binder unbinds the paused export")
	waitFor(t, 20*time.Second, func() bool { return b.log.runsAfter("audit", paused) >= 2 }, "region B runs two ticks of the audit after the pause")
	for _, r := range b.log.snapshot() {
		if r.run.Job == "export" {
			require.False(t, r.run.Fire.After(paused), "region B ran tick %s of the export after Pause returned at %s", r.run.Fire, paused)
		}
	}
	for _, r := range regionRows(t, b.store, "export") {
		require.False(t, r.Started.After(paused), "run row %+v started after Pause returned at %s", r, paused)
	}
	require.Equal(t, 1.0, regionMetric(t, b, "aegis_schedule_bound"), "region B binds the audit only")
	require.Empty(t, b.log.eventsOf(schedule.EventError, ""), "region B's errors, through the promotion")
}
