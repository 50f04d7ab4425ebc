package queue

import (
	"context"
	"time"
)

const (
	reapBatch    = 1000
	promoteBatch = 5000
	pruneBatch   = 10000
	pruneEvery   = time.Minute
)

// maintenanceLoop reclaims expired leases and promotes due scheduled jobs
// every ReapInterval (sooner when a scheduled job is due sooner), and
// prunes finished jobs past their retention every minute.
//
// Every started client runs it. The statements lock the rows they change
// with SKIP LOCKED, so the loops of several clients never take the same
// row and never wait for each other: a job is reclaimed by one reaper,
// once.
func (c *Client) maintenanceLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	wakeAt := time.Now()
	var lastPrune time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-c.nextScheduled:
			if at.Before(wakeAt) {
				wakeAt = at
				t.Reset(max(time.Until(at), 0))
			}
			continue
		case <-t.C:
		}
		var ps pass
		ps.start = time.Now()
		c.reap(ctx, &ps)
		next := c.promote(ctx, &ps)
		c.vacuum(ctx, &ps)
		if time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			c.prune(ctx, &ps)
		}
		if ctx.Err() != nil {
			return
		}
		if c.tracer != nil {
			c.tracePass(&ps)
		}
		wakeAt = time.Now().Add(next)
		t.Reset(next)
	}
}

// pass is what one round of the maintenance loop did, for its span.
type pass struct {
	start, reapEnd time.Time
	reclaimed      int // made available again or discarded
	discarded      int
	promoted       int
	pruned         int64
	vacuumed       bool
	reapErr, err   error // the reclaim's error; the first error of the pass
}

// failed notes err (when ctx is live) as the pass's first error.
func (ps *pass) failed(ctx context.Context, err error) {
	if ctx.Err() == nil && ps.err == nil {
		ps.err = err
	}
}

// reap makes the jobs whose lease expired available again, with a bumped
// token (or discards them when they have no attempts left).
func (c *Client) reap(ctx context.Context, ps *pass) {
	defer func() { ps.reapEnd = time.Now() }()
	for {
		got, err := c.sql.reap(ctx, c.db, reapBatch)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("queue: reap expired leases", "err", err)
				ps.reapErr = err
			}
			ps.failed(ctx, err)
			return
		}
		ps.reclaimed += len(got)
		for _, r := range got {
			c.metrics.reaped(r.queue).Inc()
			if r.available {
				c.log.Warn("queue: lease expired: job reclaimed with a new token", "job_id", r.id, "queue", r.queue)
			} else {
				c.metrics.discarded(r.queue).Inc()
				ps.discarded++
				c.log.Error("queue: lease expired on the job's last attempt: discarded", "job_id", r.id, "queue", r.queue)
			}
		}
		if len(got) < reapBatch {
			return
		}
	}
}

// promote makes due scheduled jobs available and returns how long to wait
// before the next round.
func (c *Client) promote(ctx context.Context, ps *pass) time.Duration {
	next := c.cfg.ReapInterval
	for {
		n, err := c.sql.promote(ctx, c.db, promoteBatch)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("queue: promote scheduled jobs", "err", err)
			}
			ps.failed(ctx, err)
			return next
		}
		ps.promoted += n
		if n < promoteBatch {
			break
		}
	}
	d, ok, err := c.sql.nextScheduled(ctx, c.db)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("queue: find the next scheduled job", "err", err)
		}
		ps.failed(ctx, err)
		return next
	}
	if ok && d < next {
		next = max(d, time.Millisecond)
	}
	return next
}

// prune deletes finished jobs past their retention.
func (c *Client) prune(ctx context.Context, ps *pass) {
	for {
		tag, err := c.db.Exec(ctx, c.stmt(pruneSQL), c.cfg.CompletedRetention.Microseconds(), c.cfg.DeadRetention.Microseconds(), pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("queue: prune finished jobs", "err", err)
			}
			ps.failed(ctx, err)
			return
		}
		ps.pruned += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return
		}
	}
}

// vacuum vacuums the hot table when it has many dead rows.
func (c *Client) vacuum(ctx context.Context, ps *pass) {
	if c.cfg.VacuumDeadRows < 0 {
		return
	}
	var dead, live int64
	if err := c.db.QueryRow(ctx, c.stmt(deadRowsSQL)).Scan(&dead, &live); err != nil {
		if ctx.Err() == nil {
			c.log.Error("queue: read the hot table's statistics", "err", err)
		}
		ps.failed(ctx, err)
		return
	}
	if dead <= int64(c.cfg.VacuumDeadRows) {
		return
	}
	// Below as many dead rows as live ones, a VACUUM (which scans every
	// index whole) costs more than the dead rows, unless the queue has a
	// deep backlog: then every claim walks over the index entries of the
	// jobs claimed since the last VACUUM, and with a million jobs queued
	// the claims slowed down to a third within ten seconds. So it also
	// runs when the time since the last one is ten times what that one
	// took: at most a tenth of this loop's time.
	if dead <= live && time.Since(c.vacuumEnd) < 10*c.vacuumTook {
		return
	}
	start := time.Now()
	if _, err := c.db.Exec(ctx, c.stmt(vacuumSQL)); err != nil {
		if ctx.Err() == nil {
			c.log.Error("queue: vacuum the hot table", "err", err)
		}
		ps.failed(ctx, err)
		return
	}
	ps.vacuumed = true
	c.vacuumEnd, c.vacuumTook = time.Now(), time.Since(start)
	c.log.Debug("queue: vacuumed the hot table", "dead_rows", dead, "live_rows", live, "took", c.vacuumTook)
}
