package schedule

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/tracing"
)

// active is a run in progress on this node.
type active struct {
	fire   time.Time
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// launch runs the job in a goroutine under lease (kept alive through
// keeper unless keep-alive is off; until is when it expires unless
// renewed), then calls end with the job's error and the keep-alive (nil
// without), which end must release. The job's context has ctx's values
// (lease mode puts the lease there: LeaseFrom) and the run's (RunFrom).
func (j *job) launch(ctx context.Context, run Run, lease *aegis.Lease, until time.Time, keeper aegis.Locker, end func(error, *aegis.Held)) <-chan struct{} {
	ctx, span := j.runSpan(ctx, run)
	rctx, cancel := context.WithCancelCause(ctx)
	a := &active{fire: run.Fire, cancel: cancel, done: make(chan struct{})}
	j.mu.Lock()
	j.running[a] = struct{}{}
	j.mu.Unlock()
	j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Until: until})
	j.s.metrics.runs.Inc()
	j.s.wg.Go(func() {
		defer close(a.done)
		defer span.End()
		j.traced(ctx, run, span)
		var (
			jctx context.Context
			held *aegis.Held
			rk   *renewals
		)
		if j.DisableKeepAlive {
			var stop context.CancelFunc
			jctx, stop = context.WithDeadlineCause(rctx, lease.Deadline, fmt.Errorf("%w: LockAtMostFor passed without keep-alive", aegis.ErrLost))
			defer stop()
		} else {
			// The lease outlives a cancelled run until the job returns (a
			// job may ignore its context): end releases it.
			rk = &renewals{Locker: keeper, j: j, run: run}
			rk.running.Store(true)
			held = aegis.Keep(context.WithoutCancel(rctx), rk, lease)
			var jcancel context.CancelCauseFunc
			jctx, jcancel = context.WithCancelCause(held.Context())
			defer jcancel(nil)
			defer context.AfterFunc(rctx, func() { jcancel(context.Cause(rctx)) })()
		}
		jctx = withRun(jctx, run)
		jobErr := j.call(jctx)
		tracing.Fail(span, jobErr)
		if rk != nil {
			rk.running.Store(false) // end's LockAtLeastFor renewal is no keep-alive
		}
		if cause := context.Cause(jctx); errors.Is(cause, aegis.ErrLost) || errors.Is(cause, errReplaced) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Err: cause})
		}
		end(jobErr, held)
		cancel(nil)
		// Off the running set before Done is announced: a run reported
		// done never makes a later tick an overlap.
		j.mu.Lock()
		delete(j.running, a)
		j.mu.Unlock()
		j.s.emit(Event{Kind: EventDone, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Err: jobErr})
	})
	return a.done
}

// runSpan starts the run's span, when the scheduler traces: a trace of
// its own (a run outlives its tick's claim, and a retry is another run),
// linked to the span of the claim in ctx.
func (j *job) runSpan(ctx context.Context, run Run) (context.Context, trace.Span) {
	tr := j.s.tracer
	if tr == nil {
		return ctx, trace.SpanFromContext(context.Background()) // records nothing
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(tracing.Key(run.Job), tracing.Token(run.Token), tracing.Node(run.Node),
		tracing.AttrRunAttempt.Int(run.Attempt), tracing.AttrFire.String(run.Fire.UTC().Format(time.RFC3339Nano)))}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return tr.Start(ctx, "aegis.schedule.run", opts...)
}

// traced writes a sampled run's trace id on its attempt (run-key mode):
// the console links the attempt to its trace.
func (j *job) traced(ctx context.Context, run Run, span trace.Span) {
	sc := span.SpanContext()
	st := j.s.claim.runStore()
	if !sc.IsSampled() || st == nil || j.s.claim.enqueues() {
		return
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := st.traced(tctx, run.Job, run.Fire, run.Token, sc.TraceID().String()); err != nil {
		j.s.emit(Event{Kind: EventError, Job: run.Job, Fire: run.Fire, Token: run.Token, Reason: "record the run's trace id", Err: err})
	}
}

// renewals reports each keep-alive renewal of a running run as
// EventRenewed.
type renewals struct {
	aegis.Locker
	j       *job
	run     Run
	running atomic.Bool
}

func (r *renewals) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	start := time.Now()
	err := r.Locker.Renew(ctx, l, ttl)
	if err == nil && r.running.Load() {
		r.j.s.emit(Event{Kind: EventRenewed, Job: r.run.Job, Fire: r.run.Fire, Token: r.run.Token, Attempt: r.run.Attempt, Until: start.Add(ttl)})
	}
	return err
}

// call runs the job, turning a panic into an error.
func (j *job) call(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			// The recorded outcome has the panic's value and first frames;
			// the log has the whole stack.
			stack := debug.Stack()
			j.s.log.Error("schedule: job panicked", "job", j.Name, "panic", p, "stack", string(stack))
			err = fmt.Errorf("schedule: job %q %s", j.Name, errtext.Panic(p, stack))
		}
	}()
	return j.Run(ctx)
}
