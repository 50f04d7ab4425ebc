package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/tracing"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// TestNothingWithoutProvider: with no TracerProvider given, a Locker is
// returned as it is, and nothing of the lease path (a grant, Hold's
// renewals, a release, a fence check, a queue job) records a span, even
// with a global TracerProvider that samples everything: no package reads
// the global one. Not parallel: it sets the global provider, and restores
// it before the parallel tests run.
func TestNothingWithoutProvider(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	global := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { require.NoError(t, global.Shutdown(context.Background())) }()
	was := otel.GetTracerProvider()
	otel.SetTracerProvider(global)
	defer otel.SetTracerProvider(was)
	ctx := t.Context()

	pool := testenv.Postgres(t)
	raw, err := pglease.New(pool, nil)
	require.NoError(t, err)
	l := tracing.Locker(raw, nil)
	require.Same(t, raw, l, "no TracerProvider: the Locker itself")

	key := testenv.Key(t)
	h, err := aegis.Hold(ctx, l, key, 2*time.Second) // a renewal every ~667ms
	require.NoError(t, err)
	first := h.Lease().Deadline
	require.Eventually(t, func() bool { return h.Lease().Deadline.After(first) }, 30*time.Second, time.Millisecond,
		"Hold renews the lease at least once")
	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fence.CheckLease(ctx, tx, key, h.Lease()) }))
	require.NoError(t, h.Release(ctx))

	require.NoError(t, queue.Migrate(ctx, pool))
	ran := make(chan struct{}, 1)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[noopArgs](func(ctx context.Context, job *queue.Job[noopArgs]) error {
		ran <- struct{}{}
		return nil
	}))
	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 1}},
		Workers: ws,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	_, err = c.Enqueue(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	testenv.Recv(t, ran, 20*time.Second, "the job runs")
	stop, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stop))

	require.Empty(t, exp.GetSpans(), "no span recorded")
}

// TestUnsampledBuildsNoAttributes: a span the sampler drops gets no
// attributes: an acquire and a release through a Locker traced by a
// provider that never samples allocate little more than the Locker
// itself: a span and a context each (they built and copied their
// attributes first: 12 more). A count of allocations, not a measure of time. Not
// parallel: AllocsPerRun counts the whole process's.
func TestUnsampledBuildsNoAttributes(t *testing.T) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { require.NoError(t, never.Shutdown(context.Background())) })
	allocs := func(l aegis.Locker) float64 {
		return testing.AllocsPerRun(200, func() {
			lease, err := l.TryAcquire(context.Background(), "k", time.Minute)
			if err != nil {
				panic(err)
			}
			if err := l.Release(context.Background(), lease); err != nil {
				panic(err)
			}
		})
	}
	off := allocs(memlease.New())
	traced := allocs(tracing.Locker(memlease.New(), never, tracing.Node("n")))
	// A span and its context each (4 with OpenTelemetry's SDK 1.47), and one
	// spare per span for another version of the SDK.
	require.LessOrEqual(t, traced-off, 6.0, "allocations of two unsampled spans: off %v, never sampled %v", off, traced)
}
