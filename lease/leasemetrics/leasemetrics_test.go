package leasemetrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/leasemetrics"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/lease/pglease"
)

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// plain is a Locker and nothing more.
type plain struct{ aegis.Locker }

// Every outcome of every call is counted under its backend, and a
// contended acquire's wait is observed once it is granted.
func TestCounts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	// plain hides memlease's own queue (it is a Waiter): aegis.Acquire
	// retries TryAcquire, as on a backend without one.
	l, err := leasemetrics.Wrap(plain{memlease.New()}, "memory", reg)
	require.NoError(t, err)
	lease, err := l.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, aegis.ErrHeld)
	require.NoError(t, l.Renew(ctx, lease, time.Minute))

	// A blocking Acquire behind the holder: it waits until the release.
	got := make(chan *aegis.Lease, 1)
	go func() {
		next, err := aegis.Acquire(ctx, l, "k", time.Minute)
		if err != nil {
			next = nil
		}
		got <- next
	}()
	require.Eventually(t, func() bool {
		return counter(t, reg, "aegis_lease_acquire_total", map[string]string{"backend": "memory", "result": "held"}) >= 2
	}, 10*time.Second, 5*time.Millisecond, "the waiter is refused while the key is held")
	require.NoError(t, l.Release(ctx, lease))
	next := testenv.Recv(t, got, 10*time.Second, "the waiter granted after the release")
	require.NotNil(t, next)
	require.Greater(t, next.Token, lease.Token)

	require.ErrorIs(t, l.Release(ctx, lease), aegis.ErrLost)
	require.ErrorIs(t, l.Renew(ctx, lease, time.Minute), aegis.ErrLost)
	_, err = l.TryAcquire(ctx, "", time.Minute)
	require.ErrorIs(t, err, aegis.ErrInvalid)

	m := map[string]string{"backend": "memory"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	require.EqualValues(t, 2, counter(t, reg, "aegis_lease_acquire_total", with("result", "granted")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_acquire_total", with("result", "error")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_renew_total", with("result", "renewed")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_renew_total", with("result", "lost")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_release_total", with("result", "released")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_release_total", with("result", "lost")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_lost_total", with("cause", "renew_refused")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_lost_total", with("cause", "release_refused")))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_wait_seconds", m), "one contended acquire")
	require.Positive(t, counter(t, reg, "aegis_lease_op_seconds", with("op", "acquire")))

	// A second Locker on the same registry adds to the same series.
	l2, err := leasemetrics.Wrap(memlease.New(), "memory", reg)
	require.NoError(t, err)
	_, err = l2.TryAcquire(ctx, "other", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 3, counter(t, reg, "aegis_lease_acquire_total", with("result", "granted")))
}

// The wrapper is a Notifier or a Waiter exactly when the Locker is, so
// aegis.Acquire waits on it the way it waits on the backend.
func TestKeepsTheWaitingKind(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pg, err := pglease.New(pool, nil)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		l    aegis.Locker
	}{{"memory", memlease.New()}, {"postgres", pg}} {
		w, err := leasemetrics.Wrap(c.l, c.name, reg)
		require.NoError(t, err)
		_, isN := c.l.(aegis.Notifier)
		_, wN := w.(aegis.Notifier)
		require.Equal(t, isN, wN, "%s: Notifier", c.name)
		_, isW := c.l.(aegis.Waiter)
		_, wW := w.(aegis.Waiter)
		require.Equal(t, isW, wW, "%s: Waiter", c.name)
		lease, err := aegis.Acquire(ctx, w, testenv.Key(t), time.Minute)
		require.NoError(t, err, c.name)
		require.NoError(t, w.Release(ctx, lease), c.name)
	}
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_acquire_total", map[string]string{"backend": "postgres", "result": "granted"}))
	require.EqualValues(t, 1, counter(t, reg, "aegis_lease_release_total", map[string]string{"backend": "postgres", "result": "released"}))
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for _, c := range []struct {
		l       aegis.Locker
		backend string
		reg     prometheus.Registerer
	}{{nil, "x", reg}, {memlease.New(), "", reg}, {memlease.New(), "x", nil}} {
		_, err := leasemetrics.Wrap(c.l, c.backend, c.reg)
		require.ErrorIs(t, err, aegis.ErrInvalid)
	}
}

// The Grafana dashboard in docs/ asks only for metrics that exist: the
// lease metrics Wrap registers, and the queue's and the scheduler's (named
// in their metrics.go; internal/testing/alerts checks those against real
// scrapes).
func TestGrafanaDashboardNamesRealMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/grafana-aegis.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	reg := prometheus.NewRegistry()
	l, err := leasemetrics.Wrap(plain{memlease.New()}, "memory", reg)
	require.NoError(t, err)
	lease, err := l.TryAcquire(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	_, _ = l.TryAcquire(t.Context(), "k", time.Minute)
	require.NoError(t, l.Renew(t.Context(), lease, time.Minute))
	require.NoError(t, l.Release(t.Context(), lease))
	_ = l.Release(t.Context(), lease)
	w, err := leasemetrics.Wrap(memlease.New(), "memory", reg) // a Waiter: its Acquire's wait is observed
	require.NoError(t, err)
	_, err = aegis.Acquire(t.Context(), w, "k", time.Minute)
	require.NoError(t, err)
	known := map[string]bool{}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		known[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			known[mf.GetName()+"_bucket"] = true
		}
	}
	for _, file := range []string{"../../queue/metrics.go", "../../schedule/metrics.go"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`//\t(aegis_(?:queue|schedule)_[a-z_]+)\{`).FindAllStringSubmatch(string(src), -1) {
			known[m[1]], known[m[1]+"_bucket"] = true, true
		}
	}
	exprs := 0
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			exprs++
			for _, name := range regexp.MustCompile(`aegis_[a-z_]+`).FindAllString(target.Expr, -1) {
				require.True(t, known[name], "%s in %q is no metric Aegis exports", name, target.Expr)
			}
		}
	}
	require.GreaterOrEqual(t, exprs, 10)
}
