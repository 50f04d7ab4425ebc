// Package leasemetrics exports Prometheus metrics for any aegis.Locker:
// Wrap returns a Locker that behaves as the one it wraps (a Notifier or a
// Waiter stays one) and counts what it does.
//
//	aegis_lease_acquire_total{backend,result}   TryAcquire and blocking Acquire outcomes: granted, held, error
//	aegis_lease_renew_total{backend,result}     Renew outcomes: renewed, lost, error
//	aegis_lease_release_total{backend,result}   Release outcomes: released, lost, error
//	aegis_lease_lost_total{backend,cause}       leases found lost: renew_refused (expired, or another owner has the key),
//	                                            release_refused (it ran out before the holder released it)
//	aegis_lease_wait_seconds{backend}           contended acquires: from the first "held" to the grant (histogram)
//	aegis_lease_op_seconds{backend,op}          latency of one store call: acquire, renew, release (histogram)
//
// Several Lockers may share a registry and a backend name: their counts add up.
package leasemetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/promreg"
)

type vecs struct {
	acquire, renew, release, lost *prometheus.CounterVec
	wait                          *prometheus.HistogramVec
	op                            *prometheus.HistogramVec
}

func newVecs(reg prometheus.Registerer) (*vecs, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "aegis", Subsystem: "lease", Name: name, Help: help}, labels)
	}
	v := &vecs{
		acquire: counter("acquire_total", "Acquire attempts by outcome: granted, held (another owner's lease is live), error.", "backend", "result"),
		renew:   counter("renew_total", "Renewals by outcome: renewed, lost, error.", "backend", "result"),
		release: counter("release_total", "Releases by outcome: released, lost (it was no longer held), error.", "backend", "result"),
		lost:    counter("lost_total", "Leases found lost, by cause: renew_refused, release_refused.", "backend", "cause"),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "aegis", Subsystem: "lease", Name: "wait_seconds",
			Help:    "Contended acquires: from the first refusal (held) to the grant; a queueing backend's blocking Acquire, its whole wait.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14), // 100µs to ~15 min
		}, []string{"backend"}),
		op: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "aegis", Subsystem: "lease", Name: "op_seconds",
			Help:    "Latency of one store call: acquire (one attempt), renew, release.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50µs to ~1.6s
		}, []string{"backend", "op"}),
	}
	for _, c := range []**prometheus.CounterVec{&v.acquire, &v.renew, &v.release, &v.lost} {
		if err := promreg.Register(reg, c); err != nil {
			return nil, fmt.Errorf("leasemetrics: register: %w", err)
		}
	}
	for _, h := range []**prometheus.HistogramVec{&v.wait, &v.op} {
		if err := promreg.Register(reg, h); err != nil {
			return nil, fmt.Errorf("leasemetrics: register: %w", err)
		}
	}
	return v, nil
}

// Wrap returns l instrumented under the backend name (a label, such as
// "postgres" or "redis"). The result is a Notifier or a Waiter exactly when
// l is, so aegis.Acquire waits on it as on l. reg nil is an error.
func Wrap(l aegis.Locker, backend string, reg prometheus.Registerer) (aegis.Locker, error) {
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: leasemetrics: the Locker is nil", aegis.ErrInvalid)
	case backend == "":
		return nil, fmt.Errorf("%w: leasemetrics: the backend name is empty", aegis.ErrInvalid)
	case reg == nil:
		return nil, fmt.Errorf("%w: leasemetrics: the Registerer is nil", aegis.ErrInvalid)
	}
	v, err := newVecs(reg)
	if err != nil {
		return nil, err
	}
	b := &locker{l: l, backend: backend, v: v, since: map[string]time.Time{}}
	n, isN := l.(aegis.Notifier)
	w, isW := l.(aegis.Waiter)
	switch {
	case isN && isW:
		return &notifierWaiter{b, n, w}, nil
	case isN:
		return &notifier{b, n}, nil
	case isW:
		return &waiter{b, w}, nil
	}
	return b, nil
}

