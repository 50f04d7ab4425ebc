package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/aegislab/aegis/internal/errtext"
)

// MissCause says why a tick was missed: no replica started it by its
// starting deadline. It is a missed tick's cause in the store and the
// cause label of aegis_schedule_missed_total.
type MissCause string

const (
	// CauseHeld: the replicas that had the tick skipped it because the
	// job's key was held (lease mode: the lease; overlap forbid: a run of
	// an earlier tick still going).
	CauseHeld MissCause = "held"
	// CauseUnbound: no replica bound the schedule (none has its handler,
	// or a code job of the same name hides it).
	CauseUnbound MissCause = "unbound"
	// CausePaused: the catalog schedule was paused.
	CausePaused MissCause = "paused"
	// CauseMisfire: the replica that had the tick was late past its
	// starting deadline, and the misfire policy dropped it.
	CauseMisfire MissCause = "misfire"
	// CauseStore: the store did not answer the claim before the starting
	// deadline, or was a read-only standby.
	CauseStore MissCause = "store"
	// CauseDown: no replica was running at the tick (recorded by the first
	// replica to start after it).
	CauseDown MissCause = "down"
)

// A missed tick is recorded by a sweep that each replica with a run table
// (run-key and leader mode) runs every ReapInterval: for every schedule it
// knows (its jobs, the catalog schedules it bound, and those it did not:
// paused, or without a handler here) it walks the ticks whose starting
// deadline has passed since the last it swept (of a job whose loop runs
// here, only those the loop has settled: a loop woken late may still run
// the tick, or note why not), and inserts in one
// statement those that have no run row (or an overlap-forbid skip's) into
// the missed table, keyed by the tick: the first replica's insert lands,
// the others' change nothing. The cause is what this replica knows of the
// tick (a note its loop left: the misfire policy dropped it, the store
// did not answer); a schedule it did not bind waits one more deadline, so
// that a replica that bound it records it first, with a better cause.

// missSweepMax bounds the ticks one sweep walks for one schedule; the
// rest wait for the next sweep.
const missSweepMax = 1000

// missNote is a cause this replica's loop saw for the ticks from..to.
type missNote struct {
	from, to time.Time
	cause    MissCause
	detail   string
}

// watched is a catalog schedule this replica did not bind, whose ticks it
// still sweeps: paused, or not bound (no handler, a code job's name).
type watched struct {
	sched    Schedule
	deadline func(time.Time) time.Duration
	cause    MissCause
	detail   string
}

// misses is a scheduler's sweep state.
type misses struct {
	mu      sync.Mutex
	notes   map[string][]missNote // by job, at most maxNotes each
	swept   map[string]time.Time  // by job: the last tick swept
	watched map[string]watched    // by name, set by the binder
}

const maxNotes = 256

// note records the cause of ticks from..to of job, for its sweep.
func (m *misses) note(job string, from, to time.Time, cause MissCause, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.notes[job]) < maxNotes {
		m.notes[job] = append(m.notes[job], missNote{from: from, to: to, cause: cause, detail: detail})
	}
}

// cause is the noted cause of job's tick f, or CauseDown: no replica
// started it, and this one was not running it (it started late).
func (m *misses) cause(job string, f time.Time) (MissCause, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.notes[job] {
		if !f.Before(n.from) && !f.After(n.to) {
			return n.cause, n.detail
		}
	}
	return CauseDown, "no replica started it: none was running at its time, or each was past its starting deadline"
}

// forget drops the notes of job's ticks up to t, once swept.
func (m *misses) forget(job string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := m.notes[job][:0]
	for _, n := range m.notes[job] {
		if n.to.After(t) {
			ns = append(ns, n)
		}
	}
	m.notes[job] = ns
}

func (m *misses) setWatched(w map[string]watched) {
	m.mu.Lock()
	m.watched = w
	m.mu.Unlock()
}

