package schedule

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/alerts"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// perSchedule reads one schedule's counters: name (without aegis_schedule_
// and _total) to value.
func perSchedule(m *metrics, job string) map[string]float64 {
	out := map[string]float64{
		"ticks":     testutil.ToFloat64(m.ticks.WithLabelValues(job)),
		"started":   testutil.ToFloat64(m.started.WithLabelValues(job)),
		"succeeded": testutil.ToFloat64(m.succeeded.WithLabelValues(job)),
		"failed":    testutil.ToFloat64(m.failed.WithLabelValues(job)),
		"ran_twice": testutil.ToFloat64(m.twice.WithLabelValues(job)),
		"lost":      testutil.ToFloat64(m.lost.WithLabelValues(job)),
	}
	for _, c := range append(missCauses, "unknown", "new") {
		out["missed/"+string(c)] = testutil.ToFloat64(m.missed.WithLabelValues(job, string(c)))
	}
	return out
}

// fireToStart reads one schedule's histogram.
func fireToStart(t *testing.T, m *metrics, job string) *dto.Histogram {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.fireToStart.WithLabelValues(job).(prometheus.Metric).Write(&out))
	return out.GetHistogram()
}

// Each event counts in its series, and only there.
func TestMetricsObserve(t *testing.T) {
	t.Parallel()
	now := time.Now()
	until := now.Add(time.Minute)
	tests := []struct {
		name  string
		e     Event
		want  map[string]float64 // the counters that are not zero
		delay bool               // a fire-to-start sample
	}{
		{"run, run-key or lease mode", Event{Kind: EventRun, Attempt: 1, Until: until}, map[string]float64{"ticks": 1, "started": 1}, true},
		{"run, a leader mode worker", Event{Kind: EventRun, Attempt: 1}, map[string]float64{"started": 1}, true},
		{"run, a reclaimed attempt", Event{Kind: EventRun, Attempt: 2, Until: until}, map[string]float64{"started": 1}, false},
		{"overlap replace's notice", Event{Kind: EventRun, Reason: "replaced 1 running predecessors"}, nil, false},
		{"skipped", Event{Kind: EventSkipped}, map[string]float64{"ticks": 1}, false},
		{"refused", Event{Kind: EventRefused}, map[string]float64{"ticks": 1}, false},
		{"enqueued", Event{Kind: EventEnqueued}, map[string]float64{"ticks": 1}, false},
		{"done", Event{Kind: EventDone}, map[string]float64{"succeeded": 1}, false},
		{"done with an error", Event{Kind: EventDone, Err: errors.New("boom")}, map[string]float64{"failed": 1}, false},
		{"missed, held", Event{Kind: EventMissed, Cause: CauseHeld}, map[string]float64{"missed/held": 1}, false},
		{"missed, paused", Event{Kind: EventMissed, Cause: CausePaused}, map[string]float64{"missed/paused": 1}, false},
		{"missed, a cause not listed", Event{Kind: EventMissed, Cause: "new"}, map[string]float64{"missed/new": 1}, false},
		{"missed, no cause", Event{Kind: EventMissed}, map[string]float64{"missed/unknown": 1}, false},
		{"twice", Event{Kind: EventTwice}, map[string]float64{"ran_twice": 1}, false},
		{"lost", Event{Kind: EventLost, Err: aegis.ErrLost}, map[string]float64{"lost": 1}, false},
		{"renewed", Event{Kind: EventRenewed, Until: until}, nil, false},
		{"error", Event{Kind: EventError, Err: errors.New("store down")}, nil, false},
		{"misfired", Event{Kind: EventMisfired, Attempt: 3}, nil, false},
		{"unhandled", Event{Kind: EventUnhandled}, nil, false},
		{"bound", Event{Kind: EventBound}, nil, false},
		{"run now", Event{Kind: EventRunNow}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m, err := newMetrics(reg, "ns", "n1")
			require.NoError(t, err)
			e := tt.e
			e.Job, e.Fire = "job", now
			m.observe(e)
			m.observe(Event{Kind: EventDone, Job: "other", Fire: now}) // another schedule's
			got := perSchedule(m, "job")
			for k, v := range got {
				require.Equal(t, tt.want[k], v, "%s", k)
			}
			wantSamples := uint64(0)
			if tt.delay {
				wantSamples = 1
			}
			require.Equal(t, wantSamples, fireToStart(t, m, "job").GetSampleCount())
			require.Equal(t, 1.0, testutil.ToFloat64(m.succeeded.WithLabelValues("other")))
		})
	}
}

