package runner

// A run's supervision: its catalog, its faults at their times, the
// ticks of its grid and their windows, and its end.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/schedule"
)

// supervise runs the run: tick events, faults, the end, the report.
func (r *Run) supervise() {
	ctx, cancel := r.lifetime()
	defer cancel()
	defer close(r.done)
	var ticks sync.WaitGroup
	defer ticks.Wait()
	ticks.Go(func() { r.tickEvents(ctx) })
	for _, ch := range r.cfg.Chaos {
		if ch.Kind == lab.Skew || ch.Kind == lab.Latency {
			r.labEvent(lab.Event{Kind: lab.EventChaos, Node: ch.Node(), Detail: ch.String()})
			continue
		}
		r.chaos.Go(func() {
			if !backoff.Sleep(ctx, time.Until(r.start.Add(ch.At))) {
				return
			}
			if err := r.apply(ctx, ch); err != nil {
				r.note("%s: %v", ch, err)
			}
		})
	}
	lastWindow := r.start.Add(time.Duration(r.cfg.Ticks()-1)*r.cfg.Tick + r.cfg.Window())
	var longest time.Duration
	for _, ch := range r.cfg.Chaos {
		longest = max(longest, ch.At+ch.For)
	}
	hard := time.NewTimer(time.Until(lastWindow.Add(longest + 30*time.Second)))
	defer hard.Stop()
	for {
		// The change channel first, then the check: a node that exits
		// between the two closes the channel taken, never a later one.
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if r.allFinished() {
			break
		}
		select {
		case <-changed:
			continue
		case <-r.stop:
			r.mu.Lock()
			r.stopped = true
			r.mu.Unlock()
		case <-hard.C:
			r.note("the run did not end by itself in time: its nodes were stopped")
		}
		break
	}
	r.Stop()
	r.mu.Lock()
	r.chaosShut = true
	r.mu.Unlock()
	r.chaos.Wait()
	r.stopNodes()
	r.closeProxies()
	r.healRedis()
	r.s.release(r)
	r.report, r.err = r.buildReport()
}

// restartTries bounds how many times restart starts a node that exits
// before it is ready.
const restartTries = 10

// restart starts a node a fault killed again and sends it the start once
// it is ready. A node started while a server it needs is out of reach (a
// PostgreSQL crash, a partition of the node) exits before it is ready:
// it is started again once the lab reaches the store of record and none
// of the node's connections is cut, up to restartTries times, while the
// run lasts.
func (r *Run) restart(ctx context.Context, np *nodeProc) error {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		if err := r.spawn(np); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := r.waitReady(wctx, np)
		cancel()
		if err == nil {
			r.sendStart(np)
			return nil
		}
		r.mu.Lock()
		exited := np.exited
		r.mu.Unlock()
		select {
		case <-exited:
		default:
			return err // not ready in time: starting another would not help
		}
		r.mu.Lock()
		refused := np.refused
		r.mu.Unlock()
		if refused || try == restartTries || ctx.Err() != nil { // refused: it would refuse again
			return fmt.Errorf("%w (started %d times)", err, try)
		}
		r.mu.Lock()
		np.killed = true // the run waits for its restart, as for a kill's
		r.mu.Unlock()
		r.awaitReachable(ctx, np, &wait)
		if ctx.Err() != nil {
			r.mu.Lock()
			np.killed = false // not restarted: the run's end waits for it no more
			r.mu.Unlock()
			return fmt.Errorf("%w (started %d times; the run ended before its servers were back)", err, try)
		}
	}
}

// awaitReachable waits until the lab reaches the store of record and none
// of np's connections is cut, or ctx ends: *wait first, then doubling it
// up to a second between looks. The servers' state has no event to wait
// on, so it is polled.
func (r *Run) awaitReachable(ctx context.Context, np *nodeProc, wait *time.Duration) {
	for {
		if !backoff.Sleep(ctx, *wait) {
			return
		}
		*wait = min(2**wait, time.Second)
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.db.PingContext(pctx)
		cancel()
		if err == nil && !r.cut(np) {
			return
		}
	}
}

// cut reports whether any of np's connections to its servers is cut.
func (r *Run) cut(np *nodeProc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range np.proxies {
		for _, p := range ps {
			if p.IsCut() {
				return true
			}
		}
	}
	return false
}

// allFinished reports whether every node's current process has finished
// its ticks and exited.
func (r *Run) allFinished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, np := range r.nodes {
		select {
		case <-np.exited:
			if np.killed {
				return false // being restarted
			}
		default:
			return false
		}
	}
	return true
}

