package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/tracing"
)

// recorder is a TracerProvider that samples every span into a recorder.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return tp, rec
}

func spanAttrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// jobSpan returns the ended span called name of job id, waiting for it
// with a bound (a batched completion ends its span after the job is gone).
func jobSpan(t *testing.T, rec *tracetest.SpanRecorder, name string, id int64) sdktrace.ReadOnlySpan {
	t.Helper()
	var got sdktrace.ReadOnlySpan
	eventually(t, name+" span of job", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == name && spanAttrs(s.Attributes())[tracing.AttrJobID].AsInt64() == id {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

// TestTraced: with a TracerProvider, a job's claim, its handler's run and
// the write of its outcome are spans: the run a child of the job's
// enqueue (its first attempt), linked to the claim, carried by the handler's context, the write its child;
// each with the job's queue, kind, id, token and the client's ID. A failed
// run is an error and its retry is written; CompleteTx is a child of the
// run. Batched completions and SyncComplete alike.
func TestTraced(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		name := "batched"
		if sync {
			name = "sync"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := pool(t)
			ctx := t.Context()
			tp, rec := recorder(t)
			seen := make(chan trace.SpanContext, 3)
			ws := workers(func(ctx context.Context, job *Job[testArgs]) error {
				seen <- trace.SpanContextFromContext(ctx)
				if job.Args.N == 1 {
					return errors.New("boom")
				}
				return nil
			})
			AddWorker(ws, WorkFunc[otherArgs](func(ctx context.Context, job *Job[otherArgs]) error {
				seen <- trace.SpanContextFromContext(ctx)
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return job.CompleteTx(ctx, tx) })
			}))
			c := client(t, p, &Config{
				Queues:         map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
				Workers:        ws,
				SyncComplete:   sync,
				RetryBackoff:   func(int) time.Duration { return time.Hour }, // one run of the failing job
				TracerProvider: tp,
			})
			require.NoError(t, c.Start(ctx))

			res, err := c.Enqueue(ctx, testArgs{N: 0}, nil)
			require.NoError(t, err)
			id := res.Job.ID
			handlerSpan := testenv.Recv(t, seen, 20*time.Second, "the handler runs")
			work := jobSpan(t, rec, "aegis.queue.work", id)
			complete := jobSpan(t, rec, "aegis.queue.complete", id)

			a := spanAttrs(work.Attributes())
			require.Equal(t, DefaultQueue, a[tracing.AttrQueue].AsString())
			require.Equal(t, "test", a[tracing.AttrKind].AsString())
			require.Equal(t, c.ID(), a[tracing.AttrNode].AsString())
			require.EqualValues(t, 1, a[tracing.AttrAttempt].AsInt64())
			token := a[tracing.AttrToken].AsInt64()
			require.Positive(t, token)
			require.Equal(t, codes.Unset, work.Status().Code)
			enqueue := jobSpan(t, rec, "aegis.queue.enqueue", id)
			require.Equal(t, enqueue.SpanContext().SpanID(), work.Parent().SpanID(), "the first attempt is a child of its enqueue")
			require.True(t, work.Parent().IsRemote(), "its parent came through the job's row")
			require.Equal(t, enqueue.SpanContext().TraceID(), work.SpanContext().TraceID())
			require.Equal(t, work.SpanContext(), handlerSpan, "the handler's context carries its run's span")

			require.Len(t, work.Links(), 1, "the run is linked to its claim")
			var claim sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "aegis.queue.claim" && s.SpanContext().Equal(work.Links()[0].SpanContext) {
					claim = s
				}
			}
			require.NotNil(t, claim, "the linked claim span was recorded")
			ca := spanAttrs(claim.Attributes())
			require.Equal(t, DefaultQueue, ca[tracing.AttrQueue].AsString())
			require.Equal(t, c.ID(), ca[tracing.AttrNode].AsString())
			require.EqualValues(t, 1, ca[tracing.AttrClaimed].AsInt64())

			require.Equal(t, work.SpanContext().SpanID(), complete.Parent().SpanID(), "the completion is a child of the run")
			require.Equal(t, work.SpanContext().TraceID(), complete.SpanContext().TraceID())
			ka := spanAttrs(complete.Attributes())
			require.Equal(t, token, ka[tracing.AttrToken].AsInt64())
			require.Equal(t, "test", ka[tracing.AttrKind].AsString())
			require.Equal(t, codes.Unset, complete.Status().Code)
			if sync {
				require.NotContains(t, ka, tracing.AttrBatch)
			} else {
				require.EqualValues(t, 1, ka[tracing.AttrBatch].AsInt64())
			}

			res, err = c.Enqueue(ctx, testArgs{N: 1}, &EnqueueOpts{MaxAttempts: 2})
			require.NoError(t, err)
			testenv.Recv(t, seen, 20*time.Second, "the failing handler runs")
			failed := jobSpan(t, rec, "aegis.queue.work", res.Job.ID)
			require.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, failed.Status())
			retry := jobSpan(t, rec, "aegis.queue.retry", res.Job.ID)
			require.Equal(t, failed.SpanContext().SpanID(), retry.Parent().SpanID())
			require.Equal(t, codes.Unset, retry.Status().Code)

			res, err = c.Enqueue(ctx, otherArgs{}, nil)
			require.NoError(t, err)
			testenv.Recv(t, seen, 20*time.Second, "the CompleteTx handler runs")
			inTx := jobSpan(t, rec, "aegis.queue.complete", res.Job.ID)
			run := jobSpan(t, rec, "aegis.queue.work", res.Job.ID)
			require.Equal(t, run.SpanContext().SpanID(), inTx.Parent().SpanID())
			require.True(t, spanAttrs(inTx.Attributes())[tracing.AttrInTx].AsBool())
			require.Equal(t, codes.Unset, inTx.Status().Code)
		})
	}
}