// A schedule's first event creates every series of it at zero, so that
// its first failure is an increase of an existing series; an event
// without a job creates none.
func TestMetricsSeriesCreatedAtFirstEvent(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "ns", "n1")
	require.NoError(t, err)
	m.observe(Event{Kind: EventError, Err: errors.New("the catalog is gone")})
	m.observe(Event{Kind: EventElected, Token: 3})
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, 4, n, "the four metrics without a schedule label, no per-schedule series")

	m.observe(Event{Kind: EventBound, Job: "nightly"})
	for name, want := range map[string]int{
		"aegis_schedule_ticks_total": 1, "aegis_schedule_started_total": 1, "aegis_schedule_succeeded_total": 1,
		"aegis_schedule_failed_total": 1, "aegis_schedule_ran_twice_total": 1, "aegis_schedule_lost_total": 1,
		"aegis_schedule_missed_total": len(missCauses), "aegis_schedule_fire_to_start_seconds": 1,
	} {
		n, err := testutil.GatherAndCount(reg, name)
		require.NoError(t, err)
		require.Equal(t, want, n, "%s: series of nightly", name)
	}
	for k, v := range perSchedule(m, "nightly") {
		require.Zero(t, v, "%s", k)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "ns", labels["namespace"], "%s", mf.GetName())
			require.Equal(t, "n1", labels["node"], "%s", mf.GetName())
		}
	}
}

// The delay from fire to start lands in its bucket; a fire time ahead of
// the real clock (a replica whose clock is ahead) counts as no delay.
func TestMetricsFireToStart(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry(), "ns", "n1")
	require.NoError(t, err)
	before := time.Now()
	m.observe(Event{Kind: EventRun, Job: "late", Attempt: 1, Fire: before.Add(-3 * time.Second)})
	elapsed := time.Since(before).Seconds()
	h := fireToStart(t, m, "late")
	require.Equal(t, uint64(1), h.GetSampleCount())
	require.GreaterOrEqual(t, h.GetSampleSum(), 3.0)
	require.LessOrEqual(t, h.GetSampleSum(), 3+elapsed)
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 5 {
			want = 1
		}
		require.Equal(t, want, b.GetCumulativeCount(), "bucket le=%g", b.GetUpperBound())
	}
	m.observe(Event{Kind: EventRun, Job: "ahead", Attempt: 1, Fire: time.Now().Add(time.Hour)})
	h = fireToStart(t, m, "ahead")
	require.Equal(t, uint64(1), h.GetSampleCount())
	require.Zero(t, h.GetSampleSum())
}

// Without a Registerer the metrics count all the same, registered nowhere.
func TestMetricsWithoutRegisterer(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(nil, "ns", "n1")
	require.NoError(t, err)
	m.observe(Event{Kind: EventRun, Job: "j", Attempt: 1, Fire: time.Now(), Until: time.Now()})
	m.observe(Event{Kind: EventDone, Job: "j", Err: errors.New("boom")})
	m.observe(Event{Kind: EventMissed, Job: "j", Cause: CauseDown})
	m.setUnhandled(2)
	require.Equal(t, 1.0, perSchedule(m, "j")["failed"])
	require.Equal(t, 1.0, perSchedule(m, "j")["missed/down"])
}

// Many goroutines observing the same new schedule at once lose no count
// (run with -race).
func TestMetricsConcurrentObserve(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry(), "ns", "n1")
	require.NoError(t, err)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				m.observe(Event{Kind: EventSkipped, Job: "busy"})
			}
		})
	}
	wg.Wait()
	require.Equal(t, float64(goroutines*each), perSchedule(m, "busy")["ticks"])
}

