package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
	"github.com/aegislab/aegis/tracing"
)

// A fenced refusal, traced end to end through the scheduler: a holder's
// run row expires while it is stopped, a successor reclaims the tick and
// writes through the fence, and the holder's late write is refused. Each
// run is a trace (aegis.schedule.run with the job, the run's token, attempt
// and node), its fence check a child span, the refusal an event with both
// tokens; each attempt on record carries its run's trace id.
func TestTracedRefusalEndToEnd(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	ctx := t.Context()
	require.NoError(t, fence.MigrateSQL(ctx, r.db))
	exp := tracetest.NewInMemoryExporter()
	provider := func() *sdktrace.TracerProvider {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	write := func(ctx context.Context) error {
		token, _ := schedule.TokenFrom(ctx)
		wctx := context.WithoutCancel(ctx) // a stopped process writes after its context ended
		tx, err := r.db.BeginTx(wctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fence.CheckSQL(wctx, tx, "nightly", token); err != nil {
			return err
		}
		return tx.Commit()
	}
	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	resume := make(chan struct{})
	var resumeOnce sync.Once
	t.Cleanup(func() { resumeOnce.Do(func() { close(resume) }) })
	started := make(chan struct{}, 1)
	var holderWrite error
	holder := start(t, &schedule.Config{Node: "holder", Store: r.store, Clock: clock, ReapInterval: time.Hour, TracerProvider: provider()}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true,
		Run: func(ctx context.Context) error {
			started <- struct{}{}
			block(resume, time.Minute)
			holderWrite = write(ctx)
			return holderWrite
		},
	})
	advanceWhenWaiting(t, clock, time.Hour)
	testenv.Recv(t, started, 10*time.Second, "the holder's run")
	wrote := make(chan error, 1)
	successor := start(t, &schedule.Config{Node: "successor", Store: r.store, Clock: clock, ReapInterval: 20 * time.Millisecond, TracerProvider: provider()}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 5 * time.Second,
		Run: func(ctx context.Context) error { err := write(ctx); wrote <- err; return err },
	})
	require.NoError(t, testenv.Recv(t, wrote, 10*time.Second, "the successor's write"))
	resumeOnce.Do(func() { close(resume) })
	reader, err := schedule.NewRunReader(ctx, r.db, nil)
	require.NoError(t, err)
	var as []schedule.Attempt
	waitFor(t, 10*time.Second, func() bool {
		as, err = reader.Attempts(ctx, "nightly", 10)
		return err == nil && len(as) == 2 && as[1].Outcome == "refused"
	}, "the holder's end on record: %+v %v", &as, &err)
	stop(t, holder)
	stop(t, successor) // its run's span has ended
	require.ErrorIs(t, holderWrite, aegis.ErrStale)

	spans := exp.GetSpans()
	runs := map[string]tracetest.SpanStub{} // by node
	for _, s := range spans {
		if s.Name == "aegis.schedule.run" {
			runs[attr(s, tracing.AttrNode)] = s
		}
	}
	require.Len(t, runs, 2, "a run span per attempt")
	for i, a := range as {
		run := runs[a.Node]
		require.Equal(t, run.SpanContext.TraceID().String(), a.TraceID, "attempt %d carries its run's trace id", i)
		require.Equal(t, "nightly", attr(run, tracing.AttrKey))
		require.Equal(t, int64(a.Token), attrInt(run, tracing.AttrToken))
		require.Equal(t, int64(a.Attempt), attrInt(run, tracing.AttrRunAttempt))
		require.Len(t, run.Links, 1, "linked to the claim's span")
	}
	var checks []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "aegis.fence.check" {
			checks = append(checks, s)
		}
	}
	require.Len(t, checks, 2, "a fence check in each run")
	for _, c := range checks {
		owner, ok := byID(spans, c.Parent.SpanID())
		require.True(t, ok, "the fence check's parent is a span of the test")
		require.Equal(t, "aegis.schedule.run", owner.Name)
		require.Equal(t, owner.SpanContext.TraceID(), c.SpanContext.TraceID())
		node := attr(owner, tracing.AttrNode)
		if node == "successor" {
			require.Empty(t, c.Events, "the successor's write is not refused")
			continue
		}
		require.Len(t, c.Events, 1, "the holder's late write is refused")
		ev := c.Events[0]
		require.Equal(t, tracing.EventRefused, ev.Name)
		vals := map[string]int64{}
		for _, kv := range ev.Attributes {
			vals[string(kv.Key)] = kv.Value.AsInt64()
		}
		require.Equal(t, attrInt(runs["holder"], tracing.AttrToken), vals[string(tracing.AttrToken)], "the writer's token")
		require.Equal(t, attrInt(runs["successor"], tracing.AttrToken), vals[string(tracing.AttrCurrent)], "the token the fence held")
	}
	var claimed int
	for _, s := range spans {
		if s.Name == "aegis.schedule.fire" && attrBool(s, tracing.AttrClaimedTick) {
			claimed++
			require.Equal(t, "holder", attr(s, tracing.AttrNode), "the tick's claim (the successor's was a reclaim)")
		}
	}
	require.Equal(t, 1, claimed)
}

