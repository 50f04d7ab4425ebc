package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/failpoint"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/tracing"
)

// batchSpan returns the ended enqueue span of a batch of batch jobs,
// waiting for it with a bound.
func batchSpan(t *testing.T, rec *tracetest.SpanRecorder, batch int) sdktrace.ReadOnlySpan {
	t.Helper()
	var got sdktrace.ReadOnlySpan
	eventually(t, "the enqueue span of a batch", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "aegis.queue.enqueue" && spanAttrs(s.Attributes())[tracing.AttrBatch].AsInt64() == int64(batch) {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

// linked reports whether span has a link to sc.
func linked(span sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	for _, l := range span.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() { // a stored one is remote
			return true
		}
	}
	return false
}

// linkedTo returns the ended span called name that span links to.
func linkedTo(t *testing.T, rec *tracetest.SpanRecorder, span sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.Name() == name && linked(span, s.SpanContext()) {
			return s
		}
	}
	require.FailNow(t, "no linked span", "%s links to no %s span: %v", span.Name(), name, span.Links())
	return nil
}

// TestTracedEnqueue: every enqueue is a span, aegis.queue.enqueue, a child
// of the caller's span, with the job's queue, kind and id and the
// client's ID (a batch: its size); the job's first attempt runs as the
// enqueue span's child, one trace from the request to the work, still
// linked to its claim; a retry starts a trace of its own linked to the
// enqueue and to its claim.
func TestTracedEnqueue(t *testing.T) {
	t.Parallel()
	p := pool(t)
	tp, rec := recorder(t)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			if job.Args.N == 1 && job.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}),
		RetryBackoff:   func(int) time.Duration { return 0 },
		TracerProvider: tp,
	})
	ctx, request := tp.Tracer("test").Start(t.Context(), "request")
	res, err := c.Enqueue(ctx, testArgs{N: 0}, nil)
	require.NoError(t, err)
	retried, err := c.Enqueue(ctx, testArgs{N: 1}, &EnqueueOpts{MaxAttempts: 2})
	require.NoError(t, err)
	var inTx *Enqueued
	require.NoError(t, pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		inTx, err = c.EnqueueTx(ctx, tx, testArgs{N: 2}, nil)
		return err
	}))
	ids, err := c.EnqueueMany(ctx, []EnqueueParams{{Args: testArgs{N: 3}}, {Args: testArgs{N: 4}}})
	require.NoError(t, err)
	request.End()
	require.NoError(t, c.Start(t.Context()))

	for _, id := range []int64{res.Job.ID, inTx.Job.ID} {
		enqueue := jobSpan(t, rec, "aegis.queue.enqueue", id)
		require.Equal(t, request.SpanContext().SpanID(), enqueue.Parent().SpanID(), "the enqueue is a child of the caller's span")
		require.Equal(t, request.SpanContext().TraceID(), enqueue.SpanContext().TraceID())
		a := spanAttrs(enqueue.Attributes())
		require.Equal(t, DefaultQueue, a[tracing.AttrQueue].AsString())
		require.Equal(t, "test", a[tracing.AttrKind].AsString())
		require.Equal(t, c.ID(), a[tracing.AttrNode].AsString())
		require.Equal(t, codes.Unset, enqueue.Status().Code)

		work := jobSpan(t, rec, "aegis.queue.work", id)
		require.Equal(t, enqueue.SpanContext().SpanID(), work.Parent().SpanID(), "the first attempt is the enqueue's child")
		require.Equal(t, request.SpanContext().TraceID(), work.SpanContext().TraceID(), "one trace from the request to the work")
		require.Len(t, work.Links(), 1)
		linkedTo(t, rec, work, "aegis.queue.claim")
	}

	batch := batchSpan(t, rec, 2)
	require.Equal(t, request.SpanContext().SpanID(), batch.Parent().SpanID())
	require.Equal(t, c.ID(), spanAttrs(batch.Attributes())[tracing.AttrNode].AsString())
	for _, id := range ids {
		work := jobSpan(t, rec, "aegis.queue.work", id)
		require.Equal(t, batch.SpanContext().SpanID(), work.Parent().SpanID(), "a batch's jobs are children of its span")
	}

	enqueue := jobSpan(t, rec, "aegis.queue.enqueue", retried.Job.ID)
	var first, second sdktrace.ReadOnlySpan
	eventually(t, "both attempts of the retried job traced", func() bool {
		for _, s := range rec.Ended() {
			a := spanAttrs(s.Attributes())
			if s.Name() != "aegis.queue.work" || a[tracing.AttrJobID].AsInt64() != retried.Job.ID {
				continue
			}
			switch a[tracing.AttrAttempt].AsInt64() {
			case 1:
				first = s
			case 2:
				second = s
			}
		}
		return first != nil && second != nil
	})
	require.Equal(t, enqueue.SpanContext().SpanID(), first.Parent().SpanID())
	require.Equal(t, codes.Error, first.Status().Code)
	require.False(t, second.Parent().IsValid(), "a retry starts a trace of its own")
	require.NotEqual(t, request.SpanContext().TraceID(), second.SpanContext().TraceID())
	require.Len(t, second.Links(), 2, "linked to its claim and to the enqueue")
	require.True(t, linked(second, enqueue.SpanContext()), "the retry is linked to the enqueue")
	linkedTo(t, rec, second, "aegis.queue.claim")
}

