package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis/internal/promreg"
)

// The metrics a client exports when Config.Registerer is set. Counters are
// per queue; several clients may share one registry (they add up).
//
//	aegis_queue_claimed_total{queue}                 jobs claimed
//	aegis_queue_completed_total{queue}               jobs completed (the completion landed)
//	aegis_queue_failed_total{queue}                  handler errors and panics (retried or discarded)
//	aegis_queue_snoozed_total{queue}                 snoozes
//	aegis_queue_cancelled_total{queue}               jobs cancelled by their handler
//	aegis_queue_discarded_total{queue}               jobs discarded after their last attempt
//	aegis_queue_reaped_total{queue}                  expired leases reclaimed by this client's reaper
//	aegis_queue_leases_lost_total{queue}             running jobs whose lease was found lost (context cancelled)
//	aegis_queue_stale_writes_total{queue,op}         writes the fence rejected (op: heartbeat, complete, complete_tx, retry, snooze, cancel, discard, hand_back)
//	aegis_queue_claim_seconds{queue}                 claim statement latency (histogram)
//	aegis_queue_jobs{queue,state}                    jobs per state, counted in the database at scrape time (state "dead": dead letters)
//	aegis_queue_jobs_by_kind{queue,kind,state}       the same per kind (every state of a queue and kind with a job, zeros included)
//	aegis_queue_oldest_available_seconds{queue,kind} age of the oldest available job, from its due time (none: no job available)
//	aegis_queue_paused{queue}                        1 while the queue is paused (every queue with a job or ever paused)
//
// The last four are read from the database when the registry is scraped
// (the jobs in one statement, the paused queues in a second), by one
// collector per registry whatever the number of clients; every process on
// one database reports the same values: aggregate them with max, not sum.
// aegis_queue_jobs keeps its series as they were, without kind: it is
// aegis_queue_jobs_by_kind summed over kind, so a panel, a recording rule
// or an alert on it keeps its meaning and a queue with many kinds stays one
// series per state; the kind breakdown (River's and Oban's per-worker view)
// is a metric of its own. Cardinality: queues times kinds times four states.
type metrics struct {
	claimedV, completedV, failedV, snoozedV, cancelledV, discardedV, reapedV, leasesLostV *prometheus.CounterVec
	staleV                                                                                *prometheus.CounterVec
	claimSecondsV                                                                         *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, t tables) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "aegis", Subsystem: "queue", Name: name, Help: help}, labels)
	}
	m := &metrics{
		claimedV:    counter("claimed_total", "Jobs claimed.", "queue"),
		completedV:  counter("completed_total", "Jobs completed (the fenced completion landed).", "queue"),
		failedV:     counter("failed_total", "Handler errors and panics.", "queue"),
		snoozedV:    counter("snoozed_total", "Jobs snoozed by their handler.", "queue"),
		cancelledV:  counter("cancelled_total", "Jobs cancelled by their handler.", "queue"),
		discardedV:  counter("discarded_total", "Jobs discarded after their last attempt.", "queue"),
		reapedV:     counter("reaped_total", "Expired leases reclaimed by this client's reaper.", "queue"),
		leasesLostV: counter("leases_lost_total", "Running jobs whose lease was found lost.", "queue"),
		staleV:      counter("stale_writes_total", "Writes rejected by the fence (a stale token).", "queue", "op"),
		claimSecondsV: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "aegis", Subsystem: "queue", Name: "claim_seconds",
			Help:    "Latency of the claim statement.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 14), // 250µs to 2s
		}, []string{"queue"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, p := range []**prometheus.CounterVec{&m.claimedV, &m.completedV, &m.failedV, &m.snoozedV, &m.cancelledV,
		&m.discardedV, &m.reapedV, &m.leasesLostV, &m.staleV} {
		if err := promreg.Register(reg, p); err != nil {
			return nil, fmt.Errorf("queue: register metrics: %w", err)
		}
	}
	if err := promreg.Register(reg, &m.claimSecondsV); err != nil {
		return nil, fmt.Errorf("queue: register metrics: %w", err)
	}
	if err := reg.Register(&depthCollector{pool: pool, t: t}); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("queue: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) claimed(q string) prometheus.Counter    { return m.claimedV.WithLabelValues(q) }
func (m *metrics) completed(q string) prometheus.Counter  { return m.completedV.WithLabelValues(q) }
func (m *metrics) failed(q string) prometheus.Counter     { return m.failedV.WithLabelValues(q) }
func (m *metrics) snoozed(q string) prometheus.Counter    { return m.snoozedV.WithLabelValues(q) }
func (m *metrics) cancelled(q string) prometheus.Counter  { return m.cancelledV.WithLabelValues(q) }
func (m *metrics) discarded(q string) prometheus.Counter  { return m.discardedV.WithLabelValues(q) }
func (m *metrics) reaped(q string) prometheus.Counter     { return m.reapedV.WithLabelValues(q) }
func (m *metrics) leasesLost(q string) prometheus.Counter { return m.leasesLostV.WithLabelValues(q) }
func (m *metrics) stale(q, op string) prometheus.Counter  { return m.staleV.WithLabelValues(q, op) }
func (m *metrics) claimSeconds(q string) prometheus.Observer {
	return m.claimSecondsV.WithLabelValues(q)
}

// depthCollector counts jobs per queue, kind and state in the database
// when scraped.
type depthCollector struct {
	pool *pgxpool.Pool
	t    tables
}

var (
	depthDesc = prometheus.NewDesc("aegis_queue_jobs", "Jobs per queue and state in the database (state dead: cancelled and discarded jobs kept).",
		[]string{"queue", "state"}, nil)
	kindDesc = prometheus.NewDesc("aegis_queue_jobs_by_kind", "Jobs per queue, kind and state in the database (state dead: cancelled and discarded jobs kept).",
		[]string{"queue", "kind", "state"}, nil)
	oldestDesc = prometheus.NewDesc("aegis_queue_oldest_available_seconds", "Age of the oldest available job per queue and kind, from its due time (database time).",
		[]string{"queue", "kind"}, nil)
	pausedDesc = prometheus.NewDesc("aegis_queue_paused", "1 while the queue is paused, else 0.", []string{"queue"}, nil)
)

// kindStates are the states of aegis_queue_jobs_by_kind, each exported for
// every queue and kind that has a job in any of them.
var kindStates = []string{"available", "scheduled", "running", "dead"}

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{depthDesc, kindDesc, oldestDesc, pausedDesc} {
		ch <- desc
	}
}

// queueKind is a queue and a kind of job.
type queueKind struct{ queue, kind string }

// jobCounts is a scrape's reading of the jobs.
type jobCounts struct {
	byKind map[queueKind]map[string]int64 // state to count
	oldest map[queueKind]float64
	paused map[string]bool // every queue seen, and whether it is paused
}

func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.read(ctx)
	if err != nil {
		for _, desc := range []*prometheus.Desc{depthDesc, kindDesc, oldestDesc, pausedDesc} {
			ch <- prometheus.NewInvalidMetric(desc, fmt.Errorf("queue: count jobs: %w", err))
		}
		return
	}
	perQueue := map[[2]string]int64{}
	for qk, states := range c.byKind {
		for _, state := range kindStates {
			ch <- prometheus.MustNewConstMetric(kindDesc, prometheus.GaugeValue, float64(states[state]), qk.queue, qk.kind, state)
		}
		for state, n := range states {
			perQueue[[2]string{qk.queue, state}] += n
		}
	}
	for qs, n := range perQueue {
		if n > 0 {
			ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(n), qs[0], qs[1])
		}
	}
	for qk, age := range c.oldest {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, qk.queue, qk.kind)
	}
	for q, paused := range c.paused {
		v := 0.0
		if paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, v, q)
	}
}

// read runs the scrape's two statements.
func (d *depthCollector) read(ctx context.Context) (*jobCounts, error) {
	c := &jobCounts{byKind: map[queueKind]map[string]int64{}, oldest: map[queueKind]float64{}, paused: map[string]bool{}}
	rows, err := d.pool.Query(ctx, d.t.sql(metricsJobsSQL))
	if err != nil {
		return nil, translate(err)
	}
	var (
		qk    queueKind
		state string
		n     int64
		age   *float64
	)
	_, err = pgx.ForEachRow(rows, []any{&qk.queue, &qk.kind, &state, &n, &age}, func() error {
		if c.byKind[qk] == nil {
			c.byKind[qk] = map[string]int64{}
		}
		c.byKind[qk][state] += n
		if age != nil {
			c.oldest[qk] = *age
		}
		c.paused[qk.queue] = false
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	rows, err = d.pool.Query(ctx, d.t.sql(queuePausedSQL))
	if err != nil {
		return nil, translate(err)
	}
	var q string
	if _, err := pgx.ForEachRow(rows, []any{&q}, func() error { c.paused[q] = true; return nil }); err != nil {
		return nil, translate(err)
	}
	return c, nil
}
