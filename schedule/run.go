package schedule

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/aegislab/aegis"
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
	rctx, cancel := context.WithCancelCause(ctx)
	a := &active{fire: run.Fire, cancel: cancel, done: make(chan struct{})}
	j.mu.Lock()
	j.running[a] = struct{}{}
	j.mu.Unlock()
	j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: run.Fire, Token: run.Token, Attempt: run.Attempt, Until: until})
	j.s.metrics.runs.Inc()
	j.s.wg.Go(func() {
		defer close(a.done)
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
		jctx = context.WithValue(jctx, runKey{}, run)
		jobErr := j.call(jctx)
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
			err = fmt.Errorf("schedule: job %q panicked: %v\n%s", j.Name, p, debug.Stack())
		}
	}()
	return j.Run(ctx)
}
