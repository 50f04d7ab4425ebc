package schedule

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics a scheduler exports when Config.Registerer is set, per
// namespace and node (several schedulers may share one registry):
//
//	aegis_schedule_bound{namespace,node}             catalog schedules this replica runs
//	aegis_schedule_unhandled{namespace,node}         enabled catalog schedules whose handler this replica lacks
//	aegis_schedule_not_primary_total{namespace,node} claims refused because the store is a hot standby
//	aegis_schedule_runs_total{namespace,node}        runs started on this replica
//
// and per schedule (label schedule: the job's or catalog schedule's name),
// counted from the scheduler's events:
//
//	aegis_schedule_ticks_total{namespace,node,schedule}           ticks this replica's timer handled (EventRun of a first attempt, EventSkipped, EventRefused, EventEnqueued)
//	aegis_schedule_started_total{namespace,node,schedule}         runs started on this replica, every attempt (EventRun)
//	aegis_schedule_succeeded_total{namespace,node,schedule}       runs ended without an error (EventDone)
//	aegis_schedule_failed_total{namespace,node,schedule}          runs ended with the job's error or panic (EventDone)
//	aegis_schedule_missed_total{namespace,node,schedule,cause}    ticks no replica started by their starting deadline, recorded by this replica (EventMissed; cause: a MissCause, "unknown" when empty)
//	aegis_schedule_ran_twice_total{namespace,node,schedule}       runs of this replica whose tick a later attempt ran as well (EventTwice)
//	aegis_schedule_lost_total{namespace,node,schedule}            a run's lease or run row found lost (EventLost)
//	aegis_schedule_fire_to_start_seconds{namespace,node,schedule} delay from a tick's fire time to its first attempt's start (histogram)
//
// A tick counts once on each replica that handled it: in run-key and lease
// mode every replica's timer fires it (one runs it, the others skip it), so
// a schedule's ticks are the max over replicas, not the sum. In leader mode
// the leader counts the tick (enqueued, skipped or refused); the worker that
// runs it counts the start, not a tick. A worker's refusal of a run paused
// after its enqueue counts as a tick of the worker too.
//
// started_total counts leader mode's worker runs too (runs_total does not)
// and every attempt, a reclaimed run's included; fire_to_start_seconds
// observes first attempts only, as a retry's delay is its crash's. The
// delay is this process's real clock at the start against the fire time of
// the scheduler's Clock: a replica whose clock lags shows its lag there.
// lost_total counts reports: one run may report its loss twice (when its
// keep-alive finds it, and when its end cannot release or record it).
//
// Cardinality: one set of series per schedule this replica has seen an
// event of (about 30 with the histogram's buckets and the causes), per
// node; all are created, at zero, when the job is added or bound (or at
// its first event), so that the first failure is an increase. A deleted schedule's series stay until
// the process restarts.
type metrics struct {
	bound, unhandled prometheus.Gauge
	notPrimary, runs prometheus.Counter

	ticks, started, succeeded, failed, missed, twice, lost *prometheus.CounterVec
	fireToStart                                            *prometheus.HistogramVec
	// schedules caches each schedule's series (*series), so that observe
	// finds them without the vectors' locks.
	schedules sync.Map
}

// series are one schedule's per-schedule metrics.
type series struct {
	ticks, started, succeeded, failed, twice, lost prometheus.Counter
	missed                                         map[MissCause]prometheus.Counter
	fireToStart                                    prometheus.Observer
}

// missCauses are the causes whose series are created with a schedule's; a
// cause not listed is counted too, from its first miss.
var missCauses = []MissCause{CauseHeld, CauseUnbound, CausePaused, CauseMisfire, CauseStore, CauseDown}