// TestTraceContextStoredWithTheJob: a client without a TracerProvider
// stores the trace context of its caller's span (a process that only
// enqueues), and a traced worker runs the job as that span's child. A job
// without one (NULL: enqueued untraced, or before the migration) or with
// one that does not parse runs as before: a trace of its own, linked to
// its claim only.
func TestTraceContextStoredWithTheJob(t *testing.T) {
	t.Parallel()
	p := pool(t)
	tp, rec := recorder(t)
	enqueuer := client(t, p, &Config{AllowUnknownKinds: true})
	ctx, request := tp.Tracer("test").Start(t.Context(), "request")
	request.End()
	carried, err := enqueuer.Enqueue(ctx, testArgs{N: 0}, nil)
	require.NoError(t, err)
	plain, err := enqueuer.Enqueue(t.Context(), testArgs{N: 1}, nil)
	require.NoError(t, err)
	garbled, err := enqueuer.Enqueue(ctx, testArgs{N: 2}, nil)
	require.NoError(t, err)
	require.Len(t, rec.Ended(), 1, "an untraced client starts no span: the request's only")

	var stored *string
	require.NoError(t, p.QueryRow(t.Context(), `SELECT traceparent FROM aegis_job WHERE id = $1`, carried.Job.ID).Scan(&stored))
	require.NotNil(t, stored)
	require.Equal(t, "00-"+request.SpanContext().TraceID().String()+"-"+request.SpanContext().SpanID().String()+"-01", *stored)
	require.NoError(t, p.QueryRow(t.Context(), `SELECT traceparent FROM aegis_job WHERE id = $1`, plain.Job.ID).Scan(&stored))
	require.Nil(t, stored, "no span, no trace context")
	_, err = p.Exec(t.Context(), `UPDATE aegis_job SET traceparent = '00-not-a-trace-01' WHERE id = $1`, garbled.Job.ID)
	require.NoError(t, err)

	worker := client(t, p, &Config{
		Queues:         map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers:        workers(func(context.Context, *Job[testArgs]) error { return nil }),
		TracerProvider: tp,
	})
	require.NoError(t, worker.Start(t.Context()))
	work := jobSpan(t, rec, "aegis.queue.work", carried.Job.ID)
	require.Equal(t, request.SpanContext().SpanID(), work.Parent().SpanID())
	require.Equal(t, request.SpanContext().TraceID(), work.SpanContext().TraceID())
	for _, id := range []int64{plain.Job.ID, garbled.Job.ID} {
		work := jobSpan(t, rec, "aegis.queue.work", id)
		require.False(t, work.Parent().IsValid(), "job %d: a trace of its own", id)
		require.Len(t, work.Links(), 1, "job %d: linked to its claim only", id)
		require.Equal(t, codes.Unset, work.Status().Code)
		jobSpan(t, rec, "aegis.queue.complete", id)
	}
}