// maxTracked bounds the keys whose first refusal is remembered (for
// wait_seconds): a caller that gives up on a key leaves its entry until
// then.
const maxTracked = 4096

type locker struct {
	l       aegis.Locker
	backend string
	v       *vecs

	mu    sync.Mutex
	since map[string]time.Time // key → its first refusal, until granted
}

func (m *locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	start := time.Now()
	lease, err := m.l.TryAcquire(ctx, key, ttl)
	m.v.op.WithLabelValues(m.backend, "acquire").Observe(time.Since(start).Seconds())
	m.acquired(key, start, lease, err)
	return lease, err
}

// acquired counts an attempt's outcome, and the wait of a grant that came
// after refusals.
func (m *locker) acquired(key string, start time.Time, lease *aegis.Lease, err error) {
	switch {
	case err == nil && lease != nil:
		m.v.acquire.WithLabelValues(m.backend, "granted").Inc()
		m.mu.Lock()
		first, waited := m.since[key]
		delete(m.since, key)
		m.mu.Unlock()
		if waited {
			m.v.wait.WithLabelValues(m.backend).Observe(time.Since(first).Seconds())
		}
	case errors.Is(err, aegis.ErrHeld):
		m.v.acquire.WithLabelValues(m.backend, "held").Inc()
		m.mu.Lock()
		if _, ok := m.since[key]; !ok && len(m.since) < maxTracked {
			m.since[key] = start
		}
		m.mu.Unlock()
	default:
		m.v.acquire.WithLabelValues(m.backend, "error").Inc()
	}
}

func (m *locker) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	start := time.Now()
	err := m.l.Renew(ctx, l, ttl)
	m.v.op.WithLabelValues(m.backend, "renew").Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		m.v.renew.WithLabelValues(m.backend, "renewed").Inc()
	case errors.Is(err, aegis.ErrLost):
		m.v.renew.WithLabelValues(m.backend, "lost").Inc()
		m.v.lost.WithLabelValues(m.backend, "renew_refused").Inc()
	default:
		m.v.renew.WithLabelValues(m.backend, "error").Inc()
	}
	return err
}

func (m *locker) Release(ctx context.Context, l *aegis.Lease) error {
	start := time.Now()
	err := m.l.Release(ctx, l)
	m.v.op.WithLabelValues(m.backend, "release").Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		m.v.release.WithLabelValues(m.backend, "released").Inc()
	case errors.Is(err, aegis.ErrLost):
		m.v.release.WithLabelValues(m.backend, "lost").Inc()
		m.v.lost.WithLabelValues(m.backend, "release_refused").Inc()
	default:
		m.v.release.WithLabelValues(m.backend, "error").Inc()
	}
	return err
}

// Unwrap returns the Locker Wrap was given.
func (m *locker) Unwrap() aegis.Locker { return m.l }

type notifier struct {
	*locker
	n aegis.Notifier
}

func (m *notifier) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return m.n.Notify(ctx, key)
}

type waiter struct {
	*locker
	w aegis.Waiter
}

func (m *waiter) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return m.locker.wait(ctx, m.w, key, ttl)
}

type notifierWaiter struct {
	*locker
	n aegis.Notifier
	w aegis.Waiter
}

func (m *notifierWaiter) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return m.n.Notify(ctx, key)
}

func (m *notifierWaiter) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return m.locker.wait(ctx, m.w, key, ttl)
}

// wait is a queueing backend's blocking Acquire: its whole wait is the
// handoff.
func (m *locker) wait(ctx context.Context, w aegis.Waiter, key string, ttl time.Duration) (*aegis.Lease, error) {
	start := time.Now()
	lease, err := w.Acquire(ctx, key, ttl)
	switch {
	case err == nil && lease != nil:
		m.v.acquire.WithLabelValues(m.backend, "granted").Inc()
		m.v.wait.WithLabelValues(m.backend).Observe(time.Since(start).Seconds())
	case ctx.Err() != nil:
		// The caller gave up: neither a grant nor a store error.
	default:
		m.v.acquire.WithLabelValues(m.backend, "error").Inc()
	}
	return lease, err
}