// observe of a schedule seen before allocates nothing: it is on every
// event's path.
func TestMetricsObserveAllocatesNothing(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), "ns", "n1")
	require.NoError(t, err)
	run := Event{Kind: EventRun, Job: "hot", Attempt: 1, Fire: time.Now(), Until: time.Now()}
	done := Event{Kind: EventDone, Job: "hot"}
	m.observe(run)
	allocs := testing.AllocsPerRun(100, func() {
		m.observe(run)
		m.observe(done)
	})
	require.Zero(t, allocs)
}

// A second scheduler of the same namespace and node on one registry is a
// caller's mistake; a registration that fails half way takes back what it
// registered.
func TestMetricsRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := newMetrics(reg, "ns", "n1")
	require.NoError(t, err)
	_, err = newMetrics(reg, "ns", "n1")
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, `namespace "ns" and node "n1" is registered already`)
	_, err = newMetrics(reg, "ns", "n2")
	require.NoError(t, err, "another node shares the registry")

	other := prometheus.NewRegistry()
	clash := prometheus.NewCounter(prometheus.CounterOpts{Name: "aegis_schedule_lost_total", Help: "Something else."})
	require.NoError(t, other.Register(clash))
	_, err = newMetrics(other, "ns", "n1")
	require.Error(t, err)
	n, err := testutil.GatherAndCount(other)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the clashing collector is left registered")
}

// The missed-tick alerts for every cause, and the ran-twice alert, run on
// scrapes of a real run-key scheduler on SQLite whose emit, the path of
// every event to the metrics, is fed those events: causes a test cannot
// produce at will (misfire, store, down) beside those internal/testing/alerts
// produces for real (held, unbound, twice). Each fires on its schedule and
// cause; a paused schedule's misses fire nothing.
func TestMetricsAlertsOnMissedAndTwice(t *testing.T) {
	t.Parallel()
	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "schedule.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := NewStore(t.Context(), db, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s, err := New(&Config{Node: "n1", Store: store, Registerer: reg})
	require.NoError(t, err)
	f := time.Now().Truncate(time.Second)
	for _, job := range []string{"nightly", "hourly", "orphan", "paused"} {
		s.emit(Event{Kind: EventSkipped, Job: job, Fire: f, Reason: "another node has the tick"})
	}
	before, err := alerts.Scrape(reg)
	require.NoError(t, err)
	for _, e := range []Event{
		{Kind: EventMissed, Job: "nightly", Cause: CauseHeld},
		{Kind: EventMissed, Job: "nightly", Cause: CauseDown},
		{Kind: EventMissed, Job: "hourly", Cause: CauseMisfire},
		{Kind: EventMissed, Job: "hourly", Cause: CauseStore},
		{Kind: EventMissed, Job: "orphan", Cause: CauseUnbound},
		{Kind: EventMissed, Job: "paused", Cause: CausePaused},
		{Kind: EventLost, Job: "nightly", Token: 7, Attempt: 1, Err: aegis.ErrLost},
		{Kind: EventTwice, Job: "nightly", Token: 7, Attempt: 1},
	} {
		e.Fire = f
		s.emit(e)
	}
	after, err := alerts.Scrape(reg)
	require.NoError(t, err)
	missed := func(job string, cause MissCause) map[string]string {
		return map[string]string{"namespace": DefaultNamespace, "schedule": job, "cause": string(cause)}
	}
	of := func(job string) map[string]string {
		return map[string]string{"namespace": DefaultNamespace, "schedule": job}
	}
	require.NoError(t, alerts.Test("../docs/alerts/aegis-rules.yml",
		alerts.Case{Name: "missed and twice", Scrapes: [][]alerts.Sample{before, after}, Fire: map[string][]map[string]string{
			"AegisScheduleMissedTicks": {missed("nightly", CauseHeld), missed("nightly", CauseDown), missed("hourly", CauseMisfire), missed("hourly", CauseStore)},
			"AegisScheduleUnbound":     {of("orphan")},
			"AegisScheduleRunLost":     {of("nightly")},
			"AegisScheduleRanTwice":    {of("nightly")},
		}},
		alerts.Case{Name: "healthy", Scrapes: [][]alerts.Sample{before, before}},
	))
}