// The parse of a stored traceparent: OpenTelemetry's W3C propagator;
// anything it refuses is no parent.
func TestEnqueuer(t *testing.T) {
	t.Parallel()
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := enqueuer(valid)
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.True(t, sc.IsSampled())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	for _, bad := range []string{
		"",
		"garbage",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      // no flags
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper case
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // version 00 has no more fields
		"00-4bf92f3577b34da6a3ce929d0e0e473\x00-00f067aa0ba902b7-01",
	} {
		require.False(t, enqueuer(bad).IsValid(), "%q", bad)
	}
	// An unsampled enqueuer's flags are kept: its job's work is not
	// sampled either (by a parent-based sampler).
	require.False(t, enqueuer("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").IsSampled())
}

// FuzzEnqueuer: no stored text makes the parse panic, and what parses is
// written back as it was read (so the worker's parent is the enqueuer's).
func FuzzEnqueuer(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		sc := enqueuer(s)
		if !sc.IsValid() {
			return
		}
		again := enqueuer(traceparentOf(trace.ContextWithSpanContext(context.Background(), sc)))
		require.Equal(t, sc.TraceID(), again.TraceID())
		require.Equal(t, sc.SpanID(), again.SpanID())
		require.Equal(t, sc.TraceFlags(), again.TraceFlags())
	})
}

// TestTracedLostLease: a heartbeat that finds the job's token moved on
// (taken over) is the span aegis.queue.heartbeat, a child of the job's
// work span, with its attributes and the refusal of its token.
func TestTracedLostLease(t *testing.T) {
	t.Parallel()
	p := pool(t)
	tp, rec := recorder(t)
	started := make(chan struct{})
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			close(started)
			<-ctx.Done() // the lost lease cancels it
			return context.Cause(ctx)
		}),
		Lease:          3 * time.Second, // a heartbeat every second
		ReapInterval:   time.Hour,
		TracerProvider: tp,
	})
	require.NoError(t, c.Start(t.Context()))
	res, err := c.Enqueue(t.Context(), testArgs{}, nil)
	require.NoError(t, err)
	testenv.Recv(t, started, 20*time.Second, "the handler to start")
	_, err = p.Exec(t.Context(), `UPDATE aegis_job SET token = token + 1 WHERE id = $1`, res.Job.ID) // taken over
	require.NoError(t, err)

	hb := jobSpan(t, rec, "aegis.queue.heartbeat", res.Job.ID)
	work := jobSpan(t, rec, "aegis.queue.work", res.Job.ID)
	require.Equal(t, work.SpanContext().SpanID(), hb.Parent().SpanID(), "the lost lease is in the job's trace")
	a := spanAttrs(hb.Attributes())
	token := spanAttrs(work.Attributes())[tracing.AttrToken].AsInt64()
	require.Equal(t, token, a[tracing.AttrToken].AsInt64())
	require.Equal(t, "test", a[tracing.AttrKind].AsString())
	require.Equal(t, c.ID(), a[tracing.AttrNode].AsString())
	require.Equal(t, sdktrace.Status{Code: codes.Error, Description: aegis.ErrStale.Error()}, hb.Status())
	require.Len(t, hb.Events(), 1)
	require.Equal(t, tracing.EventRefused, hb.Events()[0].Name)
	require.Equal(t, token, spanAttrs(hb.Events()[0].Attributes)[tracing.AttrToken].AsInt64())
	require.Equal(t, codes.Error, work.Status().Code, "the handler returned the lost lease")
}