// fireToStartBuckets span a start within a millisecond of its tick to one
// five minutes late (a catch-up, a leader's queue backed up).
var fireToStartBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer, ns, node string) (*metrics, error) {
	labels := prometheus.Labels{"namespace": ns, "node": node}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "aegis", Subsystem: "schedule", Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "aegis", Subsystem: "schedule", Name: name, Help: help, ConstLabels: labels})
	}
	perSchedule := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "aegis", Subsystem: "schedule", Name: name, Help: help, ConstLabels: labels},
			append([]string{"schedule"}, extra...))
	}
	m := &metrics{
		bound:      gauge("bound", "Catalog schedules this replica runs."),
		unhandled:  gauge("unhandled", "Enabled catalog schedules whose handler this replica does not have."),
		notPrimary: counter("not_primary_total", "Claims refused because this replica's store is a hot standby (not the primary)."),
		runs:       counter("runs_total", "Runs started on this replica."),
		ticks:      perSchedule("ticks_total", "Ticks of the schedule this replica's timer handled: ran, skipped, refused by the catalog, or enqueued."),
		started:    perSchedule("started_total", "Runs of the schedule started on this replica, every attempt."),
		succeeded:  perSchedule("succeeded_total", "Runs of the schedule that ended without an error on this replica."),
		failed:     perSchedule("failed_total", "Runs of the schedule that ended with the job's error or panic on this replica."),
		missed:     perSchedule("missed_total", "Ticks of the schedule no replica started by their starting deadline, recorded by this replica, by cause.", "cause"),
		twice:      perSchedule("ran_twice_total", "Runs of the schedule on this replica whose tick a later attempt ran as well (the store's fence refused their outcome)."),
		lost:       perSchedule("lost_total", "Runs of the schedule on this replica whose lease or run row was found lost."),
		fireToStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "aegis", Subsystem: "schedule", Name: "fire_to_start_seconds",
			Help:        "Delay from a tick's fire time to the start of its first attempt on this replica.",
			Buckets:     fireToStartBuckets,
			ConstLabels: labels,
		}, []string{"schedule"}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.bound, m.unhandled, m.notPrimary, m.runs,
		m.ticks, m.started, m.succeeded, m.failed, m.missed, m.twice, m.lost, m.fireToStart}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, invalid("schedule: Config.Registerer: a scheduler of namespace %q and node %q is registered already", ns, node)
			}
			return nil, fmt.Errorf("schedule: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) setUnhandled(n int) { m.unhandled.Set(float64(n)) }

// observe counts an event in the per-schedule metrics. It takes no lock
// but at a schedule's first event, and blocks on nothing; events without a
// job (the catalog's, the leader's) count in none.
func (m *metrics) observe(e Event) {
	if e.Job == "" {
		return
	}
	s := m.series(e.Job)
	switch e.Kind {
	case EventRun:
		if e.Attempt == 0 {
			return // overlap replace's notice of the predecessors it ended, before the run's own EventRun
		}
		s.started.Inc()
		if e.Attempt == 1 {
			s.fireToStart.Observe(max(0, time.Since(e.Fire).Seconds()))
			if !e.Until.IsZero() { // zero: a leader mode worker's run, whose tick the leader counted
				s.ticks.Inc()
			}
		}
	case EventSkipped, EventRefused, EventEnqueued:
		s.ticks.Inc()
	case EventDone:
		if e.Err == nil {
			s.succeeded.Inc()
		} else {
			s.failed.Inc()
		}
	case EventMissed:
		c := s.missed[e.Cause]
		if c == nil {
			c = m.missed.WithLabelValues(e.Job, string(cmp.Or(e.Cause, "unknown"))) // "": a scheduler bug, still counted
		}
		c.Inc()
	case EventTwice:
		s.twice.Inc()
	case EventLost:
		s.lost.Inc()
	}
}

// series returns the schedule's series, creating them (at zero) when the
// job is added or bound, or at its first event.
func (m *metrics) series(job string) *series {
	if s, ok := m.schedules.Load(job); ok {
		return s.(*series)
	}
	s := &series{
		ticks:       m.ticks.WithLabelValues(job),
		started:     m.started.WithLabelValues(job),
		succeeded:   m.succeeded.WithLabelValues(job),
		failed:      m.failed.WithLabelValues(job),
		twice:       m.twice.WithLabelValues(job),
		lost:        m.lost.WithLabelValues(job),
		missed:      make(map[MissCause]prometheus.Counter, len(missCauses)),
		fireToStart: m.fireToStart.WithLabelValues(job),
	}
	for _, c := range missCauses {
		s.missed[c] = m.missed.WithLabelValues(job, string(c))
	}
	got, _ := m.schedules.LoadOrStore(job, s)
	return got.(*series)
}
