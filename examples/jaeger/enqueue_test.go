package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
	"github.com/aegislab/aegis/tracing"
)

// invoiceArgs is the job the scheduled run enqueues.
type invoiceArgs struct {
	Period string `json:"period"`
}

func (invoiceArgs) Kind() string { return "invoice-export" }

// jobEnqueuedInsideARun: a scheduled run (a replica of its own service)
// enqueues a job, which a worker (another service) works. Jaeger returns
// one trace from the run to the work: the run its root, the enqueue its
// child, the work the enqueue's child, exported by the two services.
func jobEnqueuedInsideARun(t *testing.T, b *backend) {
	ctx := t.Context()
	pool := testenv.Postgres(t)
	require.NoError(t, queue.Migrate(ctx, pool))
	schedulerTP, workerTP := b.provider(t, "aegis-jaeger-test-scheduler"), b.provider(t, "aegis-jaeger-test-worker")

	worked := make(chan trace.SpanContext, 1)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[invoiceArgs](func(ctx context.Context, j *queue.Job[invoiceArgs]) error {
		worked <- trace.SpanContextFromContext(ctx)
		return nil
	}))
	enqueuer, err := queue.New(pool, &queue.Config{Workers: ws, TracerProvider: schedulerTP})
	require.NoError(t, err)
	worker, err := queue.New(pool, &queue.Config{Workers: ws, TracerProvider: workerTP,
		Queues: map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 1}}})
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	stopWorker := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, worker.Stop(sctx), "the worker stops within 30s")
	}

	db, err := sqlitelease.Open(filepath.Join(t.TempDir(), "aegis.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	enqueued := make(chan int64, 1)
	s := start(t, &schedule.Config{Node: "scheduler", Store: store, Clock: clock, TracerProvider: schedulerTP}, schedule.Job{
		Name: "monthly-invoices", Every: time.Hour,
		Run: func(ctx context.Context) error {
			res, err := enqueuer.Enqueue(ctx, invoiceArgs{Period: "2026-10"}, nil)
			if err != nil {
				return err
			}
			enqueued <- res.Job.ID
			return nil
		},
	})
	historytest.AdvanceWhenWaiting(t, clock, time.Hour)
	id := testenv.Recv(t, enqueued, 10*time.Second, "the run enqueues the job")
	work := testenv.Recv(t, worked, 30*time.Second, "the worker works the job")
	stop(t, s)   // the run's span has ended
	stopWorker() // and the work's
	require.NoError(t, schedulerTP.Shutdown(ctx))
	require.NoError(t, workerTP.Shutdown(ctx))

	tr := b.trace(t, work.TraceID().String(), func(tr jaegerTrace) bool {
		return len(tr.named("aegis.schedule.run")) == 1 && len(tr.named("aegis.queue.enqueue")) == 1 && len(tr.named("aegis.queue.work")) == 1
	})
	run, enqueue, job := tr.named("aegis.schedule.run")[0], tr.named("aegis.queue.enqueue")[0], tr.named("aegis.queue.work")[0]
	require.Empty(t, run.parent(), "the run is the trace's root")
	require.Equal(t, "aegis-jaeger-test-scheduler", tr.service(run))
	require.Equal(t, "monthly-invoices", run.tag(string(tracing.AttrKey)))
	require.Equal(t, run.SpanID, enqueue.parent(), "the enqueue is a child of the run")
	require.Equal(t, "aegis-jaeger-test-scheduler", tr.service(enqueue))
	require.Equal(t, enqueue.SpanID, job.parent(), "the work is a child of the enqueue")
	require.Equal(t, "aegis-jaeger-test-worker", tr.service(job), "the worker exports the work")
	require.Equal(t, work.SpanID().String(), job.SpanID, "the handler's context carries the work span")
	require.Equal(t, fmt.Sprint(id), job.tag(string(tracing.AttrJobID)))
	require.Equal(t, "invoice-export", job.tag(string(tracing.AttrKind)))
}
