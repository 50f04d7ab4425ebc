package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis/internal/promreg"
)

// The metrics a client exports when Config.Registerer is set. Counters are
// per queue; several clients may share one registry (they add up).
//
//	aegis_queue_claimed_total{queue}            jobs claimed
//	aegis_queue_completed_total{queue}          jobs completed (the completion landed)
//	aegis_queue_failed_total{queue}             handler errors and panics (retried or discarded)
//	aegis_queue_snoozed_total{queue}            snoozes
//	aegis_queue_cancelled_total{queue}          jobs cancelled by their handler
//	aegis_queue_discarded_total{queue}          jobs discarded after their last attempt
//	aegis_queue_reaped_total{queue}             expired leases reclaimed by this client's reaper
//	aegis_queue_leases_lost_total{queue}        running jobs whose lease was found lost (context cancelled)
//	aegis_queue_stale_writes_total{queue,op}    writes the fence rejected (op: heartbeat, complete, complete_tx, retry, snooze, cancel, discard, hand_back)
//	aegis_queue_claim_seconds{queue}            claim statement latency (histogram)
//	aegis_queue_jobs{queue,state}               jobs per state, counted in the database at scrape time (state "dead": dead letters)
type metrics struct {
	claimedV, completedV, failedV, snoozedV, cancelledV, discardedV, reapedV, leasesLostV *prometheus.CounterVec
	staleV                                                                                *prometheus.CounterVec
	claimSecondsV                                                                         *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) (*metrics, error) {
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
	if err := reg.Register(&depthCollector{pool: pool}); err != nil {
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

// depthCollector counts jobs per queue and state in the database when
// scraped.
type depthCollector struct{ pool *pgxpool.Pool }

var depthDesc = prometheus.NewDesc("aegis_queue_jobs", "Jobs per queue and state in the database (state dead: cancelled and discarded jobs kept).",
	[]string{"queue", "state"}, nil)

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- depthDesc }

func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := d.pool.Query(ctx, depthSQL)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, fmt.Errorf("queue: count jobs: %w", translate(err)))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var queue, state string
		var n int64
		if err := rows.Scan(&queue, &state, &n); err != nil {
			ch <- prometheus.NewInvalidMetric(depthDesc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(n), queue, state)
	}
	if err := rows.Err(); err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, fmt.Errorf("queue: count jobs: %w", err))
	}
}