// sweepTarget is a schedule a sweep walks.
type sweepTarget struct {
	name     string
	sched    Schedule
	deadline func(time.Time) time.Duration
	cause    MissCause // "" for a bound job: its notes say
	detail   string
	// A bound job whose loop runs here: the sweep stops at upTo, the
	// last tick the loop settled (job.settled).
	loop *job
}

// targets lists the schedules to sweep: the bound jobs, then the watched
// catalog schedules.
func (s *Scheduler) targets() []sweepTarget {
	var out []sweepTarget
	for _, j := range s.reapable() {
		out = append(out, sweepTarget{name: j.Name, sched: j.sched, deadline: j.deadline, loop: j})
	}
	s.misses.mu.Lock()
	defer s.misses.mu.Unlock()
	for name, w := range s.misses.watched {
		out = append(out, sweepTarget{name: name, sched: w.sched, deadline: w.deadline, cause: w.cause, detail: w.detail})
	}
	return out
}

// sweepMissed records missed ticks every ReapInterval until ctx ends.
func (s *Scheduler) sweepMissed(ctx context.Context, st *Store) {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, tg := range s.targets() {
			if err := s.sweep(ctx, st, tg); err != nil && ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Job: tg.name, Reason: "record missed ticks", Err: err})
			}
		}
	}
}

// missRow is a tick handed to the miss statement.
type missRow struct {
	F int64     `json:"f"`
	C MissCause `json:"c"`
	D string    `json:"d"`
}

// sweep records tg's missed ticks since the last swept (at first: since
// the last tick on record before this scheduler started, run or missed,
// but not before that start less the retention; or since the start).
func (s *Scheduler) sweep(ctx context.Context, st *Store, tg sweepTarget) error {
	now := s.cfg.Clock.Now()
	s.misses.mu.Lock()
	from, ok := s.misses.swept[tg.name]
	s.misses.mu.Unlock()
	if !ok {
		// Before this replica started: a tick since, its own loop (or
		// another replica's) may have run before this first sweep.
		last, err := st.lastRecorded(ctx, tg.name, s.startedAt)
		if err != nil {
			return err
		}
		from = s.startedAt
		if !last.IsZero() && last.Before(from) {
			from = last
			if keep := now.Add(-s.cfg.Retention); from.Before(keep) {
				from = keep
			}
		}
	}
	var upTo time.Time
	looping := false
	if tg.loop != nil {
		upTo, looping = tg.loop.sweepable()
	}
	var rows []missRow
	through := from
	for f := tg.sched.Next(from); !f.IsZero() && len(rows) < missSweepMax; f = tg.sched.Next(f) {
		wait := tg.deadline(f) + s.cfg.ReapInterval // a claim at the deadline has landed
		if tg.cause != "" {
			wait += tg.deadline(f) // a replica that bound it records it first
		}
		if now.Sub(f) <= wait || looping && f.After(upTo) {
			break // not yet: or this replica's loop has yet to settle it
		}
		cause, detail := tg.cause, tg.detail
		if cause == "" {
			cause, detail = s.misses.cause(tg.name, f)
		}
		rows = append(rows, missRow{F: f.UnixMilli(), C: cause, D: errtext.Clean(detail)})
		through = f
	}
	if len(rows) > 0 {
		recorded, err := st.miss(ctx, tg.name, s.cfg.Node, rows)
		if err != nil {
			return err
		}
		for _, m := range recorded {
			s.emit(Event{Kind: EventMissed, Job: tg.name, Fire: m.Fire, Cause: m.Cause, Reason: m.Detail})
		}
		if len(recorded) > 0 {
			if err := st.prune(ctx, tg.name, through.Add(-s.cfg.Retention)); err != nil {
				return err
			}
		}
		s.misses.forget(tg.name, through)
	}
	s.misses.mu.Lock()
	s.misses.swept[tg.name] = through
	s.misses.mu.Unlock()
	return nil
}
