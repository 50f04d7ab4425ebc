package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
)

// fireRunKey claims tick f's run row and runs it if this node won.
func (j *job) fireRunKey(ctx context.Context, f time.Time, oneOff bool) (done <-chan struct{}, retryable bool, err error) {
	st := j.s.cfg.Store
	start := time.Now() // before the claim is sent: the local deadline's start
	cctx, cancel := claimContext(ctx)
	var (
		c            claimed
		token        aegis.Token
		state        string
		won, refused bool
	)
	if j.bound != nil {
		c, token, state, won, refused, err = j.s.claimCatalog(cctx, j, f, oneOff, j.LockAtMostFor, j.Overlap == OverlapForbid)
	} else {
		token, state, won, err = st.claim(cctx, j.Name, f, j.s.cfg.Node, j.LockAtMostFor, j.Overlap == OverlapForbid)
	}
	cancel()
	if err != nil {
		return nil, true, err
	}
	switch {
	case refused:
		j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(oneOff)})
		j.s.lookBack()
		return nil, false, nil
	case won && state == "running" && j.runContext(ctx).Err() != nil:
		j.s.handBack(ctx, j.Name, f, token)
		return nil, false, nil
	case !won:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "another node has the tick"})
		return nil, false, nil
	case state == "skipped":
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Token: token, Reason: "overlap forbid: a run of the job is still going"})
		return nil, false, nil
	}
	if j.Overlap == OverlapReplace {
		if n, err := st.replace(ctx, j.Name, f); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
		} else if n > 0 {
			j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: f, Token: token, Reason: fmt.Sprintf("replaced %d running predecessors", n)})
		}
		// A predecessor on this node stops now (one elsewhere learns at its
		// next heartbeat). After a failed replace it stops too: the tick
		// replaces it either way, and its later writes carry the older
		// token.
		j.cancelReplaced(f)
	}
	return j.startRunKey(j.runContext(ctx), f, token, 1, start, c), false, nil
}

// startRunKey runs a claimed (or reclaimed) run row in a goroutine; c is
// what a catalog job's claim read from its row.
func (j *job) startRunKey(ctx context.Context, f time.Time, token aegis.Token, attempt int, start time.Time, c claimed) <-chan struct{} {
	st := j.s.cfg.Store
	lease := &aegis.Lease{Key: j.Name, Token: token, Owner: j.s.cfg.Node, TTL: j.LockAtMostFor, Deadline: aegis.LocalDeadline(start, j.LockAtMostFor)}
	run := Run{Job: j.Name, Namespace: j.s.ns, Fire: f, Node: j.s.cfg.Node, Token: token, Attempt: attempt, Args: c.args, Version: c.version}
	return j.launch(ctx, run, lease, start.Add(j.LockAtMostFor), &runRow{s: st, job: j.Name, fire: f}, func(jobErr error, held *aegis.Held) {
		state, text := "succeeded", ""
		if jobErr != nil {
			state, text = "failed", jobErr.Error()
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if held != nil {
			_ = held.Release(fctx) // stops the heartbeat; a run row's Release writes nothing
		}
		if err := st.finish(fctx, j.Name, f, token, state, text); errors.Is(err, aegis.ErrLost) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "the run was reclaimed or replaced: its outcome is not recorded", Err: err})
		} else if err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: token, Err: err})
		} else if err := st.prune(fctx, j.Name, f.Add(-j.s.cfg.Retention)); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "prune", Err: err})
		}
	})
}

// claimTimeout bounds a claim that Stop does not cut off.
const claimTimeout = 5 * time.Second

// claimContext is the context of a claim (a run row's insert or reclaim, a
// lease's grant): Stop does not cancel it, so its outcome is known. A
// cancelled commit can land in the store and still report an error: the
// row (or lease) then said this node ran a tick that it never started,
// and blocked the tick until its expiry (SQLite showed it, about one stop
// in twenty that came during a claim).
func claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
}

// handBack gives a run row claimed while stopping to the reapers: its
// expiry is now, so a live replica's reaper runs the tick (with a greater
// token) at its next pass, instead of after LockAtMostFor.
func (s *Scheduler) handBack(ctx context.Context, job string, f time.Time, token aegis.Token) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.handBack(hctx, job, f, token); err != nil {
		s.emit(Event{Kind: EventError, Job: job, Fire: f, Token: token, Reason: "hand back a run claimed while stopping", Err: err})
		return
	}
	s.emit(Event{Kind: EventSkipped, Job: job, Fire: f, Token: token, Reason: "stopping: the run is handed back to the reapers"})
}

// reap retries the crashed runs of this scheduler's jobs in run-key mode.
func (s *Scheduler) reap(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if gone := s.goneNames(); len(gone) > 0 {
			// A crashed run of a paused or deleted schedule is not retried:
			// no claim may start after the pause, a reclaim included. Its
			// row says so instead of staying running.
			if n, err := s.cfg.Store.abandon(ctx, gone); err != nil && ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper: abandon the crashed runs of paused or deleted schedules", Err: err})
			} else if n > 0 {
				s.emit(Event{Kind: EventReclaim, Reason: fmt.Sprintf("abandoned %d crashed runs of paused or deleted catalog schedules", n)})
			}
		}
		jobs := make(map[string]*job)
		var names []string
		for _, j := range s.reapable() {
			jobs[j.Name] = j
			names = append(names, j.Name)
		}
		if len(names) == 0 {
			continue
		}
		runs, err := s.cfg.Store.expired(ctx, names)
		if err != nil {
			if ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper", Err: err})
			}
			continue
		}
		for _, r := range runs {
			j, f := jobs[r.job], r.fire
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			cctx, cancel := claimContext(ctx)
			token, state, attempt, ok, err := s.cfg.Store.reclaim(cctx, j.Name, f, s.cfg.Node, j.LockAtMostFor, j.MaxAttempts)
			cancel()
			switch {
			case isReadOnly(err): // a standby: the primary's reapers retry it
			case err != nil:
				s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "reaper", Err: err})
			case !ok:
			case state == "running" && ctx.Err() != nil:
				s.handBack(ctx, j.Name, f, token)
			case state == "running":
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "retrying a crashed run"})
				var c claimed
				if j.bound != nil {
					c = claimed{args: j.bound.args, version: j.bound.version}
				}
				j.startRunKey(ctx, f, token, attempt, start, c)
			default:
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "abandoned: out of attempts, or a later tick started"})
			}
		}
	}
}
