package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis/driver"
)

// ErrPaused is returned by RunNow for a paused schedule.
var ErrPaused = errors.New("schedule: paused")

// RunNow asks for one extra run of the schedule as soon as possible
// (db-scheduler's "run now", Quartz's triggerJob): a tick whose fire time
// is the store's time when RunNow commits (Entry.RunNow). Every replica's
// binder sees the request as it sees an edit (NOTIFY on PostgreSQL, else
// within its 500ms poll), and the replicas that have the handler fire it
// as a tick: in run-key and leader mode its run key (the schedule, that
// fire time) lets one replica run it, recorded in the run table with its
// node and token like any run; in lease mode one replica takes it under
// the schedule's lease (the row records that it was taken, so a replica
// that saw the request late does not run it again). The overlap policy
// applies as to a tick. The regular ticks do not move.
//
// A request is fired only by the replicas that read it within the
// schedule's StartingDeadline (default 1 minute, on the store's clock): a
// replica that starts later does not run an older one. A RunNow before
// the previous one was claimed replaces it: requests that no replica has
// claimed yet give one run. A pause, or a delete, before the claim
// cancels the request (it is not run after a resume).
//
// A paused schedule is refused with an error wrapping ErrPaused; an
// unknown one with ErrNotFound. It returns the row as written.
func (c *Catalog) RunNow(ctx context.Context, name string) (Entry, error) {
	if err := driver.CheckKey(name); err != nil {
		return Entry{}, fmt.Errorf("schedule: run now: name: %w", err)
	}
	err := c.edit(ctx, func(tx execer, gen, now int64) error {
		// The row's version stays: a run now changes no spec or policy,
		// and the binders need not rebind the schedule (the namespace's
		// change counter still moves, so they read the row).
		res, err := tx.ExecContext(ctx, c.q.runNow, c.ns, name, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		var r row
		switch err := r.scan(tx.QueryRowContext(ctx, c.q.get, c.ns, name)); {
		case errors.Is(err, sql.ErrNoRows):
			return c.notFound(ctx, tx, name, gen)
		case err != nil:
			return err
		}
		return fmt.Errorf("%w: schedule %q in namespace %q is paused: resume it first", ErrPaused, name, c.ns)
	})
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: run now %q: %w", name, err)
	}
	return c.Get(ctx, name)
}

// runNowDeadline is how late a run now may start: the schedule's
// StartingDeadline, else a minute (a tick's default, half its period,
// could be shorter than the time the request takes to reach the
// replicas).
func (j *job) runNowDeadline() time.Duration {
	if j.StartingDeadline > 0 {
		return j.StartingDeadline
	}
	return time.Minute
}

// startBy is how late tick f (a run now when oneOff) may start.
func (j *job) startBy(f time.Time, oneOff bool) time.Duration {
	if oneOff {
		return j.runNowDeadline()
	}
	return j.deadline(f)
}

// fireRunsNow fires the run-now requests of the rows (the schedules bound
// here) that this binder has not fired yet, each in a goroutine of the
// scheduler's: a run now does not wait for the schedule's loop, which may
// be waiting for a run of a catch-up.
func (b *binder) fireRunsNow(ctx context.Context, want map[string]*row) {
	for name, r := range want {
		if !r.runNowMS.Valid || b.runNow[name] == r.runNowMS.Int64 {
			continue
		}
		b.runNow[name] = r.runNowMS.Int64
		j := b.jobs[name]
		if j == nil {
			continue // not bound here (the mode refused it): reported already
		}
		f := time.UnixMilli(r.runNowMS.Int64).UTC()
		// The store's clock, as the request's: how long ago it came. An old
		// request is history (run, or dropped, by the replicas then up); a
		// replica that starts later does not run it.
		if late := time.Duration(r.readMS-r.runNowMS.Int64) * time.Millisecond; late > j.runNowDeadline() {
			continue
		}
		b.s.emit(Event{Kind: EventRunNow, Job: name, Fire: f, Reason: "run now requested"})
		b.s.wg.Go(func() { j.fire(ctx, f, true) })
	}
}

// takeRunNow is lease mode's catalog half of a run now's claim: the row
// records that this replica took the request at f. ok false when the
// request was taken before, replaced by a later one, or cancelled by a
// pause or delete.
func (s *Scheduler) takeRunNow(ctx context.Context, j *job, f time.Time) (c claimed, ok bool, err error) {
	cat := s.cfg.Catalog
	var args string
	err = cat.db.QueryRowContext(ctx, cat.q.take, cat.ns, j.Name, f.UnixMilli()).Scan(&args, &c.version)
	if errors.Is(err, sql.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	c.args = json.RawMessage(args)
	return c, true, nil
}

// refusal is the reason of an EventRefused.
func refusal(oneOff bool) string {
	if oneOff {
		return "the catalog refused the run now: a later RunNow replaced it, or the schedule was paused or deleted"
	}
	return "the catalog refused the tick: the schedule is paused, deleted or changed at this fire time"
}