// TestTracedStaleCompletion: a job reclaimed while its handler was paused
// (heartbeats frozen, another client's reaper bumps its token) has its
// completion refused: the complete span is an error with the event
// aegis.fence.refused carrying the run's token.
func TestTracedStaleCompletion(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	tp, rec := recorder(t)
	started, proceed := make(chan struct{}), make(chan struct{})
	frozen := make(chan struct{})
	var thaw sync.Once
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			close(started)
			block(proceed, time.Minute)
			return nil
		}),
		Lease:          200 * time.Millisecond,
		ReapInterval:   time.Hour, // only the test reaps
		TracerProvider: tp,
		hooks:          &testHooks{heartbeat: func() { block(frozen, time.Minute) }},
	})
	t.Cleanup(func() { thaw.Do(func() { close(frozen) }) }) // before c's Stop
	require.NoError(t, c.Start(ctx))
	res, err := c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	testenv.Recv(t, started, 20*time.Second, "the handler to start")
	reapJob(t, p, res.Job.ID)
	close(proceed)

	complete := jobSpan(t, rec, "aegis.queue.complete", res.Job.ID)
	work := jobSpan(t, rec, "aegis.queue.work", res.Job.ID)
	token := spanAttrs(work.Attributes())[tracing.AttrToken].AsInt64()
	require.Equal(t, codes.Error, complete.Status().Code)
	require.Equal(t, aegis.ErrStale.Error(), complete.Status().Description)
	require.Len(t, complete.Events(), 1)
	e := complete.Events()[0]
	require.Equal(t, tracing.EventRefused, e.Name)
	require.Equal(t, token, spanAttrs(e.Attributes)[tracing.AttrToken].AsInt64(), "the run's token, refused")
	require.Zero(t, spanAttrs(e.Attributes)[tracing.AttrCurrent].AsInt64(), "the row's token is not read: 0")
}

// TestUntraced: without a TracerProvider the client has no tracer and a
// handler's context carries no span.
func TestUntraced(t *testing.T) {
	t.Parallel()
	p := pool(t)
	seen := make(chan trace.SpanContext, 1)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			seen <- trace.SpanContextFromContext(ctx)
			return nil
		}),
	})
	require.Nil(t, c.tracer)
	require.NoError(t, c.Start(t.Context()))
	_, err := c.Enqueue(t.Context(), testArgs{}, nil)
	require.NoError(t, err)
	require.False(t, testenv.Recv(t, seen, 20*time.Second, "the handler runs").IsValid())
}
