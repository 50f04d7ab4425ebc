package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/schedule"
)

// A run-key scheduler on SQLite runs a job that succeeds and one that
// fails, every second: its registry then holds each schedule's series,
// and their values are the counts of the events the scheduler reported.
func TestMetricsPerScheduleOfARealScheduler(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	reg := prometheus.NewRegistry()
	log := &runLog{}
	jobs := []schedule.Job{
		{Name: "ok", Every: time.Second, Run: func(context.Context) error { return nil }},
		{Name: "fails", Every: time.Second, Run: func(context.Context) error { return errors.New("the export failed") }},
	}
	s := start(t, &schedule.Config{Node: "n1", Store: r.store, Registerer: reg, OnEvent: log.onEvent}, jobs...)
	doneOf := func(job string, failed bool) int {
		n := 0
		for _, e := range log.eventsOf(schedule.EventDone) {
			if e.Job == job && (e.Err != nil) == failed {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, func() bool { return doneOf("ok", false) >= 2 && doneOf("fails", true) >= 2 },
		"two runs of each job to end")
	stop(t, s) // no event after this: the metrics and the log agree

	got := gather(t, reg)
	for _, job := range []string{"ok", "fails"} {
		want := countEvents(log, job)
		for name, n := range want {
			require.Equal(t, n, got[series(name, "schedule", job)], "%s of %s", name, job)
		}
		require.Equal(t, want["aegis_schedule_started_total"], got[series("aegis_schedule_fire_to_start_seconds_count", "schedule", job)],
			"a delay sample for each first attempt of %s", job)
		// A tick of a one-second job starts within its starting deadline
		// (half the period) or not at all.
		require.Equal(t, got[series("aegis_schedule_fire_to_start_seconds_count", "schedule", job)],
			got[series("aegis_schedule_fire_to_start_seconds_bucket", "schedule", job, "le", "1")], "every start of %s within 1s of its tick", job)
		for _, cause := range []schedule.MissCause{schedule.CauseHeld, schedule.CauseUnbound, schedule.CausePaused, schedule.CauseMisfire, schedule.CauseStore, schedule.CauseDown} {
			v, ok := got[series("aegis_schedule_missed_total", "cause", string(cause), "schedule", job)]
			require.True(t, ok, "missed{cause=%q} of %s is exported, at zero", cause, job)
			require.Zero(t, v)
		}
	}
	require.GreaterOrEqual(t, got[series("aegis_schedule_succeeded_total", "schedule", "ok")], 2.0)
	require.Zero(t, got[series("aegis_schedule_failed_total", "schedule", "ok")])
	require.GreaterOrEqual(t, got[series("aegis_schedule_failed_total", "schedule", "fails")], 2.0)
	require.Zero(t, got[series("aegis_schedule_succeeded_total", "schedule", "fails")])
	require.Equal(t, got[series("aegis_schedule_started_total", "schedule", "ok")]+got[series("aegis_schedule_started_total", "schedule", "fails")],
		got[series("aegis_schedule_runs_total")], "runs_total is the sum of the schedules' starts in run-key mode")
}

// countEvents counts job's events as the per-schedule metrics should.
func countEvents(log *runLog, job string) map[string]float64 {
	want := map[string]float64{}
	for _, name := range []string{"ticks", "started", "succeeded", "failed", "ran_twice", "lost"} {
		want["aegis_schedule_"+name+"_total"] = 0
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.events {
		if e.Job != job {
			continue
		}
		switch {
		case e.Kind == schedule.EventRun && e.Attempt > 0:
			want["aegis_schedule_started_total"]++
			if e.Attempt == 1 {
				want["aegis_schedule_ticks_total"]++
			}
		case e.Kind == schedule.EventSkipped || e.Kind == schedule.EventRefused:
			want["aegis_schedule_ticks_total"]++
		case e.Kind == schedule.EventDone && e.Err == nil:
			want["aegis_schedule_succeeded_total"]++
		case e.Kind == schedule.EventDone:
			want["aegis_schedule_failed_total"]++
		case e.Kind == schedule.EventLost:
			want["aegis_schedule_lost_total"]++
		}
	}
	return want
}

// gather reads every sample of reg, keyed by series: the metric's name and
// its labels but namespace and node, which it checks.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					require.Equal(t, schedule.DefaultNamespace, l.GetValue())
				case "node":
					require.Equal(t, "n1", l.GetValue())
				default:
					kv = append(kv, l.GetName(), l.GetValue())
				}
			}
			name := mf.GetName()
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[series(name, kv...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[series(name, kv...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[series(name+"_count", kv...)] = float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					out[series(name+"_bucket", append(kv, "le", fmt.Sprint(b.GetUpperBound()))...)] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// series names a series: name{k="v",...}, labels sorted.
func series(name string, kv ...string) string {
	var ls []string
	for i := 0; i+1 < len(kv); i += 2 {
		ls = append(ls, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}
