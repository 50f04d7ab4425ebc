package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/tracing"
)

// job is a registered job and its runs on this node.
type job struct {
	Job
	sched Schedule
	s     *Scheduler
	bound *bound // a catalog job's binding; nil for a code job

	mu      sync.Mutex
	running map[*active]struct{}
	seen    time.Time // the last tick the loop handled
	// settled is the last tick the running loop has settled: claimed
	// (run here or elsewhere), or skipped or dropped with its cause
	// noted. The missed ticks' sweep records none after it while the
	// loop runs (looping): a loop woken past a tick's starting deadline
	// still runs it (MisfireFireOnce) or notes why it did not, and the
	// sweep must not record it first, as missed with no cause (down).
	settled time.Time
	looping bool
	// runCtx is the context of a catalog job's runs: the binder's. Its
	// loop's context ends at every rebind (an edit), and a run already
	// going must not end with it. Nil for a code job: its loop's.
	runCtx context.Context
}

// runContext is the context the job's runs start under, given the loop's.
func (j *job) runContext(loop context.Context) context.Context {
	if j.runCtx != nil {
		return j.runCtx
	}
	return loop
}

func (j *job) lastSeen() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seen
}

// sweepable is the last tick of the job the sweep may record: all of them
// (ok false) when no loop of the job runs here.
func (j *job) sweepable() (upTo time.Time, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.settled, j.looping
}

// settle records that the loop has settled the ticks up to f.
func (j *job) settle(f time.Time) {
	j.mu.Lock()
	j.settled = f
	j.mu.Unlock()
}

// errReplaced is the cause of a replaced run's context.
var errReplaced = errors.New("schedule: run replaced by a later tick")

// maxDue bounds how many ticks one wake-up walks: a scheduler that was down
// for longer counts the rest as misfires without enumerating them.
const maxDue = 100_000

// loop fires the job's ticks until ctx ends.
func (j *job) loop(ctx context.Context) { j.loopFrom(ctx, time.Time{}) }

// loopFrom fires the job's ticks after from (now when zero, or the last
// run the store recorded when that is earlier) until ctx ends.
func (j *job) loopFrom(ctx context.Context, from time.Time) {
	clock := j.s.cfg.Clock
	last := clock.Now()
	if !from.IsZero() && from.Before(last) {
		last = from
	}
	if st := j.s.claim.runStore(); st != nil {
		// Ticks since the last run any replica recorded (or, in leader
		// mode, the last tick any leader enqueued) are misfires.
		if prev, err := st.last(ctx, j.Name); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Reason: "read the last run", Err: err})
		} else if !prev.IsZero() && prev.Before(last) {
			last = prev
		}
	}
	// The ticks up to last are not this loop's: it settles those after.
	j.mu.Lock()
	j.settled, j.looping = last, true
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.looping = false
		j.mu.Unlock()
	}()
	for {
		next := j.sched.Next(last)
		if next.IsZero() {
			return
		}
		wake, stop := clock.Wake(next)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-wake:
		}
		now := clock.Now()
		var due []time.Time // the most recent CatchUpMax+1 due ticks
		skipped := 0
		for f := next; !f.IsZero() && !f.After(now); f = j.sched.Next(f) {
			due = append(due, f)
			if len(due) > j.CatchUpMax+1 {
				due = due[1:]
				skipped++
			}
			last = f
			if skipped+len(due) >= maxDue {
				last = now // give up enumerating: the rest are misfires too
				break
			}
		}
		ticks := j.plan(next, due, skipped, now)
		j.mu.Lock()
		j.seen = last
		j.mu.Unlock()
		for i, f := range ticks {
			done := j.fire(ctx, f, false)
			if done != nil && i < len(ticks)-1 && j.Overlap != OverlapAllow {
				// Catching up: one tick after the other, not overlapping.
				select {
				case <-done:
				case <-ctx.Done():
					return
				}
			}
		}
		j.settle(last)
	}
}