// tickEvents emits a tick event at each tick of the run's grid, and a
// missed event when a job's tick window ends without an execution (which
// jobs fire at a tick is known then: the edits before it have been made).
func (r *Run) tickEvents(ctx context.Context) {
	type mark struct {
		at     time.Time
		tick   int
		window bool // the tick's window ends
	}
	var marks []mark
	for t := 1; t <= r.cfg.Ticks(); t++ {
		marks = append(marks, mark{r.tickTime(t), t, false}, mark{r.tickTime(t).Add(r.cfg.Window()), t, true})
	}
	slices.SortStableFunc(marks, func(a, b mark) int { return a.at.Compare(b.at) })
	for _, m := range marks {
		if !backoff.Sleep(ctx, time.Until(m.at)) {
			return
		}
		r.mu.Lock()
		if !m.window {
			r.fired = m.tick
			r.mu.Unlock()
			r.labEvent(lab.Event{Kind: lab.EventTick, Tick: m.tick})
			continue
		}
		for _, j := range r.jobs {
			if !j.FiresAt(r.tickTime(m.tick), r.edits) {
				continue
			}
			// A write begun inside the window may commit just after it
			// (a loaded machine, a partition healing): the tick is missed
			// only if the attempts still inside end without a commit.
			if jt := (jobTick{j.Name, m.tick}); r.insideLocked(jt) {
				r.deferred[jt] = true
			} else {
				r.missLocked(jt)
			}
		}
		r.mu.Unlock()
	}
}

// openRun is a node's run of a job's tick that has begun (acquired:
// it may still enter the critical section, a paused node late) and not
// ended (released), its process alive. A node runs several jobs at once.
type openRun struct {
	node int
	jt   jobTick
}

// runKey names a node's run of a job's tick in Run.open: with its run
// attempt, since a reaper's retry can run beside the run it retries.
func runKey(node int, jt jobTick, attempt int) string {
	return fmt.Sprintf("%d|%s|%d|%d", node, jt.Job, jt.Tick, attempt)
}

// insideLocked reports whether a node's run of the job's tick has begun
// and not ended. Caller holds mu.
func (r *Run) insideLocked(jt jobTick) bool {
	for _, a := range r.open {
		if a.jt == jt {
			return true
		}
	}
	return false
}

// settleLocked records as missed the deferred ticks no attempt is inside
// any more and none committed. Caller holds mu.
func (r *Run) settleLocked() {
	for jt := range r.deferred {
		if !r.insideLocked(jt) {
			delete(r.deferred, jt)
			r.missLocked(jt)
		}
	}
}

// missLocked records a job's tick as missed unless it was executed or
// already recorded. Caller holds mu.
func (r *Run) missLocked(jt jobTick) {
	if r.executed[jt] == 0 && !r.missed[jt] {
		r.missed[jt] = true
		r.addLocked(lab.Event{T: r.secs(time.Now().UnixNano()), Kind: lab.EventMissed, Job: jt.Job, Tick: jt.Tick})
	}
}

// tickTime is when tick t of the run's grid fires (t from 1).
func (r *Run) tickTime(t int) time.Time { return r.start.Add(time.Duration(t-1) * r.cfg.Tick) }

// putCatalog creates the run's catalog (its namespace, one row per job)
// and the jobs' ledger rows, before any node starts.
func (r *Run) putCatalog(ctx context.Context) error {
	cat, err := schedule.NewCatalog(ctx, r.db, &schedule.CatalogConfig{Namespace: lab.Namespace(r.ID), EditDelay: editDelay})
	if err != nil {
		return fmt.Errorf("lab: the run's catalog: %w", err)
	}
	r.catalog = cat
	for _, j := range r.jobs {
		e, err := cat.Put(ctx, j.Entry(r.cfg))
		if err != nil {
			return fmt.Errorf("lab: the run's catalog: %s: %w", j.Name, err)
		}
		if e.EffectiveAt.After(r.effective) {
			r.effective = e.EffectiveAt
		}
		if _, err := r.db.ExecContext(ctx, lab.InsertLedgerSQL, r.ID, j.Name); err != nil {
			return fmt.Errorf("lab: the ledger of %s: %w", j.Name, err)
		}
	}
	return nil
}

// editDelay is how long after it commits a catalog edit of a run takes
// effect: long enough for every node's binder to see it first.
const editDelay = time.Second

// holderJobLocked is the job of the first node inside a critical section.
func (r *Run) holderJobLocked() string {
	for _, np := range r.nodes {
		if np.critical != "" || np.holding >= 0 {
			return np.job
		}
	}
	return ""
}