// TestTracedHeartbeatFailure: a heartbeat statement that fails is the span
// aegis.queue.heartbeat, a trace of its own (it renews every claim of the
// client), an error with the number of claims it renewed.
func TestTracedHeartbeatFailure(t *testing.T) {
	t.Parallel()
	e := newFPEnv(t)
	tp, rec := recorder(t)
	e.plan.Arm("fault", "SET locked_until = now()", failpoint.Before, 1)
	e.plan.Watch("fault", "SET locked_until = now()")
	c := e.client(Config{TracerProvider: tp})
	id := e.enqueue(c, "wait-heartbeats", nil)
	e.once(c, id, 1, StateCompleted)
	var hb sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "aegis.queue.heartbeat" {
			require.Nil(t, hb, "one failed heartbeat, one span")
			hb = s
		}
	}
	require.NotNil(t, hb, "the failed heartbeat's span")
	require.False(t, hb.Parent().IsValid())
	require.Equal(t, codes.Error, hb.Status().Code)
	a := spanAttrs(hb.Attributes())
	require.EqualValues(t, 1, a[tracing.AttrJobs].AsInt64())
	require.Equal(t, c.ID(), a[tracing.AttrNode].AsString())
}

// TestTracedReclaim: a maintenance pass that reclaims expired leases is
// the span aegis.queue.maintenance with its child aegis.queue.reclaim,
// both counting the jobs reclaimed (the reclaim also those discarded); a
// pass that did nothing is no span.
func TestTracedReclaim(t *testing.T) {
	t.Parallel()
	p := pool(t)
	tp, rec := recorder(t)
	enqueuer := client(t, p, &Config{AllowUnknownKinds: true})
	var ids []int64
	for _, max := range []int{2, 1} { // the second had its last attempt: discarded
		res, err := enqueuer.Enqueue(t.Context(), testArgs{}, &EnqueueOpts{MaxAttempts: max})
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	// Claimed by a client that vanished: running, its lease expired.
	_, err := p.Exec(t.Context(), `UPDATE aegis_job SET state = 'running', token = token + 1, attempt = 1,
		locked_until = now() - interval '1 minute', locked_by = 'gone' WHERE id = ANY($1)`, ids)
	require.NoError(t, err)

	c := client(t, p, &Config{
		Queues:         map[string]QueueConfig{DefaultQueue: {MaxWorkers: 1}},
		Workers:        workers(func(context.Context, *Job[testArgs]) error { return nil }),
		ReapInterval:   20 * time.Millisecond,
		VacuumDeadRows: -1,
		TracerProvider: tp,
	})
	require.NoError(t, c.Start(t.Context()))
	jobSpan(t, rec, "aegis.queue.complete", ids[0]) // reclaimed, then run
	var reclaim sdktrace.ReadOnlySpan
	eventually(t, "the reclaim span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "aegis.queue.reclaim" {
				reclaim = s
				return true
			}
		}
		return false
	})
	a := spanAttrs(reclaim.Attributes())
	require.EqualValues(t, 2, a[tracing.AttrReclaimed].AsInt64())
	require.EqualValues(t, 1, a[tracing.AttrDiscarded].AsInt64())
	require.Equal(t, c.ID(), a[tracing.AttrNode].AsString())
	require.Equal(t, codes.Unset, reclaim.Status().Code)

	var passes int
	for _, s := range rec.Ended() {
		if s.Name() != "aegis.queue.maintenance" {
			continue
		}
		passes++
		a := spanAttrs(s.Attributes())
		require.Positive(t, a[tracing.AttrReclaimed].AsInt64()+a[tracing.AttrPromoted].AsInt64()+a[tracing.AttrPruned].AsInt64(),
			"a pass that did nothing is no span")
		if s.SpanContext().SpanID() == reclaim.Parent().SpanID() {
			require.EqualValues(t, 2, a[tracing.AttrReclaimed].AsInt64())
		}
	}
	require.Equal(t, 1, passes, "one pass did work")
	require.True(t, reclaim.Parent().IsValid())
}