// plan applies the starting deadline and the misfire policy to the due
// ticks (oldest first; the skipped older ones, from first on, were not
// kept) and returns the ticks to fire. Whatever the policy, the ticks it
// drops are the oldest: its misfire event names the first and how many.
func (j *job) plan(first time.Time, due []time.Time, skipped int, now time.Time) []time.Time {
	var onTime, missed []time.Time
	for _, f := range due {
		if now.Sub(f) <= j.deadline(f) {
			onTime = append(onTime, f)
		} else {
			missed = append(missed, f)
		}
	}
	var run []time.Time
	dropped := skipped
	switch j.Misfire {
	case MisfireSkip:
		dropped += len(missed)
	case MisfireFireOnce:
		if len(missed) > 0 && len(onTime) == 0 {
			run = append(run, missed[len(missed)-1])
			dropped += len(missed) - 1
		} else {
			dropped += len(missed)
		}
	case MisfireCatchUp:
		keep := min(len(missed), j.CatchUpMax)
		dropped += len(missed) - keep
		run = append(run, missed[len(missed)-keep:]...)
	}
	if dropped > 0 {
		reason := fmt.Sprintf("%d ticks dropped by policy %s", dropped, j.Misfire)
		j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: first, Reason: reason, Attempt: dropped})
		last := first
		if len(due) > 0 {
			last = due[0].Add(-time.Nanosecond) // the older ticks not kept
		}
		for _, f := range missed {
			if !slices.Contains(run, f) {
				last = f
			}
		}
		// A tick before this replica started is no misfire of its: the
		// sweep records it as down, none running at its time.
		from := first
		if from.Before(j.s.startedAt) {
			from = j.s.startedAt
		}
		if !last.Before(from) {
			j.s.misses.note(j.Name, from, last, CauseMisfire, fmt.Sprintf("%s: %s woke %s after the tick, past its starting deadline", reason, j.s.cfg.Node, now.Sub(from).Round(time.Millisecond)))
		}
	}
	return append(run, onTime...)
}

// deadline is the tick's starting deadline.
func (j *job) deadline(f time.Time) time.Duration {
	if j.StartingDeadline > 0 {
		return j.StartingDeadline
	}
	d := 10 * time.Second
	if next := j.sched.Next(f); !next.IsZero() {
		d = min(d, next.Sub(f)/2)
	}
	return d
}

// retry spaces attempts at a store call that failed.
var retry = backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}

// fire runs tick f (a Catalog.RunNow's when oneOff) under the mode's
// exclusion (its claimer's). It returns a channel that is closed when the run ends, or nil
// when this node does not run it.
func (j *job) fire(ctx context.Context, f time.Time, oneOff bool) (done <-chan struct{}) {
	if tr := j.s.tracer; tr != nil {
		var span trace.Span
		ctx, span = tracing.Start(ctx, tr, "aegis.schedule.fire", tracing.Key(j.Name), tracing.Node(j.s.cfg.Node),
			tracing.AttrFire.String(f.UTC().Format(time.RFC3339Nano)), tracing.AttrScheduleMode.String(string(j.s.claim.mode())))
		defer func() { span.SetAttributes(tracing.AttrClaimedTick.Bool(done != nil)); span.End() }()
	}
	if !j.overlap(f) {
		return nil
	}
	var err error
	tc := &tickClaim{owner: owner.New()}
	for attempt := 0; ; attempt++ {
		var retryable bool
		done, retryable, err = j.s.claim.fire(ctx, j, f, oneOff, tc)
		if err == nil || !retryable || ctx.Err() != nil {
			break
		}
		if isReadOnly(err) {
			// A hot standby: this replica's region is not the primary's.
			// Not retried: the primary's replicas run the tick; this one
			// runs the next ticks once its server is promoted.
			j.s.metrics.notPrimary.Inc()
			j.s.emit(Event{Kind: EventNotPrimary, Job: j.Name, Fire: f, Reason: "the store is a read-only standby: this replica is not the primary's and runs nothing", Err: err})
			j.s.misses.note(j.Name, f, f, CauseStore, j.s.cfg.Node+"'s store is a read-only standby")
			return nil
		}
		// The store is unreachable: fail closed, and retry while the tick
		// is on time.
		j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
		if j.s.cfg.Clock.Now().Sub(f) > j.startBy(f, oneOff) {
			j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: f, Reason: "the store did not answer before the starting deadline", Err: err, Attempt: 1})
			j.s.misses.note(j.Name, f, f, CauseStore, "the store did not answer "+j.s.cfg.Node+"'s claim before the starting deadline: "+err.Error())
			return nil
		}
		t := time.NewTimer(retry.Delay(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	if err != nil && ctx.Err() == nil {
		j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
	}
	return done
}

// overlap applies the overlap policy to this node's runs of the job and
// reports whether the tick may go on.
func (j *job) overlap(f time.Time) bool {
	j.mu.Lock()
	var prev []*active
	for a := range j.running {
		prev = append(prev, a)
	}
	j.mu.Unlock()
	if len(prev) == 0 {
		return true
	}
	switch j.Overlap {
	case OverlapForbid:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "overlap forbid: a run of the job is still going on this node"})
		j.s.misses.note(j.Name, f, f, CauseHeld, "a run of an earlier tick was still going on "+j.s.cfg.Node+" (overlap forbid)")
		return false
	case OverlapReplace:
		// Before the claim (lease mode), or once the claim has ended the
		// predecessors' rows (run-key mode): the mode's.
		j.s.claim.replace(j, prev)
	}
	return true
}

// cancelReplaced cancels this node's runs of the job older than f, whose
// rows the replace statement has ended.
func (j *job) cancelReplaced(f time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for a := range j.running {
		if a.fire.Before(f) {
			a.cancel(errReplaced)
		}
	}
}