// Without a TracerProvider, a run's attempt has no trace id.
func TestUntracedAttemptHasNoTraceID(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := &runLog{}
	start(t, &schedule.Config{Node: "n", Store: r.store, Clock: clock}, schedule.Job{
		Name: "plain", Every: time.Hour, Run: func(ctx context.Context) error { log.record(ctx); return nil }})
	advanceWhenWaiting(t, clock, time.Hour)
	reader, err := schedule.NewRunReader(t.Context(), r.db, nil)
	require.NoError(t, err)
	var as []schedule.Attempt
	waitFor(t, 10*time.Second, func() bool {
		as, err = reader.Attempts(t.Context(), "plain", 10)
		return err == nil && len(as) == 1 && as[0].Outcome == "succeeded"
	}, "the run: %+v %v", &as, &err)
	require.Empty(t, as[0].TraceID)
}

// attr, attrInt and attrBool read a span's attribute.
func attr(s tracetest.SpanStub, k attribute.Key) string { return value(s, k).AsString() }

func attrInt(s tracetest.SpanStub, k attribute.Key) int64 { return value(s, k).AsInt64() }

func attrBool(s tracetest.SpanStub, k attribute.Key) bool { return value(s, k).AsBool() }

func value(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// byID finds the span whose id is id.
func byID(spans tracetest.SpanStubs, id trace.SpanID) (tracetest.SpanStub, bool) {
	for _, s := range spans {
		if s.SpanContext.SpanID() == id {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// noteArgs is the job a scheduled run enqueues.
type noteArgs struct{}

func (noteArgs) Kind() string { return "note" }

// A job enqueued inside a scheduled run (run-key mode) is one trace from
// the run to the work: the enqueue span is a child of the run's span, and
// the job's work span, in a queue client that could be another process's,
// a child of the enqueue, with the run's trace id.
func TestTracedRunEnqueuesOneTrace(t *testing.T) {
	t.Parallel()
	r := sqliteReplica(t, sqlitePath(t))
	pool := testenv.Postgres(t)
	ctx := t.Context()
	require.NoError(t, queue.Migrate(ctx, pool))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	worked := make(chan trace.SpanContext, 1)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[noteArgs](func(ctx context.Context, _ *queue.Job[noteArgs]) error {
		worked <- trace.SpanContextFromContext(ctx)
		return nil
	}))
	enqueuer, err := queue.New(pool, &queue.Config{Workers: ws, TracerProvider: tp})
	require.NoError(t, err)
	worker, err := queue.New(pool, &queue.Config{Workers: ws, TracerProvider: tp,
		Queues: map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 1}}})
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, worker.Stop(sctx))
	})

	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	enqueued := make(chan int64, 1)
	s := start(t, &schedule.Config{Node: "a", Store: r.store, Clock: clock, TracerProvider: tp}, schedule.Job{
		Name: "nightly", Every: time.Hour,
		Run: func(ctx context.Context) error {
			res, err := enqueuer.Enqueue(ctx, noteArgs{}, nil)
			if err != nil {
				return err
			}
			enqueued <- res.Job.ID
			return nil
		},
	})
	require.Equal(t, schedule.ModeRunKey, s.Mode())
	advanceWhenWaiting(t, clock, time.Hour)
	id := testenv.Recv(t, enqueued, 10*time.Second, "the run enqueues")
	work := testenv.Recv(t, worked, 20*time.Second, "the job is worked")
	stop(t, s) // the run's span has ended

	var run, enqueue sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "aegis.schedule.run":
			run = sp
		case "aegis.queue.enqueue":
			enqueue = sp
		}
	}
	require.NotNil(t, run, "the run's span")
	require.NotNil(t, enqueue, "the enqueue's span")
	require.Equal(t, run.SpanContext().SpanID(), enqueue.Parent().SpanID(), "the enqueue is a child of the run")
	require.Equal(t, run.SpanContext().TraceID(), work.TraceID(), "the work is in the run's trace")
	waitFor(t, 10*time.Second, func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == "aegis.queue.work" && sp.SpanContext().Equal(work) {
				return sp.Parent().SpanID() == enqueue.SpanContext().SpanID()
			}
		}
		return false
	}, "the work span of job %d, a child of the enqueue", id)
}
